package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
)

// TestKeysAreExactBytes: a string that encoding/json would silently change
// (invalid UTF-8, an unpaired surrogate escape) is a 400 naming the field,
// in bodies and in paths, so two different keys never share a budget
// (no normalisation merges them).
func TestKeysAreExactBytes(t *testing.T) {
	ts := newTestServer(t, Config{AuthKeySource: "header:X-Api-Key"})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/check", "{\"key\":\"u\xff\",\"policy\":\"api\"}", "key"},
		{"POST", "/v1/check", "{\"key\":\"u\xfe\",\"policy\":\"api\"}", "key"},
		{"POST", "/v1/check", `{"key":"u\ud800","policy":"api"}`, "key"},
		{"POST", "/v1/check", `{"key":"u\udc00x","policy":"api"}`, "key"},
		{"POST", "/v1/check", "{\"key\":\"k\",\"policy\":\"api\",\"request_id\":\"r\xc3\"}", "request_id"},
		{"POST", "/v1/check", "{\"key\":\"k\",\"policy\":\"a\xffpi\"}", "policy"},
		{"POST", "/v1/check", "{\"k\xffey\":\"k\",\"policy\":\"api\"}", ""},
		{"POST", "/v1/check/all", "{\"checks\":[{\"key\":\"k\",\"policy\":\"api\"},{\"key\":\"\xff\",\"policy\":\"api\"}]}", "checks[1].key"},
		{"GET", "/v1/keys/q%FF?policy=api", "", "key"},
		{"DELETE", "/v1/keys/q%FF?policy=api", "", "key"},
		{"PUT", "/v1/policies/p", "{\"algorithm\":\"fixed_window\",\"limit\":1,\"window\":\"1s\xff\"}", "window"},
	} {
		r := ts.do(c.method, c.path, c.body)
		if code, field, _ := r.errorBody(t); r.code != 400 || code != CodeInvalidArgument || field != c.field {
			t.Errorf("%s %s %q: %d %s, want 400 naming %q", c.method, c.path, c.body, r.code, r.body, c.field)
		}
	}
	if r := ts.do("GET", "/v1/auth/api", "", "X-Api-Key: k\xff"); r.code != 400 {
		t.Errorf("auth with a non-UTF-8 header key: %d %s", r.code, r.body)
	}
	if n := len(ts.store.checkCalls) + len(ts.store.applied); n != 0 {
		t.Fatalf("a refused request reached the store (%d calls)", n)
	}
	// U+FFFD itself, escaped or not, and surrogate pairs are ordinary keys.
	for _, body := range []string{`{"key":"u\ufffd","policy":"api"}`, "{\"key\":\"u\xef\xbf\xbd\",\"policy\":\"api\"}", `{"key":"\ud83d\ude00","policy":"api"}`} {
		if r := ts.do("POST", "/v1/check", body); r.code != 200 {
			t.Errorf("%s: %d %s", body, r.code, r.body)
		}
	}
	// A batch answers the bad entry in its slot and decides the others.
	r := ts.do("POST", "/v1/check/batch", "{\"checks\":[{\"key\":\"k\",\"policy\":\"api\"},{\"key\":\"\xff\",\"policy\":\"api\"}]}")
	m := r.json(t)
	res := m["results"].([]any)
	if r.code != 200 || res[0].(map[string]any)["allowed"] != true ||
		res[1].(map[string]any)["error"].(map[string]any)["field"] != "checks[1].key" {
		t.Fatalf("batch: %d %s", r.code, r.body)
	}
}

