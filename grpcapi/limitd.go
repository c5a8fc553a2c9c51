package grpcapi

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// limitdServer adapts limitd.v1 to package service: decode, call, encode.
type limitdServer struct {
	limitdv1.UnimplementedLimitdServer
	s *Server
}

func (l *limitdServer) svc() *service.Service { return l.s.svc }

// checkRequest decodes one check; field errors are named under prefix.
func checkRequest(c *limitdv1.CheckRequest, prefix string) (service.CheckRequest, *service.Error) {
	r := service.CheckRequest{Key: c.GetKey(), Policy: c.GetPolicy(), Cost: 1, RequestID: c.GetRequestId()}
	if c.Cost != nil {
		r.Cost = c.GetCost()
	}
	if e := costFields(&r, c, prefix); e != nil { // costs.go
		return r, e
	}
	if lim := c.GetLimit(); lim != nil {
		if len(lim.GetNotify()) > 0 {
			return r, service.Invalid(join(prefix, "limit.notify"), "alerts are a policy's option, not an inline limit's")
		}
		if lim.GetReservationExpiry() != "" {
			return r, service.Invalid(join(prefix, "limit.reservation_expiry"), "what an expired reservation becomes is a policy's option, not an inline limit's")
		}
		spec, e := service.ValidateLimit(limitConfig(lim), join(prefix, "limit"))
		if e != nil {
			return r, e
		}
		r.Limit = &spec
	}
	return r, nil
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

func limitConfig(l *limitdv1.Limit) algo.Config {
	return algo.Config{
		Algorithm: l.GetAlgorithm(), Limit: l.GetLimit(), Window: l.GetWindow(), Burst: l.GetBurst(),
		CountRefused: l.GetCountRefused(), Calendar: l.GetCalendar(), Timezone: l.GetTimezone(),
		Hold: l.GetHold(), MaxHold: l.GetMaxHold(),
	}
}

func limitProto(s algo.Spec) *limitdv1.Limit {
	c := s.Config()
	return &limitdv1.Limit{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window, Burst: c.Burst,
		CountRefused: c.CountRefused, Calendar: c.Calendar, Timezone: c.Timezone, Hold: c.Hold, MaxHold: c.MaxHold}
}

func decision(d *nodeapi.Decision) *limitdv1.Decision {
	out := &limitdv1.Decision{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: durationpb.New(d.ResetAfter), Delay: durationpb.New(d.Delay),
		ShadowRefused: d.ShadowRefused, Reason: d.Reason.String(), Degraded: d.Degraded,
	}
	if d.RetryAfter == algo.Never {
		out.Never = true
	} else {
		out.RetryAfter = durationpb.New(d.RetryAfter)
	}
	planDecision(out, d.Plan) // plans.go
	if d.Slot != "" {
		out.Slot, out.SlotExpires = d.Slot, durationpb.New(d.SlotHold)
	}
	costDecision(out, d) // costs.go
	return out
}

func (l *limitdServer) Check(ctx context.Context, req *limitdv1.CheckRequest) (*limitdv1.CheckResponse, error) {
	r, e := checkRequest(req, "")
	if e != nil {
		return nil, toStatus(e)
	}
	res, e := l.svc().Check(ctx, &r)
	if e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.CheckResponse{Decision: decision(&res.Decision), Replayed: res.Replayed}, nil
}

func (l *limitdServer) CheckAll(ctx context.Context, req *limitdv1.CheckAllRequest) (*limitdv1.CheckAllResponse, error) {
	if e := l.svc().CheckCount(len(req.GetChecks())); e != nil {
		return nil, toStatus(e)
	}
	checks := make([]service.CheckRequest, len(req.GetChecks()))
	for i, c := range req.GetChecks() {
		var e *service.Error
		if checks[i], e = checkRequest(c, service.EntryField(i)); e != nil {
			return nil, toStatus(e)
		}
	}
	res, e := l.svc().CheckAll(ctx, checks, req.GetRequestId())
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.CheckAllResponse{Allowed: res.Allowed, Replayed: res.Replayed, Decisions: make([]*limitdv1.Decision, len(res.Decisions))}
	for i := range res.Decisions {
		out.Decisions[i] = decision(&res.Decisions[i])
	}
	return out, nil
}

func (l *limitdServer) Batch(ctx context.Context, req *limitdv1.BatchRequest) (*limitdv1.BatchResponse, error) {
	if e := l.svc().CheckCount(len(req.GetChecks())); e != nil {
		return nil, toStatus(e)
	}
	checks := make([]service.CheckRequest, len(req.GetChecks()))
	var invalid []*service.Error
	for i, c := range req.GetChecks() {
		var e *service.Error
		if checks[i], e = checkRequest(c, service.EntryField(i)); e != nil {
			if invalid == nil {
				invalid = make([]*service.Error, len(checks))
			}
			invalid[i] = e
		}
	}
	res, e := l.svc().Batch(ctx, checks, invalid)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.BatchResponse{Results: make([]*limitdv1.BatchResult, len(res))}
	for i := range res {
		r := &res[i]
		if r.Err != nil {
			out.Results[i] = &limitdv1.BatchResult{Result: &limitdv1.BatchResult_Error{Error: &limitdv1.Error{
				Code: string(r.Err.Code), Field: r.Err.Field, Message: r.Err.Message}}}
			continue
		}
		out.Results[i] = &limitdv1.BatchResult{Result: &limitdv1.BatchResult_Response{Response: &limitdv1.CheckResponse{
			Decision: decision(&r.Decision), Replayed: r.Replayed}}}
	}
	return out, nil
}

func keyRequest(key, policy string, lim *limitdv1.Limit) (service.CheckRequest, *service.Error) {
	return checkRequest(&limitdv1.CheckRequest{Key: key, Policy: policy, Limit: lim}, "")
}

func (l *limitdServer) Peek(ctx context.Context, req *limitdv1.PeekRequest) (*limitdv1.CheckResponse, error) {
	r, e := keyRequest(req.GetKey(), req.GetPolicy(), req.GetLimit())
	if e != nil {
		return nil, toStatus(e)
	}
	res, e := l.svc().Peek(ctx, &r)
	if e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.CheckResponse{Decision: decision(&res.Decision)}, nil
}

func (l *limitdServer) Reset(ctx context.Context, req *limitdv1.ResetRequest) (*limitdv1.ResetResponse, error) {
	r, e := keyRequest(req.GetKey(), req.GetPolicy(), req.GetLimit())
	if e != nil {
		return nil, toStatus(e)
	}
	if e := l.svc().ResetKey(ctx, &r); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.ResetResponse{}, nil
}

func policyProto(p nodeapi.Policy) *limitdv1.Policy {
	local := !p.NoLocalRefusals
	out := &limitdv1.Policy{Name: p.Name, Limit: limitProto(p.Spec), Shadow: p.Shadow, LocalRefusals: &local, Lease: leaseProto(p.Lease), MaxKeys: p.MaxKeys}
	out.Limit.Notify = service.NotifyOut(p.Options.Notify)
	out.Limit.History = service.FormatHistory(p.Options.History) // usage.go
	out.Limit.ReservationExpiry = service.FormatReservationExpiry(p.Options.ReservationExpiry)
	if o := service.OnExceedOut(p.OnExceed); o != nil {
		out.OnExceed = &limitdv1.OnExceed{Ban: o.Ban, Escalate: o.Escalate, ForgetAfter: o.ForgetAfter}
	}
	degradedProto(out, service.DegradedOut(p.Options.Degraded)) // degraded.go
	return out
}

// leaseProto is a policy's lease option on the wire (nil: none); share and
// max_ttl are always set, so that a get-modify-put keeps them exactly.
func leaseProto(l algo.Lease) *limitdv1.Lease {
	if !l.Enabled() {
		return nil
	}
	c := l.Config()
	return &limitdv1.Lease{Share: c.Share, MaxTtl: c.MaxTTL, Strict: c.Strict}
}

// leaseConfig decodes a policy's lease option (nil: none) into the HTTP
// API's form, which service.ValidateLease validates; an unset share or an
// empty max_ttl take the defaults, as omitted JSON fields do.
func leaseConfig(l *limitdv1.Lease) (*algo.LeaseConfig, *service.Error) {
	if l == nil {
		return nil, nil
	}
	c := &algo.LeaseConfig{MaxTTL: l.GetMaxTtl()}
	if l.Share != nil { // presence: an explicit 0 is refused, not the default
		share := l.GetShare()
		c.Share = &share
	}
	if l.Strict != nil {
		strict := l.GetStrict()
		c.Strict = &strict
	}
	return c, nil
}

// policyRequest decodes a PutPolicy request's policy. It validates it as
// service.PutPolicy does, so that errors name the field's path in the
// request ("policy.name", "policy.limit.window", "policy.lease.share")
// rather than in the HTTP body; PutPolicy validates the same request again.
func policyRequest(p *limitdv1.Policy) (service.PolicyRequest, *service.Error) {
	if p == nil || p.GetLimit() == nil {
		return service.PolicyRequest{}, service.Invalid("policy.limit", "required")
	}
	lease, e := leaseConfig(p.GetLease())
	if e != nil {
		return service.PolicyRequest{}, e
	}
	// local_refusals has presence: unset is the default, true (GetLocalRefusals
	// would read it as false).
	noLocal := p.LocalRefusals != nil && !*p.LocalRefusals
	r := service.PolicyRequest{Name: p.GetName(), Config: limitConfig(p.GetLimit()), Shadow: p.GetShadow(), NoLocalRefusals: noLocal, Lease: lease, MaxKeys: p.GetMaxKeys(),
		History:           p.GetLimit().GetHistory(), // usage.go
		ReservationExpiry: p.GetLimit().GetReservationExpiry()}
	if o := p.GetOnExceed(); o != nil {
		r.OnExceed = &service.OnExceedConfig{Ban: o.GetBan(), Escalate: o.GetEscalate(), ForgetAfter: o.GetForgetAfter()}
	}
	if n := p.GetLimit().GetNotify(); len(n) > 0 {
		r.Notify = n
	}
	r.Degraded = degradedConfig(p) // degraded.go
	if e := service.ValidatePolicyName(r.Name, "policy.name"); e != nil {
		return r, e
	}
	spec, e := service.ValidateLimit(r.Config, "policy.limit")
	if e != nil {
		return r, e
	}
	if _, e := service.ValidateDegraded(r.Degraded, spec, r.Shadow, "policy"); e != nil {
		return r, e
	}
	if _, e := service.ValidateLease(r.Lease, spec, r.Shadow, "policy"); e != nil {
		return r, e
	}
	if _, e := service.ValidateOnExceed(r.OnExceed, r.Shadow, "policy"); e != nil {
		return r, e
	}
	if _, e := service.ValidateNotify(r.Notify, "policy.limit"); e != nil {
		return r, e
	}
	if r.MaxKeys < 0 {
		return r, service.Invalid("policy.max_keys", "must be zero (no bound of its own) or a positive number of keys")
	}
	if _, e := service.ValidateHistory(r.History, spec, "policy.limit"); e != nil {
		return r, e
	}
	if _, e := service.ValidateReservationExpiry(r.ReservationExpiry, spec, r.Shadow, "policy.limit"); e != nil {
		return r, e
	}
	return r, nil
}

func (l *limitdServer) PutPolicy(ctx context.Context, req *limitdv1.PutPolicyRequest) (*limitdv1.Policy, error) {
	r, e := policyRequest(req.GetPolicy())
	if e != nil {
		return nil, toStatus(e)
	}
	pol, e := l.svc().PutPolicy(ctx, r)
	if e != nil {
		return nil, toStatus(e)
	}
	return policyProto(pol), nil
}

func (l *limitdServer) GetPolicy(ctx context.Context, req *limitdv1.GetPolicyRequest) (*limitdv1.Policy, error) {
	p, e := l.svc().GetPolicy(req.GetName())
	if e != nil {
		return nil, toStatus(e)
	}
	return policyProto(p), nil
}

func (l *limitdServer) ListPolicies(ctx context.Context, req *limitdv1.ListPoliciesRequest) (*limitdv1.ListPoliciesResponse, error) {
	ps := l.svc().ListPolicies()
	out := &limitdv1.ListPoliciesResponse{Policies: make([]*limitdv1.Policy, len(ps))}
	for i, p := range ps {
		out.Policies[i] = policyProto(p)
	}
	return out, nil
}

func (l *limitdServer) DeletePolicy(ctx context.Context, req *limitdv1.DeletePolicyRequest) (*limitdv1.DeletePolicyResponse, error) {
	if e := l.svc().DeletePolicy(ctx, req.GetName()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeletePolicyResponse{}, nil
}

func (l *limitdServer) PutRLSDomain(ctx context.Context, req *limitdv1.PutRLSDomainRequest) (*limitdv1.RLSDomain, error) {
	if len(req.GetConfig()) > rls.MaxConfigBytes {
		return nil, toStatus(service.Invalid("config", "larger than the maximum configuration size"))
	}
	d, e := l.svc().PutRLSDomain(ctx, req.GetDomain(), []byte(req.GetConfig()))
	if e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.RLSDomain{Domain: d.Name(), Config: string(d.Canonical())}, nil
}

func (l *limitdServer) GetRLSDomain(ctx context.Context, req *limitdv1.GetRLSDomainRequest) (*limitdv1.RLSDomain, error) {
	cfg, ok, e := l.svc().RLSDomain(req.GetDomain())
	if e != nil {
		return nil, toStatus(e)
	}
	if !ok {
		return nil, toStatus(&service.Error{Code: service.CodeNotFound, Field: "domain", Message: "no such RLS domain"})
	}
	return &limitdv1.RLSDomain{Domain: req.GetDomain(), Config: string(cfg)}, nil
}

func (l *limitdServer) ListRLSDomains(ctx context.Context, req *limitdv1.ListRLSDomainsRequest) (*limitdv1.ListRLSDomainsResponse, error) {
	ds, e := l.svc().RLSDomains()
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.ListRLSDomainsResponse{Domains: make([]*limitdv1.RLSDomain, len(ds))}
	for i, d := range ds {
		out.Domains[i] = &limitdv1.RLSDomain{Domain: d.Name, Config: string(d.Config)}
	}
	return out, nil
}

func (l *limitdServer) DeleteRLSDomain(ctx context.Context, req *limitdv1.DeleteRLSDomainRequest) (*limitdv1.DeleteRLSDomainResponse, error) {
	if e := l.svc().DeleteRLSDomain(ctx, req.GetDomain()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeleteRLSDomainResponse{}, nil
}
