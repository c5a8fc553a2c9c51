package grpcapi

import (
	"context"
	"fmt"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// rlsServer is Envoy's rate-limit service: decode the request into rls's,
// let the service decide it, encode rls's answer.
type rlsServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit answers one Envoy rate-limit request: the service
// decides (service.RateLimit); this only translates. Errors (no leader,
// outcome unknown, a bad request) are gRPC errors: Envoy then applies its
// own failure mode (failure_mode_deny), never a guess by limitd.
func (r *rlsServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	resp, e := r.rateLimit(ctx, req)
	if e != nil {
		return nil, toStatus(e)
	}
	return resp, nil
}

// rateLimit is ShouldRateLimit with the service's error, for POST /json.
func (r *rlsServer) rateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, *service.Error) {
	rr, e := decodeRLS(req)
	if e != nil {
		return nil, e
	}
	res, e := r.s.svc.RateLimit(ctx, &rr)
	if e != nil {
		return nil, e
	}
	r.s.metrics.observe(res.Domain, &rr, res.Plan, res.Results, res.Response)
	return encodeRLS(res.Response, r.s.cfg.RLSHeaders), nil
}

// decodeRLS turns the proto request into rls's.
func decodeRLS(req *rlspb.RateLimitRequest) (rls.Request, *service.Error) {
	rr := rls.Request{Domain: req.GetDomain(), HitsAddend: req.GetHitsAddend()}
	if len(req.GetDescriptors()) > rls.MaxRequestDescriptors {
		return rr, service.Invalid("descriptors", fmt.Sprintf("more than %d descriptors", rls.MaxRequestDescriptors))
	}
	rr.Descriptors = make([]rls.RequestDescriptor, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		field := fmt.Sprintf("descriptors[%d]", i)
		rd := &rr.Descriptors[i]
		rd.Negative = d.GetIsNegativeHits() // service/reserve.go: a credit
		if len(d.GetEntries()) > rls.MaxRequestEntries {
			return rr, service.Invalid(field+".entries", fmt.Sprintf("more than %d entries", rls.MaxRequestEntries))
		}
		rd.Entries = make([]rls.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			rd.Entries[j] = rls.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			rd.HitsAddend = &v
		}
		if l := d.GetLimit(); l != nil {
			rd.Limit = &rls.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: rls.Unit(l.GetUnit())}
			if m := l.GetUnitMultiplier(); m != nil {
				rd.Limit.Multiplier = m.GetValue()
			}
		}
	}
	return rr, nil
}

// encodeRLS renders rls's answer.
func encodeRLS(resp *rls.Response, headers rls.HeaderMode) *rlspb.RateLimitResponse {
	out := &rlspb.RateLimitResponse{OverallCode: code(resp.OverLimit), Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(resp.Statuses))}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		ds := &rlspb.RateLimitResponse_DescriptorStatus{Code: code(st.OverLimit), LimitRemaining: st.Remaining}
		if st.Limit != nil {
			ds.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
				Name: st.Limit.Name, RequestsPerUnit: st.Limit.RequestsPerUnit,
				Unit: rlspb.RateLimitResponse_RateLimit_Unit(st.Limit.Unit),
			}
			ds.DurationUntilReset = durationpb.New(st.UntilReset)
		}
		out.Statuses[i] = ds
	}
	for _, h := range resp.Headers(headers) {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corepb.HeaderValue{Key: h.Key, Value: h.Value})
	}
	return out
}

func code(over bool) rlspb.RateLimitResponse_Code {
	if over {
		return rlspb.RateLimitResponse_OVER_LIMIT
	}
	return rlspb.RateLimitResponse_OK
}
