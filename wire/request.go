package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// encoding/json silently replaces invalid UTF-8 (and unpaired surrogate
// escapes) in strings with U+FFFD, so "u\xff" and "u\xfe" would become the
// same key and share a budget; and it takes the last of duplicate object
// members (matching names case-insensitively), so {"cost":1,"cost":0} would
// be a peek. Keys are exact bytes and requests mean one thing: ScanRequest
// walks the raw body before it is decoded and refuses both, naming the field.
// It is one pass with no allocation for ordinary bodies; it leaves malformed
// JSON to encoding/json, which reports it better.

// maxScanDepth bounds the walk. limitd's requests nest three levels; a
// deeper value is refused by the decoder anyway (it matches no field).
const maxScanDepth = 16

// maxLinearKeys is how many members of one object are compared pairwise;
// past it a map is used, so a huge object costs linear time.
const maxLinearKeys = 32

type span struct{ start, end int } // a string's raw contents, without quotes

type scanLevel struct {
	array bool
	index int  // array: the element being scanned
	key   span // object: the member being scanned
	keys  int  // object: index in scanner.keys of its first member
	seen  map[string]struct{}
}

type jsonScanner struct {
	data   []byte
	i      int
	fold   bool // member names match case-insensitively, as struct fields do
	only   int  // > 0: report only what is found at most this many levels deep
	prefix string
	err    *FieldError
	depth  int
	levels [maxScanDepth]scanLevel
	// Member names of the open objects, innermost last. A fixed array, not a
	// slice of one, so that the scanner stays on the stack.
	keys  [2 * maxLinearKeys]span
	nkeys int
}

// FieldError is a request ScanRequest refuses: the field (a path such as
// "checks[2].key") and what is wrong with it.
type FieldError struct {
	Field, Message string
}

// ScanRequest checks a request body as described above. fold says whether
// member names are matched case-insensitively (struct fields) or exactly
// (map keys); only > 0 limits the report to values at most that many levels
// deep (an envelope whose entries are checked one by one). prefix is the
// path of data within the request.
func ScanRequest(data []byte, prefix string, fold bool, only int) *FieldError {
	s := jsonScanner{data: data, prefix: prefix, fold: fold, only: only}
	s.value()
	return s.err
}

func (s *jsonScanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value; false stops the walk (an error, malformed input or
// too deep).
func (s *jsonScanner) value() bool {
	s.ws()
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		_, ok, valid := s.str()
		if ok && !valid && s.reports() {
			s.err = &FieldError{Field: s.path(), Message: "is not valid UTF-8: strings (keys, names, ids) are exact bytes and must be UTF-8 text"}
			return false
		}
		return ok
	default:
		// A number or literal: its bytes are checked by the decoder.
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			s.i++
		}
		return true
	}
}

// reports says whether a problem at the current depth is reported.
func (s *jsonScanner) reports() bool { return s.only == 0 || s.depth <= s.only }

func (s *jsonScanner) push(array bool) bool {
	if s.depth == maxScanDepth {
		return false
	}
	s.levels[s.depth] = scanLevel{array: array, keys: s.nkeys}
	s.depth++
	s.i++ // the opening bracket
	return true
}

func (s *jsonScanner) pop() {
	s.depth--
	s.nkeys = s.levels[s.depth].keys
	s.levels[s.depth].seen = nil
	s.i++ // the closing bracket
}

func (s *jsonScanner) object() bool {
	if !s.push(false) {
		return false
	}
	lv := &s.levels[s.depth-1]
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.pop()
		return true
	}
	for {
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return false
		}
		lv.key = span{} // path() names the object until the name is read
		key, ok, valid := s.str()
		if !ok {
			return false
		}
		if !valid && s.reports() {
			s.err = &FieldError{Field: s.path(), Message: "has a member name that is not valid UTF-8"}
			return false
		}
		lv.key = key
		if s.duplicate(lv, key) && s.reports() {
			s.err = &FieldError{Field: s.path(), Message: "is given twice; each field may appear once"}
			return false
		}
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		if !s.value() {
			return false
		}
		s.ws()
		if s.i >= len(s.data) {
			return false
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case '}':
			s.pop()
			return true
		default:
			return false
		}
	}
}

func (s *jsonScanner) array() bool {
	if !s.push(true) {
		return false
	}
	lv := &s.levels[s.depth-1]
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.pop()
		return true
	}
	for {
		if !s.value() {
			return false
		}
		s.ws()
		if s.i >= len(s.data) {
			return false
		}
		switch s.data[s.i] {
		case ',':
			s.i++
			lv.index++
		case ']':
			s.pop()
			return true
		default:
			return false
		}
	}
}

