package api

import (
	"strconv"
	"unicode/utf8"
)

// Error messages quote at most a few dozen bytes of what the client sent
// (otherwise a 900 KB number comes back whole in a 900 KB error answer).
const (
	// maxQuoted bounds a client's value quoted in a message.
	maxQuoted = 40
	// maxErrorField and maxErrorMessage bound an error's field and message
	// as written, whatever built them.
	maxErrorField   = 128
	maxErrorMessage = 512
)

// clip returns s cut to at most n bytes on a rune boundary, saying how long
// it was when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cut(s, n) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// cut is s cut to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// quoteValue quotes a client's value for a message, at most maxQuoted bytes of it.
func quoteValue(v string) string {
	if len(v) <= maxQuoted {
		return strconv.Quote(v)
	}
	return strconv.Quote(cut(v, maxQuoted)) + "… (" + strconv.Itoa(len(v)) + " bytes)"
}
