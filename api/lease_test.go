package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// TestPutPolicyLease: the "lease" option is proposed as given, defaults come
// from algo, the GET shape round-trips, and every bad value is a 400 naming
// its field.
func TestPutPolicyLease(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("PUT", "/v1/policies/daily", `{"algorithm":"fixed_window","limit":1000000,"calendar":"day","lease":{"share":0.05,"max_ttl":"2s"}}`)
	if r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1000000, Calendar: "day"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want := fsm.EncodePutPolicy(fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 50_000, MaxTTL: 2 * time.Second}})
	if got := ts.store.applied[len(ts.store.applied)-1]; string(got) != string(want) {
		t.Fatalf("proposed %x, want %x", got, want)
	}
	lease, ok := r.json(t)["lease"].(map[string]any)
	if !ok || lease["max_ttl"] != "2s" || lease["share"] == nil {
		t.Fatalf("put response: %s", r.body)
	}
	if r := ts.do("PUT", "/v1/policies/daily", string(r.body)); r.code != 200 {
		t.Fatalf("round trip of the response: %d %s", r.code, r.body)
	}
	if lease["strict"] != true {
		t.Fatalf("put response without the default strict: %s", r.body)
	}
	// strict false is proposed, answered and read back as given.
	r = ts.do("PUT", "/v1/policies/loose", `{"algorithm":"fixed_window","limit":10,"window":"1h","lease":{"strict":false}}`)
	if r.code != 200 {
		t.Fatalf("put strict false: %d %s", r.code, r.body)
	}
	want = fsm.EncodePutPolicy(fsm.Policy{Name: "loose", Spec: mustSpecT(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"}),
		Lease: algo.Lease{Share: algo.DefaultLeaseShare, MaxTTL: algo.DefaultLeaseTTL, NoStrict: true}})
	if got := ts.store.applied[len(ts.store.applied)-1]; string(got) != string(want) {
		t.Fatalf("proposed %x, want %x", got, want)
	}
	if lease, _ := r.json(t)["lease"].(map[string]any); lease["strict"] != false {
		t.Fatalf("put strict false answered %s", r.body)
	}
	if r := ts.do("PUT", "/v1/policies/loose", string(r.body)); r.code != 200 || string(ts.store.applied[len(ts.store.applied)-1]) != string(want) {
		t.Fatalf("round trip of the strict false response: %d %s", r.code, r.body)
	}
	// An empty option takes algo's defaults.
	if r := ts.do("PUT", "/v1/policies/tb", `{"algorithm":"token_bucket","limit":10,"window":"1s","lease":{}}`); r.code != 200 {
		t.Fatalf("put with defaults: %d %s", r.code, r.body)
	}
	want = fsm.EncodePutPolicy(fsm.Policy{Name: "tb", Spec: mustSpecT(t, algo.Config{Algorithm: "token_bucket", Limit: 10, Window: "1s"}),
		Lease: algo.Lease{Share: algo.DefaultLeaseShare, MaxTTL: algo.DefaultLeaseTTL}})
	if got := ts.store.applied[len(ts.store.applied)-1]; string(got) != string(want) {
		t.Fatalf("proposed %x, want %x", got, want)
	}
	// Without the option nothing changes on the wire.
	if r := ts.do("PUT", "/v1/policies/plain", `{"algorithm":"fixed_window","limit":1,"window":"1s"}`); r.code != 200 {
		t.Fatalf("put without lease: %d %s", r.code, r.body)
	} else if _, ok := r.json(t)["lease"]; ok {
		t.Fatalf("a policy without lease answers one: %s", r.body)
	}

	for _, c := range []struct{ name, body, field string }{
		{"share zero", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"share":0}}`, "lease.share"},
		{"share above one", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"share":1.5}}`, "lease.share"},
		{"share too small", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"share":1e-9}}`, "lease.share"},
		{"share type", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"share":"half"}}`, "lease.share"},
		{"ttl", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"max_ttl":"soon"}}`, "lease.max_ttl"},
		{"ttl too long", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"max_ttl":"1h"}}`, "lease.max_ttl"},
		{"unknown field", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"stict":true}}`, "lease.stict"},
		{"strict type", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"strict":"yes"}}`, "lease.strict"},
		{"strict number", `{"algorithm":"fixed_window","limit":1,"window":"1s","lease":{"strict":1}}`, "lease.strict"},
		{"sliding log", `{"algorithm":"sliding_log","limit":1,"window":"1s","lease":{}}`, "lease"},
		{"leaky bucket", `{"algorithm":"leaky_bucket","limit":1,"window":"1s","lease":{}}`, "lease"},
		{"shadow", `{"algorithm":"fixed_window","limit":1,"window":"1s","shadow":true,"lease":{}}`, "lease"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do("PUT", "/v1/policies/p", c.body)
			if r.code != 400 {
				t.Fatalf("%d %s", r.code, r.body)
			}
			if code, field, _ := r.errorBody(t); code != CodeInvalidArgument || field != c.field {
				t.Fatalf("code %s field %q, want %q: %s", code, field, c.field, r.body)
			}
		})
	}
}

func mustSpecT(t *testing.T, c algo.Config) algo.Spec {
	t.Helper()
	s, err := c.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeaseMetricsRegistered: the lease counters are on /metrics.
func TestLeaseMetricsRegistered(t *testing.T) {
	ts := newTestServer(t, Config{})
	r := ts.do("GET", "/metrics", "")
	for _, name := range []string{"limitd_leases_taken_total", "limitd_leases_returned_total", "limitd_leases_lost_total",
		"limitd_leases_revoked_total", "limitd_leases_recalled_total", "limitd_lease_checks_total", "limitd_leased_keys"} {
		if !strings.Contains(string(r.body), "\n"+name+" 0\n") {
			t.Errorf("/metrics has no %s 0", name)
		}
	}
}

// TestLoadPoliciesLease: a policies file carries the lease option, strict
// included, as a PUT does, and a bad strict names the policy and the field.
func TestLoadPoliciesLease(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"policies":{"q":{"algorithm":"fixed_window","limit":10,"window":"1h","lease":{"share":0.5,"max_ttl":"1m","strict":false}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadPolicies(good)
	if err != nil || len(ps) != 1 {
		t.Fatal(ps, err)
	}
	if want := (algo.Lease{Share: 500_000, MaxTTL: time.Minute, NoStrict: true}); ps[0].Lease != want {
		t.Fatalf("lease %+v, want %+v", ps[0].Lease, want)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"policies":{"q":{"algorithm":"fixed_window","limit":10,"window":"1h","lease":{"strict":"no"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPolicies(bad); err == nil || !strings.Contains(err.Error(), `policy "q": lease.strict`) {
		t.Fatalf("bad strict: %v", err)
	}
}
