package api

import (
	"bytes"
	"unicode/utf8"
)

// The check body is decoded on every request, and encoding/json costs about
// ten allocations and most of the handler's time for it (a Decoder, its
// buffer, reflection). fastCheck reads the shape real clients send without
// reflection, in one pass that also does scanJSON's work; anything else
// falls back to scanJSON and encoding/json, which stay the reference for
// what is accepted and own every error message.

// fastCheckJSON is checkJSON as spans of the body.
type fastCheckJSON struct {
	key, policy, limit, requestID []byte
	cost                          int64
	hasCost                       bool
}

// fastCheck decodes data as a check body when it is a JSON object whose
// members are spelled exactly as checkJSON's fields, each at most once,
// whose strings hold no escapes and are valid UTF-8, whose cost is an
// integer within int64 (or null) and whose limit is null or a flat object
// that fastParser.object validates, with nothing but white space around it.
// It reports false for anything else, and then decodes nothing the caller
// may use. What it accepts scanJSON accepts too (valid UTF-8, no duplicate
// members) and encoding/json reads alike, so a body it accepts needs neither.
func fastCheck(data []byte, out *fastCheckJSON) bool {
	p := fastParser{data: data}
	p.ws()
	return p.check(out) && p.end()
}

// fastBatch is fastCheck for a batch body, {"checks":[check, ...]} and no
// other member, appending the checks to out; like fastCheck, what it accepts
// needs no scanJSON. It gives up (false) past maxChecks
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

// Members of a check, as bits of the set of those already read: a repeated
// member is left to scanJSON, which names it.
const (
	memberKey = 1 << iota
	memberPolicy
	memberRequestID
	memberCost
	memberLimit
)

// check reads one check object.
func (p *fastParser) check(out *fastCheckJSON) bool {
	if !p.byte('{') {
		return false
	}
	p.ws()
	if p.byte('}') {
		return true
	}
	var seen, m uint8
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
			m = memberKey
			out.key, ok = p.str()
		case "policy":
			m = memberPolicy
			out.policy, ok = p.str()
		case "request_id":
			m = memberRequestID
			out.requestID, ok = p.str()
		case "cost":
			m = memberCost
			if p.literal("null") {
				out.hasCost = false
			} else {
				out.cost, ok = p.int()
				out.hasCost = true
			}
		case "limit":
			m = memberLimit
			if p.literal("null") {
				out.limit = nil
			} else {
				out.limit, ok = p.object()
			}
		default:
			return false
		}
		if !ok || seen&m != 0 {
			return false
		}
		seen |= m
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

// str reads a string without escapes or control characters, in valid UTF-8,
// and returns its contents.
func (p *fastParser) str() ([]byte, bool) {
	s, ascii, ok := p.span()
	return s, ok && (ascii || utf8.Valid(s))
}

// span is str without the UTF-8 check: ascii says whether the contents are
// all ASCII (and so need none).
func (p *fastParser) span() (s []byte, ascii, ok bool) {
	if !p.byte('"') {
		return nil, false, false
	}
	start := p.i
	var high byte
	for p.i < len(p.data) {
		switch c := p.data[p.i]; {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			return s, high < utf8.RuneSelf, true
		case c == '\\' || c < 0x20:
			return nil, false, false
		default:
			high |= c
		}
		p.i++
	}
	return nil, false, false
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

// maxFastLimitMembers bounds the members of an inline limit that object
// compares for duplicates; a limit has seven fields, so more is left to the
// slow path.
const maxFastLimitMembers = 8

// object returns the bytes of the object that starts here when it is valid
// JSON and passes scanJSON, and is of the shape an inline limit has: member
// names of ASCII without escapes (so valid UTF-8, and compared for
// duplicates with bytes.EqualFold as scanJSON compares them), values that are strings as str reads them, numbers or true, false
// and null; nothing nested. Anything else (an escape, a nested value, a
// non-ASCII name) is left to the slow path, which names the error or reads
// it alike.
func (p *fastParser) object() ([]byte, bool) {
	start := p.i
	if !p.byte('{') {
		return nil, false
	}
	p.ws()
	if p.byte('}') {
		return p.data[start:p.i], true
	}
	var names [maxFastLimitMembers][]byte
	for n := 0; ; n++ {
		name, ascii, ok := p.span()
		if !ok || !ascii || n == len(names) {
			return nil, false
		}
		for _, prev := range names[:n] {
			if bytes.EqualFold(prev, name) {
				return nil, false
			}
		}
		names[n] = name
		p.ws()
		if !p.byte(':') {
			return nil, false
		}
		p.ws()
		if !p.scalar() {
			return nil, false
		}
		p.ws()
		if p.byte('}') {
			return p.data[start:p.i], true
		}
		if !p.byte(',') {
			return nil, false
		}
		p.ws()
	}
}

// scalar reads a string (as str does), a number or a literal.
func (p *fastParser) scalar() bool {
	if p.i >= len(p.data) {
		return false
	}
	switch c := p.data[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	}
	return p.literal("null")
}

// number reads a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) number() bool {
	p.byte('-')
	if !p.byte('0') && p.digits() == 0 {
		return false
	}
	if p.byte('.') && p.digits() == 0 {
		return false
	}
	if p.byte('e') || p.byte('E') {
		if !p.byte('+') {
			p.byte('-')
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

// digits reads decimal digits and returns how many.
func (p *fastParser) digits() int {
	start := p.i
	for p.i < len(p.data) && '0' <= p.data[p.i] && p.data[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// maxInternedPolicies bounds the policy names interned from check bodies
// (Server.policyNames): a handful of names arrive on every request, and each
// would otherwise cost a string; past the bound, names are allocated per
// request (a client sending endless distinct names gains nothing).
const maxInternedPolicies = 256
