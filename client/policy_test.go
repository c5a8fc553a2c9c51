package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// httpLocalRefusals reads a policy's "local_refusals" straight from the HTTP
// API, bypassing the client's decoding.
func httpLocalRefusals(t *testing.T, name string) *bool {
	t.Helper()
	resp, err := http.Get("http://" + exampleAddr + "/v1/policies/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		LocalRefusals *bool `json:"local_refusals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/policies/%s: %d %v", name, resp.StatusCode, err)
	}
	if body.LocalRefusals == nil {
		t.Fatalf("GET /v1/policies/%s: no local_refusals", name)
	}
	return body.LocalRefusals
}

// TestPolicyLocalRefusals: the client carries "local_refusals": an explicit
// false is stored (GET over HTTP shows it, and so do GetPolicy and
// ListPolicies), nil is the server's default, true — also when it replaces a
// policy that had it off.
func TestPolicyLocalRefusals(t *testing.T) {
	c, ctx := policyClient(t)
	lim := client.Limit{Algorithm: "fixed_window", Limit: 5, Window: "1h"}

	off := false
	p, err := c.PutPolicy(ctx, client.Policy{Name: "lr-pay", Limit: lim, LocalRefusals: &off})
	if err != nil || p.LocalRefusals == nil || *p.LocalRefusals || p.LocalRefusalsOn() {
		t.Fatalf("PutPolicy with LocalRefusals false: %+v %v", p, err)
	}
	if *httpLocalRefusals(t, "lr-pay") {
		t.Fatal("GET over HTTP: local_refusals true after a put with false")
	}
	if p, err = c.GetPolicy(ctx, "lr-pay"); err != nil || p.LocalRefusalsOn() {
		t.Fatalf("GetPolicy: %+v %v, want LocalRefusals false", p, err)
	}
	ps, err := c.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, lp := range ps {
		if lp.Name == "lr-pay" {
			found = true
			if lp.LocalRefusals == nil || *lp.LocalRefusals {
				t.Fatalf("ListPolicies: %+v, want LocalRefusals false", lp)
			}
		}
	}
	if !found {
		t.Fatal("ListPolicies: no lr-pay")
	}

	if p, err = c.PutPolicy(ctx, client.Policy{Name: "lr-pay", Limit: lim}); err != nil || p.LocalRefusals == nil || !*p.LocalRefusals {
		t.Fatalf("PutPolicy without LocalRefusals: %+v %v", p, err)
	}
	if !*httpLocalRefusals(t, "lr-pay") {
		t.Fatal("GET over HTTP: a put without LocalRefusals left the cache off")
	}
	if err := c.DeletePolicy(ctx, "lr-pay"); err != nil {
		t.Fatal(err)
	}
}

// httpLease reads a policy's "lease" straight from the HTTP API, bypassing
// the client's decoding (nil when the policy has none).
func httpLease(t *testing.T, name string) map[string]any {
	t.Helper()
	var body struct {
		Lease map[string]any `json:"lease"`
	}
	if err := json.Unmarshal([]byte(httpPolicy(t, name)), &body); err != nil {
		t.Fatal(err)
	}
	return body.Lease
}

// httpPolicy is GET /v1/policies/NAME's body, straight from the HTTP API.
func httpPolicy(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + exampleAddr + "/v1/policies/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/policies/%s: %d %v %s", name, resp.StatusCode, err, b)
	}
	return string(b)
}

// leaseIs reports whether a lease (client or HTTP form) has this share and
// max_ttl; other fields (strict, on a server that has it) are not compared.
func leaseIs(l *client.Lease, share float64, maxTTL string) bool {
	return l != nil && l.Share != nil && *l.Share == share && l.MaxTTL == maxTTL
}

func httpLeaseIs(m map[string]any, share float64, maxTTL string) bool {
	return m != nil && m["share"] == share && m["max_ttl"] == maxTTL
}