// str scans the string at s.i: ok false when it is malformed, valid false
// when it holds invalid UTF-8 or an unpaired surrogate escape.
func (s *jsonScanner) str() (sp span, ok, valid bool) {
	d := s.data
	i := s.i + 1
	sp.start = i
	valid = true
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			sp.end = i
			s.i = i + 1
			return sp, true, valid
		case c < 0x20:
			return sp, false, false
		case c == '\\':
			if i+1 >= len(d) {
				return sp, false, false
			}
			if d[i+1] != 'u' {
				i += 2
				continue
			}
			r, n := hex4(d, i+2)
			if n < 0 {
				return sp, false, false
			}
			i += 6
			switch {
			case r >= 0xD800 && r < 0xDC00: // a high surrogate needs a low one
				if i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
					if lo, m := hex4(d, i+2); m >= 0 && lo >= 0xDC00 && lo < 0xE000 {
						i += 6
						continue
					}
				}
				valid = false
			case r >= 0xDC00 && r < 0xE000:
				valid = false
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				valid = false
			}
			i += size
		}
	}
	return sp, false, false
}

// hex4 reads four hex digits at d[i:]; n is -1 when they are not there.
func hex4(d []byte, i int) (r rune, n int) {
	if i+4 > len(d) {
		return 0, -1
	}
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, -1
		}
	}
	return r, 4
}

// duplicate records key in its object and reports whether the object already
// had a member of that name.
func (s *jsonScanner) duplicate(lv *scanLevel, key span) bool {
	if lv.seen != nil {
		name := s.name(key)
		if _, ok := lv.seen[name]; ok {
			return true
		}
		lv.seen[name] = struct{}{}
		return false
	}
	for _, k := range s.keys[lv.keys:s.nkeys] {
		if s.sameName(k, key) {
			return true
		}
	}
	if s.nkeys-lv.keys == maxLinearKeys || s.nkeys == len(s.keys) {
		lv.seen = make(map[string]struct{}, 2*maxLinearKeys)
		for _, k := range s.keys[lv.keys:s.nkeys] {
			lv.seen[s.name(k)] = struct{}{}
		}
		lv.seen[s.name(key)] = struct{}{}
		s.nkeys = lv.keys
		return false
	}
	s.keys[s.nkeys] = key
	s.nkeys++
	return false
}

func (s *jsonScanner) sameName(a, b span) bool {
	x, y := s.data[a.start:a.end], s.data[b.start:b.end]
	if bytes.IndexByte(x, '\\') >= 0 || bytes.IndexByte(y, '\\') >= 0 {
		x, y = []byte(s.name(a)), []byte(s.name(b)) // escapes: compare what they mean
		if s.fold {
			return bytes.EqualFold(x, y)
		}
		return bytes.Equal(x, y)
	}
	if s.fold {
		return bytes.EqualFold(x, y)
	}
	return bytes.Equal(x, y)
}

// name is a member name as the decoder reads it (folded when names fold).
func (s *jsonScanner) name(sp span) string {
	raw := s.data[sp.start:sp.end]
	n := string(raw)
	if bytes.IndexByte(raw, '\\') >= 0 {
		var v string
		if json.Unmarshal(s.data[sp.start-1:sp.end+1], &v) == nil {
			n = v
		}
	}
	if s.fold {
		return string(bytes.ToLower([]byte(n)))
	}
	return n
}

// path names the value being scanned ("checks[2].key"); built only for errors.
func (s *jsonScanner) path() string {
	p := s.prefix
	for i := 0; i < s.depth; i++ {
		lv := &s.levels[i]
		if lv.array {
			if p == "" {
				p = "[" + strconv.Itoa(lv.index) + "]" // a top-level array: not a request we take
			} else {
				p += "[" + strconv.Itoa(lv.index) + "]"
			}
			continue
		}
		if i == s.depth-1 && lv.key == (span{}) {
			break
		}
		var v string
		if json.Unmarshal(s.data[lv.key.start-1:lv.key.end+1], &v) != nil {
			v = string(s.data[lv.key.start:lv.key.end])
		}
		p = JoinField(p, v)
	}
	return p
}

// JoinField names field inside prefix ("checks[2]" and "key": "checks[2].key"),
// as every error's field is named.
func JoinField(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	default:
		return prefix + "." + field
	}
}
