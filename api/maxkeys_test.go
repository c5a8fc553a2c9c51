package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limitd/limitd/service"
)

// A policy's "max_keys" (its own key budget) round-trips through the JSON,
// and a negative one is refused naming the field.
func TestPolicyMaxKeys(t *testing.T) {
	pr, e := decodePolicy([]byte(`{"algorithm":"fixed_window","limit":5,"window":"1h","max_keys":1000}`), "anon", "")
	if e != nil {
		t.Fatal(e)
	}
	p, se := service.ValidatePolicy(pr, "")
	if se != nil || p.MaxKeys != 1000 {
		t.Fatalf("validated %+v, %v: want max_keys 1000", p, se)
	}
	b, _ := json.Marshal(policyOut(p))
	if !strings.Contains(string(b), `"max_keys":1000`) {
		t.Fatalf("policy out: %s", b)
	}
	ts := newTestServer(t, Config{})
	r := ts.do("PUT", "/v1/policies/anon", `{"algorithm":"fixed_window","limit":5,"window":"1h","max_keys":-1}`)
	if _, field, _ := r.errorBody(t); r.code != 400 || field != "max_keys" {
		t.Fatalf("negative max_keys: %d %s, want 400 naming max_keys", r.code, r.body)
	}
}
