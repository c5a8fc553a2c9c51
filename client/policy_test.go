package client_test

import (
	"context"
	"encoding/json"
	"net/http"
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
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
