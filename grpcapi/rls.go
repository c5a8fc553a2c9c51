package grpcapi

import (
	"context"
	"fmt"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// rlsServer is Envoy's rate-limit service: decode the request into an rls
// plan, decide its checks through the service, encode rls's answer.
type rlsServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit answers one Envoy rate-limit request. Errors (no leader,
// outcome unknown, a bad request) are gRPC errors: Envoy then applies its
// own failure mode (failure_mode_deny), never a guess by limitd.
func (r *rlsServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	rr, e := decodeRLS(req)
	if e != nil {
		return nil, toStatus(e)
	}
	d, err := r.s.cache.Get(r.s.domains.RLSDomainsVersion(), rr.Domain, r.s.domains.RLSDomainConfig)
	if err != nil {
		return nil, toStatus(service.Internal(fmt.Sprintf("domain %q: stored configuration does not compile: %v", rr.Domain, err)))
	}
	plan, err := rls.NewPlan(d, &rr)
	if err != nil {
		if re, ok := err.(*rls.RequestError); ok {
			return nil, toStatus(service.Invalid(re.Field, re.Message))
		}
		return nil, toStatus(service.Internal(err.Error()))
	}
	metricName := ""
	if d != nil {
		metricName = RLSMetricPrefix + d.Name() // domains are configured: a bounded label
	}
	results, e := r.decide(ctx, plan, metricName)
	if e != nil {
		return nil, toStatus(e)
	}
	resp := plan.Respond(results, time.Now())
	r.s.metrics.observe(d, &rr, plan, results, resp)
	return encodeRLS(resp, r.s.cfg.RLSHeaders), nil
}

// decide runs the plan's groups through the service: an all-or-nothing
// group as CheckAll, the others as a Batch of independent checks.
// RLSMetricPrefix and the domain name are the policy label RLS checks are
// counted under in limitd_checks_total ("rls:shop"), not "inline".
const RLSMetricPrefix = "rls:"

func (r *rlsServer) decide(ctx context.Context, plan *rls.Plan, metricName string) ([]rls.Result, *service.Error) {
	results := make([]rls.Result, len(plan.Items))
	for _, g := range plan.Groups {
		checks := make([]service.CheckRequest, len(g.Items))
		for j, i := range g.Items {
			it := &plan.Items[i]
			checks[j] = service.CheckRequest{Key: it.Key, Limit: &it.Spec, Cost: it.Cost, MetricName: metricName}
			if g.Peek {
				checks[j].Cost = 0
			}
		}
		if g.All {
			res, e := r.s.svc.CheckAll(ctx, checks, "")
			if e != nil {
				return nil, descriptorError(e, g)
			}
			for j, i := range g.Items {
				results[i] = rls.Result{Decision: res.Decisions[j].Decision, Consumed: res.Allowed && !g.Peek}
			}
			continue
		}
		res, e := r.s.svc.Batch(ctx, checks, nil)
		if e != nil {
			return nil, descriptorError(e, g)
		}
		for j, i := range g.Items {
			if res[j].Err != nil {
				return nil, descriptorError(res[j].Err, g)
			}
			results[i] = rls.Result{Decision: res[j].Decision.Decision, Consumed: true}
		}
	}
	return results, nil
}

// descriptorError renames a check's field ("checks[2].key") to the
// descriptor it came from ("descriptors[5]"). Checks are built from
// validated rules, so such errors are not expected; the name helps if one is.
func descriptorError(e *service.Error, g rls.Group) *service.Error {
	var j int
	var rest string
	if n, _ := fmt.Sscanf(e.Field, "checks[%d]", &j); n == 1 && j >= 0 && j < len(g.Items) {
		if k := len(fmt.Sprintf("checks[%d]", j)); k < len(e.Field) {
			rest = e.Field[k:]
		}
		c := *e
		c.Field = fmt.Sprintf("descriptors[%d]%s", g.Items[j], rest)
		return &c
	}
	return e
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
		if d.GetIsNegativeHits() {
			return rr, service.Invalid(field+".is_negative_hits", "refilling a budget is not supported by limitd")
		}
		rd := &rr.Descriptors[i]
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
