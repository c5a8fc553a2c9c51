package wire

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ErrNoDecision is a decision object that has neither "allowed" nor
// "error": every decision the server writes has one of them, so a body
// without either is not an answer of limitd's (a proxy's, a truncated one).
var ErrNoDecision = errors.New(`decision without "allowed" or "error"`)

// ParseDecision reads one decision object (or error entry).
func ParseDecision(b []byte) (Decision, error) {
	var d Decision
	s := scanner{b: b}
	if ok, seen := s.decision(&d); ok && s.end() {
		if !seen {
			return Decision{}, ErrNoDecision
		}
		return d, nil
	}
	var j jsonDecision
	if err := json.Unmarshal(b, &j); err != nil {
		return Decision{}, err
	}
	return j.decision()
}

// ParseBatch reads a /v1/check/batch answer into dst (reused).
func ParseBatch(b []byte, dst []Decision) ([]Decision, error) {
	dst = dst[:0]
	s := scanner{b: b}
	if s.next('{') {
		if k, ok := s.str(); ok && string(k) == "results" && s.next(':') && s.next('[') {
			ok := true
			if !s.next(']') {
				for {
					dst = append(dst, Decision{})
					if dok, seen := s.decision(&dst[len(dst)-1]); !dok || !seen {
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
	var jb struct {
		Results []jsonDecision `json:"results"`
	}
	if err := json.Unmarshal(b, &jb); err != nil {
		return dst[:0], err
	}
	dst = dst[:0]
	for i := range jb.Results {
		d, err := jb.Results[i].decision()
		if err != nil {
			return dst[:0], err
		}
		dst = append(dst, d)
	}
	return dst, nil
}

// ParseError reads an error body {"error":{...}}; ok is false when b is not
// one (no code), as from a proxy in front of limitd.
func ParseError(b []byte) (e Error, ok bool) {
	s := scanner{b: b}
	if s.next('{') {
		if k, kok := s.str(); kok && string(k) == "error" && s.next(':') && s.errorObject(&e) && s.next('}') && s.end() {
			return e, e.Code != ""
		}
	}
	var env struct {
		Error Error `json:"error"`
	}
	if json.Unmarshal(b, &env) != nil {
		return Error{}, false
	}
	return env.Error, env.Error.Code != ""
}

// jsonDecision is the reflection path's decision: Allowed is a pointer so
// that a missing "allowed" is told from false.
type jsonDecision struct {
	Decision
	Allowed *bool `json:"allowed"`
}

func (j *jsonDecision) decision() (Decision, error) {
	if j.Allowed == nil && j.Error == nil {
		return Decision{}, ErrNoDecision
	}
	d := j.Decision
	if j.Allowed != nil {
		d.Allowed = *j.Allowed
	}
	return d, nil
}

// scanner reads the fixed shapes the server writes, with no allocation. It
// gives up (false) on anything else, for encoding/json to read.
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

// decision reads one decision object or error entry into d; seen says
// whether it had "allowed" or "error".
func (s *scanner) decision(d *Decision) (ok, seen bool) {
	*d = Decision{}
	if !s.next('{') {
		return false, false
	}
	if s.next('}') {
		return true, false
	}
	for {
		k, ok := s.str()
		if !ok || !s.next(':') {
			return false, false
		}
		switch string(k) {
		case "allowed":
			d.Allowed, ok = s.boolean()
			seen = true
		case "shadow_refused":
			d.ShadowRefused, ok = s.boolean()
		case "replayed":
			d.Replayed, ok = s.boolean()
		case "degraded":
			d.Degraded, ok = s.boolean()
		case "reason":
			var r []byte
			r, ok = s.str()
			d.Reason = string(r)
		case "limit":
			d.Limit, ok = s.int()
		case "remaining":
			d.Remaining, ok = s.int()
		case "reset_after_ms":
			d.ResetAfterMS, ok = s.int()
		case "retry_after_ms":
			d.RetryAfterMS, ok = s.int()
		case "delay_ms":
			d.DelayMS, ok = s.int()
		case "slot":
			var v []byte
			v, ok = s.str()
			d.Slot = string(v)
		case "slot_expires_ms":
			d.SlotExpiresMS, ok = s.int()
		case "reservation":
			var v []byte
			v, ok = s.str()
			d.Reservation = string(v)
		case "reservation_expires_ms":
			d.ReservationExpiresMS, ok = s.int()
		case "debt":
			d.Debt, ok = s.int()
		case "error":
			d.Error = &Error{}
			ok = s.errorObject(d.Error)
			seen = true
		default:
			return false, false
		}
		if !ok {
			return false, false
		}
		if s.next('}') {
			return true, seen
		}
		if !s.next(',') {
			return false, false
		}
	}
}

func (s *scanner) errorObject(e *Error) bool {
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
