package grpcapi

import (
	"testing"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// Envoy's response path (apply_on_stream_done): the request path spends
// hits_addend, the response path sends the same descriptors with
// is_negative_hits and the hits not needed, which come back to the
// counter's current window (at most to fresh). The envoy ratelimit YAML is
// loaded unchanged. Fails if negative hits were refused, spent, or
// credited past the counter.
func TestEnvoyNegativeHitsGiveBackOverRLS(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	cfg := "domain: llm\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	if _, err := c.limitd(0).PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: cfg}); err != nil {
		t.Fatal(err)
	}
	send := func(hits uint64, negative bool) *rlspb.RateLimitResponse {
		t.Helper()
		d := &extpb.RateLimitDescriptor{Entries: descriptor("user", "u1").Entries, HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: negative}
		r, err := c.rls(0).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*extpb.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := send(80, false); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 20 {
		t.Fatalf("request path, 80 hits: %v", r)
	}
	if r := send(30, false); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("30 more of 20 left: %v", r)
	}
	// The response path: 50 of the 80 were not needed.
	if r := send(50, true); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 70 {
		t.Fatalf("negative 50: %v", r)
	}
	if r := send(30, false); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 40 {
		t.Fatalf("30 after the credit: %v", r)
	}
	// Never past fresh.
	if r := send(1000, true); r.GetStatuses()[0].GetLimitRemaining() != 100 {
		t.Fatalf("negative 1000: %v", r)
	}
	// All negative or none.
	mixed := &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", "u1"), {Entries: descriptor("user", "u2").Entries, IsNegativeHits: true}}}
	_, err := c.rls(0).ShouldRateLimit(ctx, mixed)
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "descriptors[1].is_negative_hits")
}
