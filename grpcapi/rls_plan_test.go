package grpcapi

import (
	"os"
	"path/filepath"
	"testing"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
)

// TestRLSPlanDescriptorsOverGRPC: a domain loaded from an envoy ratelimit
// YAML file (rls.LoadPath) whose descriptor says plan: true decides
// ShouldRateLimit under the key's plan, the request's value being the key:
// an assigned key by its plan, another by the default plan, one budget with
// limitd's own checks of the same key, the deciding limit named in the
// status; a rule descriptor beside it in one request is decided by its
// rule; a negative hit on a plan descriptor is refused naming it. Fails if
// the plan flag is dropped between YAML and the check, if the key is not
// the value (an rls: counter key would not share the tenant's budget), or
// if the status does not report the plan's limit.
func TestRLSPlanDescriptorsOverGRPC(t *testing.T) {
	c := newTestCluster(t, 3, testConfig{})
	ctx := ctxT(t)
	lead := c.leader()
	f1 := (lead + 1) % 3
	for name, n := range map[string]int64{"free": 2, "pro": 3} {
		if _, err := c.limitd(lead).PutPlan(ctx, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: name, Limits: map[string]*limitdv1.Limit{"hourly": fixedWindow(n)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.limitd(lead).SetDefaultPlan(ctx, &limitdv1.SetDefaultPlanRequest{Plan: "free"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.limitd(lead).AssignPlan(ctx, &limitdv1.AssignPlanRequest{Key: "tenant:acme", Plan: "pro"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	yaml := docBlock(t, "plan-descriptor") // docs/ENVOY.md, as written
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := rls.LoadPath(dir)
	if err != nil || len(ds) != 1 {
		t.Fatalf("LoadPath: %v %v", ds, err)
	}
	if _, err := c.putDomain(ctx, lead, &limitdv1.PutRLSDomainRequest{Domain: "api", Config: yaml}); err != nil {
		t.Fatalf("PutRLSDomain: %v", err)
	}
	c.waitDomain("api", ds[0].Canonical())

	tenant := func(v string) *extpb.RateLimitDescriptor {
		return &extpb.RateLimitDescriptor{Entries: []*extpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: v}}}
	}
	ask := func(node int, ds ...*extpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := c.rls(node).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}
	// One of pro's 3 spent through limitd's own API: RLS sees the rest.
	if r, err := c.limitd(f1).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme"}); err != nil || r.Decision.Plan != "pro" {
		t.Fatalf("check: %v %v", r, err)
	}
	for i, want := range []struct {
		code      rlspb.RateLimitResponse_Code
		remaining uint32
	}{{rlspb.RateLimitResponse_OK, 1}, {rlspb.RateLimitResponse_OK, 0}, {rlspb.RateLimitResponse_OVER_LIMIT, 0}} {
		resp := ask(i%3, tenant("tenant:acme"))
		st := resp.Statuses[0]
		if resp.OverallCode != want.code || st.Code != want.code || st.LimitRemaining != want.remaining ||
			st.CurrentLimit.GetName() != "pro/hourly" || st.CurrentLimit.GetRequestsPerUnit() != 3 {
			t.Fatalf("request %d: %v, want %v remaining %d under pro/hourly (3)", i, resp, want.code, want.remaining)
		}
	}
	// The default plan for a key with no assignment; a rule descriptor in
	// the same request by its rule.
	path := &extpb.RateLimitDescriptor{Entries: []*extpb.RateLimitDescriptor_Entry{{Key: "path", Value: "/search"}}}
	resp := ask(f1, tenant("tenant:bob"), path)
	if resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetName() != "free/hourly" ||
		resp.Statuses[0].LimitRemaining != 1 || resp.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 || resp.Statuses[1].LimitRemaining != 9 {
		t.Fatalf("bob and path: %v", resp)
	}
	// RLS spent acme's budget: limitd's own check sees it.
	if r, err := c.limitd(lead).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme"}); err != nil || r.Decision.Allowed {
		t.Fatalf("check after RLS: %v %v", r, err)
	}
	neg := tenant("tenant:bob")
	neg.IsNegativeHits = true
	_, err = c.rls(lead).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*extpb.RateLimitDescriptor{neg}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "descriptors[0].is_negative_hits")
}
