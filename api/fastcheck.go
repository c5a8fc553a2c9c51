package api

import (
	"encoding/json"
	"sync"
	"sync/atomic"
)

// The check body is decoded on every request, and encoding/json costs about
// ten allocations and most of the handler's time for it (a Decoder, its
// buffer, reflection). fastCheck reads the shape real clients send without
// reflection; anything else falls back to encoding/json, which stays the
// reference for what is accepted and owns every error message.

// fastCheckJSON is checkJSON as spans of the body.
type fastCheckJSON struct {
	key, policy, limit, requestID []byte
	cost                          int64
	hasCost                       bool
}

// fastCheck decodes data as a check body when it is a JSON object whose
// members are spelled exactly as checkJSON's fields, whose strings hold no
// escapes, whose cost is an integer within int64 (or null) and whose limit
// is a valid JSON object (or null), with nothing but white space around it.
// It reports false for anything else, and then decodes nothing the caller
// may use. data must have passed scanJSON (valid UTF-8, no duplicate
// members), so what is accepted here encoding/json reads alike.
func fastCheck(data []byte, out *fastCheckJSON) bool {
	p := fastParser{data: data}
	p.ws()
	return p.check(out) && p.end()
}

// fastBatch is fastCheck for a batch body, {"checks":[check, ...]} and no
// other member, appending the checks to out. It gives up (false) past maxChecks
// checks, leaving the count's error to the slow path.
func fastBatch(data []byte, out []fastCheckJSON, maxChecks int) ([]fastCheckJSON, bool) {
	p := fastParser{data: data}
	p.ws()
	if !p.byte('{') {
		return out, false
	}
	p.ws()
	if name, ok := p.str(); !ok || string(name) != "checks" {
		return out, false
	}
	p.ws()
	if !p.byte(':') {
		return out, false
	}
	p.ws()
	if !p.byte('[') {
		return out, false
	}
	p.ws()
	if !p.byte(']') {
		for {
			if len(out) == maxChecks {
				return out, false
			}
			out = append(out, fastCheckJSON{})
			if !p.check(&out[len(out)-1]) {
				return out, false
			}
			p.ws()
			if p.byte(']') {
				break
			}
			if !p.byte(',') {
				return out, false
			}
			p.ws()
		}
	}
	p.ws()
	return out, p.byte('}') && p.end()
}

// check reads one check object.
func (p *fastParser) check(out *fastCheckJSON) bool {
	if !p.byte('{') {
		return false
	}
	p.ws()
	if p.byte('}') {
		return true
	}
	for {
		name, ok := p.str()
		if !ok {
			return false
		}
		p.ws()
		if !p.byte(':') {
			return false
		}
		p.ws()
		switch string(name) {
		case "key":
			out.key, ok = p.str()
		case "policy":
			out.policy, ok = p.str()
		case "request_id":
			out.requestID, ok = p.str()
		case "cost":
			if p.literal("null") {
				out.hasCost = false
			} else {
				out.cost, ok = p.int()
				out.hasCost = true
			}
		case "limit":
			if p.literal("null") {
				out.limit = nil
			} else {
				out.limit, ok = p.object()
			}
		default:
			return false
		}
		if !ok {
			return false
		}
		p.ws()
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
		p.ws()
	}
}

type fastParser struct {
	data []byte
	i    int
}

func (p *fastParser) ws() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) byte(c byte) bool {
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only white space follows.
func (p *fastParser) end() bool {
	p.ws()
	return p.i == len(p.data)
}

func (p *fastParser) literal(lit string) bool {
	if len(p.data)-p.i >= len(lit) && string(p.data[p.i:p.i+len(lit)]) == lit {
		p.i += len(lit)
		return true
	}
	return false
}

// str reads a string without escapes or control characters and returns its
// contents.
func (p *fastParser) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.data) {
		switch c := p.data[p.i]; {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// int reads an integer in JSON's grammar (no leading zeros, no fraction or
// exponent) that fits int64.
func (p *fastParser) int() (int64, bool) {
	neg := p.byte('-')
	start := p.i
	var n uint64
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(p.data[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	switch {
	case digits == 0, digits > 1 && p.data[start] == '0':
		return 0, false
	case p.i < len(p.data) && (p.data[p.i] == '.' || p.data[p.i] == 'e' || p.data[p.i] == 'E'):
		return 0, false
	case neg && n <= 1<<63:
		return -int64(n), true // -(1<<63) wraps to itself: math.MinInt64
	case !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// object returns the bytes of the JSON object that starts here, when it is
// valid JSON.
func (p *fastParser) object() ([]byte, bool) {
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return nil, false
	}
	start, depth, inStr := p.i, 0, false
	for ; p.i < len(p.data); p.i++ {
		c := p.data[p.i]
		if inStr {
			switch c {
			case '\\':
				p.i++ // whatever is escaped cannot end the string
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				p.i++
				obj := p.data[start:p.i]
				// Braces balanced by counting are not proof of JSON: the
				// slice must be valid on its own, or the whole body would be
				// judged by the limit decoder's error rather than the body's.
				return obj, json.Valid(obj)
			}
		}
	}
	return nil, false
}

// policyNames interns policy names read from check bodies: a handful of
// names arrive on every request, and each would otherwise cost a string.
type policyNames struct {
	names atomic.Pointer[map[string]string] // copied on write
	mu    sync.Mutex
}

// maxInternedPolicies bounds policyNames; past it, names are allocated per
// request (a client sending endless distinct names gains nothing).
const maxInternedPolicies = 256

func (pn *policyNames) get(b []byte) string {
	if m := pn.names.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	pn.mu.Lock()
	defer pn.mu.Unlock()
	old := pn.names.Load()
	if old != nil && len(*old) >= maxInternedPolicies {
		return s
	}
	m := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[s] = s
	pn.names.Store(&m)
	return s
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
