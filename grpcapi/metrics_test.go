package grpcapi

import (
	"testing"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestRLSMetrics: total_hits, within_limit, near_limit, over_limit and
// shadow_mode per domain and envoy ratelimit's key, with the number of keys
// bounded.
func TestRLSMetrics(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	cfg := "domain: m\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n" +
		"  - key: trial\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n" +
		"  - key: ip\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	if _, err := c.putDomain(ctx, 0, &limitdv1.PutRLSDomainRequest{Config: cfg}); err != nil {
		t.Fatal(err)
	}
	m := c.servers[0].metrics
	m.maxKeys = 3
	send := func(key, value string, hits uint64) {
		t.Helper()
		d := descriptor(key, value)
		d.HitsAddend = wrapperspb.UInt64(hits)
		if _, err := c.rls(0).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "m", Descriptors: []*extpb.RateLimitDescriptor{d}}); err != nil {
			t.Fatal(err)
		}
	}
	send("user", "u1", 4) // within 4; 4 is not above 0.8 × 5
	send("user", "u2", 1) // same key: "m.user" (no detailed metric)
	send("user", "u1", 1) // within 1, near 1 (the 5th of 5)
	send("user", "u1", 1) // over 1
	send("trial", "t", 3) // shadow: over 3, shadow 3
	send("ip", "1.2.3.4", 1)
	send("ip", "5.6.7.8", 1) // a fourth key: over the bound of 3
	for _, c := range []struct {
		vec   string
		key   string
		value float64
	}{
		{"total", "m.user", 7}, {"within", "m.user", 6}, {"near", "m.user", 1}, {"over", "m.user", 1},
		{"total", "m.trial", 3}, {"over", "m.trial", 3}, {"shadow", "m.trial", 3},
		{"total", "m.ip_1.2.3.4", 1}, {"total", OverflowKey, 1},
	} {
		var got float64
		switch c.vec {
		case "total":
			got = testutil.ToFloat64(m.totalHits.WithLabelValues("m", c.key))
		case "within":
			got = testutil.ToFloat64(m.withinLimit.WithLabelValues("m", c.key))
		case "near":
			got = testutil.ToFloat64(m.nearLimit.WithLabelValues("m", c.key))
		case "over":
			got = testutil.ToFloat64(m.overLimit.WithLabelValues("m", c.key))
		case "shadow":
			got = testutil.ToFloat64(m.shadowMode.WithLabelValues("m", c.key))
		}
		if got != c.value {
			t.Errorf("%s{key=%q} = %v, want %v", c.vec, c.key, got, c.value)
		}
	}
	if n := len(c.servers[0].Collectors()); n != 5 {
		t.Fatalf("%d collectors", n)
	}
}
