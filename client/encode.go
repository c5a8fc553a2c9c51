package client

import (
	"strconv"
	"unicode/utf8"
)

// The check path builds its JSON by appending into pooled buffers: the body
// is small and fixed in shape, and reflection-based encoding would cost more
// than the rest of the client's work per check.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Bytes that are not valid UTF-8
// pass through unchanged (keys may be any bytes; the server takes them as is).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			i++
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendLimit appends the limit object.
func appendLimit(b []byte, l *Limit) []byte {
	b = append(b, `{"algorithm":`...)
	b = appendString(b, l.Algorithm)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, l.Limit, 10)
	if l.Window != "" {
		b = append(b, `,"window":`...)
		b = appendString(b, l.Window)
	}
	if l.Burst != 0 {
		b = append(b, `,"burst":`...)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	if l.CountRefused {
		b = append(b, `,"count_refused":true`...)
	}
	if l.Calendar != "" {
		b = append(b, `,"calendar":`...)
		b = appendString(b, l.Calendar)
	}
	if l.Timezone != "" {
		b = append(b, `,"timezone":`...)
		b = appendString(b, l.Timezone)
	}
	return append(b, '}')
}

// appendCheck appends one check object. id is the request_id (may be empty).
func appendCheck(b []byte, r *Request, id []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendString(b, r.Key)
	if r.Policy != "" {
		b = append(b, `,"policy":`...)
		b = appendString(b, r.Policy)
	}
	if r.Limit != nil {
		b = append(b, `,"limit":`...)
		b = appendLimit(b, r.Limit)
	}
	if r.Cost > 1 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, r.Cost, 10)
	} else if r.Cost < 0 {
		// Let the server name the field.
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, r.Cost, 10)
	}
	if len(id) > 0 {
		b = append(b, `,"request_id":`...)
		b = appendString(b, string(id))
	}
	return append(b, '}')
}
