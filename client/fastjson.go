package client

import (
	"bytes"
	"encoding/json"
)

// The answers on the check path have a fixed shape (api/encode.go writes
// them by hand too), so the client reads them with a small scanner instead of
// reflection. Anything it does not expect — escapes in strings, unknown
// fields, floats — sends the answer to encoding/json instead, so a server
// that adds a field costs speed, not correctness.

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\n', '\r', '\t':
			s.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes and returns its bytes.
func (s *scanner) str() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	j := bytes.IndexByte(s.b[s.i:], '"')
	if j < 0 {
		return nil, false
	}
	v := s.b[s.i : s.i+j]
	if bytes.IndexByte(v, '\\') >= 0 {
		return nil, false
	}
	s.i += j + 1
	return v, true
}

func (s *scanner) int() (int64, bool) {
	s.ws()
	neg := false
	if s.i < len(s.b) && s.b[s.i] == '-' {
		neg = true
		s.i++
	}
	start := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if s.i-start >= 18 {
			return 0, false // leave huge numbers to encoding/json
		}
		v = v*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	if s.i == start {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

func (s *scanner) boolean() (bool, bool) {
	s.ws()
	if bytes.HasPrefix(s.b[s.i:], []byte("true")) {
		s.i += 4
		return true, true
	}
	if bytes.HasPrefix(s.b[s.i:], []byte("false")) {
		s.i += 5
		return false, true
	}
	return false, false
}

// decision reads one decision object or error entry into w.
func (s *scanner) decision(w *wireDecision) bool {
	*w = wireDecision{}
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.next(':') {
			return false
		}
		switch string(k) {
		case "allowed":
			w.Allowed, ok = s.boolean()
		case "shadow_refused":
			w.ShadowRefused, ok = s.boolean()
		case "replayed":
			w.Replayed, ok = s.boolean()
		case "reason":
			var r []byte
			r, ok = s.str()
			w.Reason = string(r)
		case "limit":
			w.Limit, ok = s.int()
		case "remaining":
			w.Remaining, ok = s.int()
		case "reset_after_ms":
			w.ResetAfterMS, ok = s.int()
		case "retry_after_ms":
			w.RetryAfterMS, ok = s.int()
		case "delay_ms":
			w.DelayMS, ok = s.int()
		case "error":
			w.Error = &wireError{}
			ok = s.errorObject(w.Error)
		default:
			return false
		}
		if !ok {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

func (s *scanner) errorObject(e *wireError) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.next(':') {
			return false
		}
		v, ok := s.str()
		if !ok {
			return false
		}
		switch string(k) {
		case "code":
			e.Code = string(v)
		case "field":
			e.Field = string(v)
		case "message":
			e.Message = string(v)
		default:
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// parseBatch reads {"results":[...]} into dst (reused), falling back to
// encoding/json for anything unexpected.
func parseBatch(b []byte, dst []wireDecision) ([]wireDecision, error) {
	dst = dst[:0]
	s := scanner{b: b}
	if s.next('{') {
		if k, ok := s.str(); ok && string(k) == "results" && s.next(':') && s.next('[') {
			ok := true
			if !s.next(']') {
				for {
					dst = append(dst, wireDecision{})
					if !s.decision(&dst[len(dst)-1]) {
						ok = false
						break
					}
					if s.next(']') {
						break
					}
					if !s.next(',') {
						ok = false
						break
					}
				}
			}
			if ok && s.next('}') && s.end() {
				return dst, nil
			}
		}
	}
	var wb wireBatch
	if err := json.Unmarshal(b, &wb); err != nil {
		return dst[:0], err
	}
	return append(dst[:0], wb.Results...), nil
}

// parseDecision reads one decision object, falling back to encoding/json.
func parseDecision(b []byte) (wireDecision, error) {
	var w wireDecision
	s := scanner{b: b}
	if s.decision(&w) && s.end() {
		return w, nil
	}
	w = wireDecision{}
	err := json.Unmarshal(b, &w)
	return w, err
}
