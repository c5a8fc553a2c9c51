package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A minimal JSON walker for limitd's responses: it finds "allowed", "results"
// and "error" without decoding anything else, so the load generator spends
// its share of the machine's CPU on sending load, not on reflection. Member
// names are compared as raw bytes (limitd never escapes them).

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, malformed("unterminated string at offset %d", i)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, malformed("value expected at end of input")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, malformed("unterminated %c at offset %d", b[i], i)
	}
	// number, true, false, null
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return 0, malformed("value expected at offset %d", i)
			}
			return j, nil
		}
		j++
	}
	if j == i {
		return 0, malformed("value expected at offset %d", i)
	}
	return j, nil
}

// eachMember calls fn for every member of the object starting at b[i] with
// the raw name and the value's bounds, and returns the index after the object.
func eachMember(b []byte, i int, fn func(name []byte, v, end int) error) (int, error) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, malformed("object expected at offset %d", i)
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, malformed("member name expected at offset %d", i)
		}
		end, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		name := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, malformed("':' expected at offset %d", i)
		}
		v := skipSpace(b, i+1)
		vend, err := skipValue(b, v)
		if err != nil {
			return 0, err
		}
		if err := fn(name, v, vend); err != nil {
			return 0, err
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return 0, malformed("unterminated object")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, malformed("',' or '}' expected at offset %d", i)
		}
	}
}

var (
	nameAllowed = []byte("allowed")
	nameError   = []byte("error")
	nameResults = []byte("results")
	nameCode    = []byte("code")
	nameMessage = []byte("message")
	litTrue     = []byte("true")
	litFalse    = []byte("false")
)

// decisionAt reads the decision object at b[i]: {"allowed":...} or
// {"error":{...}}. It returns the index after the object.
func decisionAt(b []byte, i int) (Outcome, int, error) {
	var o Outcome
	seen := false
	end, err := eachMember(b, i, func(name []byte, v, vend int) error {
		switch {
		case bytes.Equal(name, nameAllowed):
			switch val := b[v:vend]; {
			case bytes.Equal(val, litTrue):
				o.Allowed = true
			case bytes.Equal(val, litFalse):
				o.Allowed = false
			default:
				return malformed("allowed is %q", val)
			}
			seen = true
		case bytes.Equal(name, nameError):
			se := &StatusError{}
			se.Code, se.Message = errorFields(b[v:vend])
			o.Err = se
			seen = true
		}
		return nil
	})
	if err != nil {
		return Outcome{}, 0, err
	}
	if !seen {
		return Outcome{}, 0, malformed("decision without \"allowed\" or \"error\"")
	}
	return o, end, nil
}

// parseDecision reads a /v1/check 200 response.
func parseDecision(b []byte) (Outcome, error) {
	o, _, err := decisionAt(b, 0)
	return o, err
}

// parseBatch reads a /v1/check/batch 200 response into out, which must match
// the number of results exactly.
func parseBatch(b []byte, out []Outcome) error {
	n := 0
	found := false
	_, err := eachMember(b, 0, func(name []byte, v, vend int) error {
		if !bytes.Equal(name, nameResults) {
			return nil
		}
		found = true
		if b[v] != '[' {
			return malformed("results is not an array")
		}
		i := skipSpace(b, v+1)
		if i < vend && b[i] == ']' {
			return nil
		}
		for {
			if n >= len(out) {
				return malformed("more results than the %d checks sent", len(out))
			}
			o, end, err := decisionAt(b, i)
			if err != nil {
				return fmt.Errorf("results[%d]: %w", n, err)
			}
			out[n] = o
			n++
			i = skipSpace(b, end)
			if i >= vend {
				return malformed("unterminated results")
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return nil
			default:
				return malformed("',' or ']' expected at offset %d", i)
			}
		}
	})
	if err != nil {
		return err
	}
	if !found {
		return malformed("no results in batch response")
	}
	if n != len(out) {
		return malformed("%d results for %d checks", n, len(out))
	}
	return nil
}

// parseError extracts code and message from an error response body
// {"error":{"code":...,"message":...}}; both are empty if it is not one.
func parseError(b []byte) (code, message string) {
	eachMember(b, 0, func(name []byte, v, vend int) error {
		if bytes.Equal(name, nameError) {
			code, message = errorFields(b[v:vend])
		}
		return nil
	})
	return code, message
}

// errorFields reads code and message from an error object. Errors are rare,
// so the strings are decoded properly.
func errorFields(obj []byte) (code, message string) {
	eachMember(obj, 0, func(name []byte, v, vend int) error {
		switch {
		case bytes.Equal(name, nameCode):
			json.Unmarshal(obj[v:vend], &code)
		case bytes.Equal(name, nameMessage):
			json.Unmarshal(obj[v:vend], &message)
		}
		return nil
	})
	return code, message
}