// TestPolicyLease: the client carries "lease": a put stores it (GET over
// HTTP shows it), GetPolicy and ListPolicies answer what PutPolicy did, a
// get-modify-put keeps it, a nil share and empty max_ttl are the server's
// defaults, strict is stored as given or refused by name, and a put without
// it turns leases off.
func TestPolicyLease(t *testing.T) {
	c, ctx := policyClient(t)
	lim := client.Limit{Algorithm: "fixed_window", Limit: 1_000_000, Calendar: "day"}

	share := 0.25
	p, err := c.PutPolicy(ctx, client.Policy{Name: "lease-quota", Limit: lim, Lease: &client.Lease{Share: &share, MaxTTL: "3s"}})
	if err != nil || !leaseIs(p.Lease, 0.25, "3s") {
		t.Fatalf("PutPolicy with a lease: %+v %v, want share 0.25 max_ttl 3s", p, err)
	}
	if l := httpLease(t, "lease-quota"); !httpLeaseIs(l, 0.25, "3s") {
		t.Fatalf("GET over HTTP: lease %v", l)
	}
	got, err := c.GetPolicy(ctx, "lease-quota")
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("GetPolicy: %+v %v, want %+v", got, err, p)
	}
	ps, err := c.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, lp := range ps {
		if lp.Name == "lease-quota" {
			found = true
			if !reflect.DeepEqual(lp, p) {
				t.Fatalf("ListPolicies: %+v, want %+v", lp, p)
			}
		}
	}
	if !found {
		t.Fatal("ListPolicies: no lease-quota")
	}

	// Read-modify-write: raise the limit of what GetPolicy answered.
	got.Limit.Limit = 2_000_000
	if p, err = c.PutPolicy(ctx, got); err != nil || !reflect.DeepEqual(p.Lease, got.Lease) {
		t.Fatalf("get-modify-put: %+v %v, want lease %+v", p, err, got.Lease)
	}
	if l := httpLease(t, "lease-quota"); !httpLeaseIs(l, 0.25, "3s") {
		t.Fatalf("GET over HTTP after a get-modify-put: lease %v", l)
	}

	// An empty Lease is the server's defaults.
	if p, err = c.PutPolicy(ctx, client.Policy{Name: "lease-quota", Limit: lim, Lease: &client.Lease{}}); err != nil || !leaseIs(p.Lease, 0.05, "2s") {
		t.Fatalf("PutPolicy with an empty Lease: %+v %v", p, err)
	}
	// Strict, either way, reaches the server: stored as given, or refused
	// by name by a server that does not know it — never dropped.
	for _, strict := range []bool{true, false} {
		p, err = c.PutPolicy(ctx, client.Policy{Name: "lease-quota", Limit: lim, Lease: &client.Lease{Strict: &strict}})
		var ce *client.Error
		if err == nil && (p.Lease == nil || p.Lease.Strict == nil || *p.Lease.Strict != strict) || err != nil && (!errors.As(err, &ce) || ce.Field != "lease.strict") {
			t.Fatalf("PutPolicy with Strict %v: %+v %v, want it stored or refused naming lease.strict", strict, p, err)
		}
	}
	// A put without it has no leases.
	if p, err = c.PutPolicy(ctx, client.Policy{Name: "lease-quota", Limit: lim}); err != nil || p.Lease != nil || httpLease(t, "lease-quota") != nil {
		t.Fatalf("PutPolicy without a lease: %+v %v", p, err)
	}
	if err := c.DeletePolicy(ctx, "lease-quota"); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyGetPutKeepsHTTP: a policy stored over HTTP answers the same GET