// TestDuplicateFieldsRefused: encoding/json takes the last of duplicate
// members (names matched case-insensitively); a request must mean one thing,
// so duplicates are a 400 naming the field.
func TestDuplicateFieldsRefused(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/check", `{"key":"a","policy":"api","key":"b"}`, "key"},
		{"POST", "/v1/check", `{"key":"a","policy":"api","cost":1,"COST":0}`, "COST"},
		{"POST", "/v1/check", `{"key":"a","polic\u0079":"api","policy":"api"}`, "policy"},
		{"POST", "/v1/check", `{"key":"a","limit":{"algorithm":"fixed_window","limit":1,"window":"1s","limit":100}}`, "limit.limit"},
		{"POST", "/v1/check/all", `{"checks":[{"key":"a","policy":"api"}],"checks":[]}`, "checks"},
		{"POST", "/v1/check/all", `{"checks":[{"key":"a","policy":"api"},{"key":"a","key":"b","policy":"api"}]}`, "checks[1].key"},
		{"POST", "/v1/check/batch", `{"checks":[{"key":"a","policy":"api"}],"Checks":[]}`, "Checks"},
		{"PUT", "/v1/policies/p", `{"algorithm":"fixed_window","limit":1,"window":"1s","window":"1h"}`, "window"},
		{"POST", "/v1/cluster/join", `{"id":"n3","raft_addr":"127.0.0.1:8302","id":"n4"}`, "id"},
	} {
		r := ts.do(c.method, c.path, c.body)
		if code, field, _ := r.errorBody(t); r.code != 400 || code != CodeInvalidArgument || field != c.field {
			t.Errorf("%s %s %s: %d %s, want 400 naming %q", c.method, c.path, c.body, r.code, r.body, c.field)
		}
	}
	if n := len(ts.store.checkCalls) + len(ts.store.applied) + len(ts.store.joins); n != 0 {
		t.Fatalf("a refused request reached the store (%d calls)", n)
	}
	// In a batch, an entry with a duplicate gets its own error.
	r := ts.do("POST", "/v1/check/batch", `{"checks":[{"key":"a","policy":"api"},{"key":"a","cost":1,"cost":0,"policy":"api"}]}`)
	res := r.json(t)["results"].([]any)
	if r.code != 200 || res[0].(map[string]any)["allowed"] != true ||
		res[1].(map[string]any)["error"].(map[string]any)["field"] != "checks[1].cost" {
		t.Fatalf("batch: %d %s", r.code, r.body)
	}
}

func TestScanJSONLargeObjects(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"policies":{`)
	for i := 0; i < 5000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{}`, i)
	}
	if e := scanJSON([]byte(b.String()+"}}"), "", false, 2); e != nil {
		t.Fatalf("distinct names refused: %v", e)
	}
	if e := scanJSON([]byte(b.String()+`,"p17":{}}}`), "", false, 2); e == nil || e.field != "policies.p17" {
		t.Fatalf("duplicate after the linear scan limit: %v", e)
	}
	// Exact names: "API" and "api" are different policies.
	if e := scanJSON([]byte(`{"policies":{"api":{},"API":{}}}`), "", false, 2); e != nil {
		t.Fatalf("case-distinct map keys refused: %v", e)
	}
	// Malformed JSON is left to the decoder.
	for _, s := range []string{`{"a":`, `{"a" 1}`, `[1,2`, `"abc`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", `{"a":1}}`} {
		if e := scanJSON([]byte(s), "", true, 0); e != nil {
			t.Errorf("%q: %v", s, e)
		}
	}
}

func TestLoadPoliciesDuplicateName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	body := `{"policies":{"api":{"algorithm":"fixed_window","limit":1,"window":"1s"},"api":{"algorithm":"fixed_window","limit":9,"window":"1s"}}}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPolicies(path); err == nil || !strings.Contains(err.Error(), "policies.api") {
		t.Fatalf("duplicate policy name: %v", err)
	}
}

// BenchmarkScanJSON is the scan's share of a check's decoding.
func BenchmarkScanJSON(b *testing.B) {
	body := []byte(`{"key":"user:42","limit":{"algorithm":"sliding_window","limit":100,"window":"1m"},"request_id":"8d3c0a"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if e := scanJSON(body, "", true, 0); e != nil {
			b.Fatal(e)
		}
	}
}

// TestPathKeysDecodedExactly: a key in the path is percent-decoded exactly,
// '+' included, so DELETE /v1/keys/... resets the key a JSON check names.
func TestPathKeysDecodedExactly(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1m"}, false)
	r := ts.do("GET", "/v1/keys/a%2Bb+c%20d%25%2F%C3%A9/x?policy=api", "")
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if got, want := ts.store.checkCalls[0][0].Checks[0].Key, "a+b+c d%/é/x"; got != want {
		t.Fatalf("key %q, want %q", got, want)
	}
	if m := r.json(t); m["key"] != "a+b+c d%/é/x" {
		t.Fatalf("answer names key %v", m["key"])
	}
}
