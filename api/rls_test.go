package api

import (
	"strings"
	"testing"
	"time"
)

// TestRLSDomainEndpoints: PUT (YAML) on a follower is replicated, GET
// returns the canonical JSON on every node, a bad config is a 400 naming
// the path of the mistake, DELETE removes it (404 after).
func TestRLSDomainEndpoints(t *testing.T) {
	c := newAPICluster(t, 3)
	yaml := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n"
	code, body := c.do(2, "PUT", "/v1/rls/domains/shop", yaml)
	if code != 200 || !strings.HasPrefix(body, `{"domain":"shop","descriptors":[{"key":"user","rate_limit":{"unit":"minute","requests_per_unit":5}}]}`) {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for i := 0; i < c.Size(); i++ {
		deadline := time.Now().Add(5 * time.Second)
		for {
			code, got := c.do(i, "GET", "/v1/rls/domains/shop", "")
			if code == 200 && got == body {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %d %s", i, code, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if code, got := c.do(0, "GET", "/v1/rls/domains", ""); code != 200 || !strings.Contains(got, `"domain":"shop"`) {
		t.Fatalf("list: %d %s", code, got)
	}
	bad := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"
	code, got := c.do(0, "PUT", "/v1/rls/domains/shop", bad)
	if code != 400 || !strings.Contains(got, `"field":"config.descriptors[0].rate_limit.unit"`) || !strings.Contains(got, "line 5") {
		t.Fatalf("bad config: %d %s", code, got)
	}
	if code, got := c.do(0, "PUT", "/v1/rls/domains/other", yaml); code != 400 || !strings.Contains(got, `"field":"domain"`) {
		t.Fatalf("domain mismatch: %d %s", code, got)
	}
	if code, got := c.do(1, "DELETE", "/v1/rls/domains/shop", ""); code != 200 || !strings.Contains(got, `"deleted":true`) {
		t.Fatalf("delete: %d %s", code, got)
	}
	if code, _ := c.do(0, "DELETE", "/v1/rls/domains/shop", ""); code != 404 {
		t.Fatalf("second delete: %d", code)
	}
}
