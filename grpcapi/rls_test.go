package grpcapi

import (
	"testing"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/rls/rlstest"
)

// rlsRequest encodes an rls request as Envoy sends it.
func rlsRequest(r rls.Request) *rlspb.RateLimitRequest {
	out := &rlspb.RateLimitRequest{Domain: r.Domain, HitsAddend: r.HitsAddend}
	for _, d := range r.Descriptors {
		pd := &extpb.RateLimitDescriptor{}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &extpb.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if d.HitsAddend != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
		}
		if d.Limit != nil {
			pd.Limit = &extpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: typepb.RateLimitUnit(d.Limit.Unit)}
		}
		out.Descriptors = append(out.Descriptors, pd)
	}
	return out
}

func rlsAnswer(resp *rlspb.RateLimitResponse) rlstest.Answer {
	a := rlstest.Answer{Overall: resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		as := rlstest.AnswerStatus{Code: st.GetCode().String(), Remaining: st.GetLimitRemaining()}
		if l := st.GetCurrentLimit(); l != nil {
			as.HasLimit, as.Limit, as.Name = true, l.GetRequestsPerUnit(), l.GetName()
			as.UntilReset = st.GetDurationUntilReset().AsDuration()
		}
		a.Statuses = append(a.Statuses, as)
	}
	return a
}

// TestRLSReadmeExamplesOverGRPC runs every envoy ratelimit README example
// (and limitd's extensions) through a real gRPC client over loopback
// against an in-process 3-node cluster. Each configuration is loaded
// unchanged (the YAML file as is) through PutRLSDomain on one node, and the
// requests go round-robin to all three nodes, so followers forward and
// every node answers alike.
func TestRLSReadmeExamplesOverGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster; covered in memory by rls.TestReadmeScenariosInMemory")
	}
	c := newTestCluster(t, 3, testConfig{})
	rlstest.Run(t, func(t *testing.T, s *rlstest.Scenario, d *rls.Domain) func(rls.Request) (rlstest.Answer, error) {
		if _, err := c.putDomain(ctxT(t), 1, &limitdv1.PutRLSDomainRequest{Domain: d.Name(), Config: string(s.Raw(t))}); err != nil {
			t.Fatalf("PutRLSDomain: %v", err)
		}
		c.waitDomain(d.Name(), d.Canonical())
		next := 0
		return func(req rls.Request) (rlstest.Answer, error) {
			next++
			resp, err := c.rls(next%3).ShouldRateLimit(ctxT(t), rlsRequest(req))
			if err != nil {
				return rlstest.Answer{}, err
			}
			return rlsAnswer(resp), nil
		}
	})
}