// body after a client GetPolicy and a PutPolicy of what it answered: every
// field the HTTP API has, the lease's included, crosses the client both
// ways. A seed the server refuses only because it does not know "strict"
// is tried without it.
func TestPolicyGetPutKeepsHTTP(t *testing.T) {
	c, ctx := policyClient(t)
	for i, seed := range []string{
		`{"algorithm":"fixed_window","limit":1000,"calendar":"month","timezone":"Europe/Paris","local_refusals":false,"lease":{"share":0.1,"max_ttl":"1s"}}`,
		`{"algorithm":"sliding_window","limit":50,"window":"90s","lease":{"share":1,"max_ttl":"10m","strict":false}}`,
		`{"algorithm":"token_bucket","limit":5,"window":"1s","burst":20,"lease":{"share":0.000001,"max_ttl":"250ms","strict":true}}`,
		`{"algorithm":"token_bucket","limit":5,"window":"1s","burst":20,"lease":{}}`,
		`{"algorithm":"sliding_log","limit":5,"window":"15m","count_refused":true,"shadow":true}`,
	} {
		code, body := httpPut(t, "lease-seed", seed)
		if code == http.StatusBadRequest && strings.Contains(body, `"field":"lease.strict"`) {
			seed = strings.NewReplacer(`,"strict":false`, "", `,"strict":true`, "").Replace(seed)
			code, body = httpPut(t, "lease-seed", seed)
		}
		if code != http.StatusOK {
			t.Fatalf("seed %d: PUT %s: %d %s", i, seed, code, body)
		}
		want := httpPolicy(t, "lease-seed")
		p, err := c.GetPolicy(ctx, "lease-seed")
		if err != nil {
			t.Fatalf("seed %d: GetPolicy: %v", i, err)
		}
		if _, err := c.PutPolicy(ctx, p); err != nil {
			t.Fatalf("seed %d: PutPolicy of %+v: %v", i, p, err)
		}
		if got := httpPolicy(t, "lease-seed"); got != want {
			t.Fatalf("seed %d: after a client get and put, GET answers\n%s\nwant\n%s", i, got, want)
		}
	}
	if err := c.DeletePolicy(ctx, "lease-seed"); err != nil {
		t.Fatal(err)
	}
}

func httpPut(t *testing.T, name, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+exampleAddr+"/v1/policies/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPolicyLeaseErrors: a bad lease is ErrInvalidArgument naming the field
// as the HTTP API does, and the stored policy is unchanged.
func TestPolicyLeaseErrors(t *testing.T) {
	c, ctx := policyClient(t)
	fixed := client.Limit{Algorithm: "fixed_window", Limit: 100, Window: "1h"}
	share := 0.1
	good := &client.Lease{Share: &share, MaxTTL: "1s"}
	first, err := c.PutPolicy(ctx, client.Policy{Name: "lease-bad", Limit: fixed, Lease: good})
	if err != nil {
		t.Fatal(err)
	}
	zero, big := 0.0, 1.5
	for _, tc := range []struct {
		name  string
		pol   client.Policy
		field string
	}{
		{"share 0", client.Policy{Limit: fixed, Lease: &client.Lease{Share: &zero}}, "lease.share"},
		{"share above 1", client.Policy{Limit: fixed, Lease: &client.Lease{Share: &big}}, "lease.share"},
		{"max_ttl not a duration", client.Policy{Limit: fixed, Lease: &client.Lease{MaxTTL: "2"}}, "lease.max_ttl"},
		{"max_ttl above 10m", client.Policy{Limit: fixed, Lease: &client.Lease{MaxTTL: "11m"}}, "lease.max_ttl"},
		{"sliding_log", client.Policy{Limit: client.Limit{Algorithm: "sliding_log", Limit: 5, Window: "1m"}, Lease: good}, "lease"},
		{"shadow", client.Policy{Limit: fixed, Shadow: true, Lease: good}, "lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pol.Name = "lease-bad"
			_, err := c.PutPolicy(ctx, tc.pol)
			var ce *client.Error
			if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("PutPolicy: %v, want invalid_argument naming %q", err, tc.field)
			}
		})
	}
	if got, err := c.GetPolicy(ctx, "lease-bad"); err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("after refused puts: %+v %v, want the first policy %+v", got, err, first)
	}
	if err := c.DeletePolicy(ctx, "lease-bad"); err != nil {
		t.Fatal(err)
	}
}

// policyClient is a client of the example node, closed at the end of the
// test, and a context with the test's 10 s deadline.
func policyClient(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}
