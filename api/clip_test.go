package api

import (
	"strings"
	"testing"
)

// Errors quote at most a few dozen bytes of what the client sent: a 900 KB
// number, a 900 KB unknown field name and a 900 KB query value each answer
// a short 400 that still names the field (no echo of a huge value).
func TestErrorsQuoteBoundedValues(t *testing.T) {
	ts := newTestServer(t, Config{AuthKeySource: "header:X-Api-Key"})
	huge := strings.Repeat("9", 900_000)
	for name, c := range map[string]struct{ method, path, body, field string }{
		"number":        {"POST", "/v1/check", `{"key":"k","limit":{"algorithm":"fixed_window","limit":` + huge + `,"window":"1h"}}`, "limit.limit"},
		"unknown field": {"POST", "/v1/check", `{"key":"k","` + strings.Repeat("f", 900_000) + `":1}`, ""},
		"query value":   {"GET", "/v1/auth/api?cost=" + huge, "", "cost"},
	} {
		r := ts.do(c.method, c.path, c.body, "X-Api-Key: k")
		if r.code != 400 {
			t.Fatalf("%s: %d, want 400", name, r.code)
		}
		if len(r.body) > 1024 {
			t.Fatalf("%s: a %d-byte answer: %.200s", name, len(r.body), r.body)
		}
		if c.field != "" && !strings.Contains(string(r.body), `"field":"`+c.field+`"`) {
			t.Fatalf("%s: %s does not name %s", name, r.body, c.field)
		}
	}
	if got := quoteValue("é" + strings.Repeat("x", 100)); !strings.HasPrefix(got, `"éxx`) || !strings.HasSuffix(got, "(102 bytes)") {
		t.Fatalf("quoteValue: %s", got)
	}
}
