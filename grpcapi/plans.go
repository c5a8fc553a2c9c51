package grpcapi

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Plans over gRPC: translation only, as the HTTP API's plans.go. Errors name
// fields by their path in the request ("plan.limits.daily.window").

// planDecision adds a plan check's fields to its decision message.
func planDecision(out *limitdv1.Decision, p *nodeapi.PlanDecision) {
	if p == nil {
		return
	}
	out.Plan, out.PlanLimit, out.Overridden = p.Plan, p.Limit, p.Overridden
	for i := range p.Limits {
		l := &p.Limits[i]
		d := nodeapi.Decision{Decision: l.Decision}
		out.Limits = append(out.Limits, &limitdv1.NamedDecision{Name: l.Name, Decision: decision(&d)})
	}
}

func planProto(p nodeapi.Plan) *limitdv1.Plan {
	out := &limitdv1.Plan{Name: p.Name, Limits: make(map[string]*limitdv1.Limit, len(p.Limits))}
	for _, l := range p.Limits {
		out.Limits[l.Name] = limitProto(l.Spec)
		out.Limits[l.Name].Notify = service.NotifyOut(l.Options.Notify)
		out.Limits[l.Name].History = service.FormatHistory(l.Options.History) // usage.go
	}
	return out
}

func (l *limitdServer) PutPlan(ctx context.Context, req *limitdv1.PutPlanRequest) (*limitdv1.Plan, error) {
	p := req.GetPlan()
	r := service.PlanRequest{Name: p.GetName(), Limits: make(map[string]algo.Config, len(p.GetLimits()))}
	for n, lim := range p.GetLimits() {
		r.Limits[n] = limitConfig(lim)
		if lim.GetReservationExpiry() != "" { // reservations name a policy or a limit, never a plan
			return nil, toStatus(service.Invalid("plan.limits."+n+".reservation_expiry", "a plan's limit holds no reservation: reserve under a policy"))
		}
		if nt := lim.GetNotify(); len(nt) > 0 {
			if r.Notify == nil {
				r.Notify = map[string][]float64{}
			}
			r.Notify[n] = nt
		}
		if h := lim.GetHistory(); h != "" { // usage.go
			if r.History == nil {
				r.History = map[string]string{}
			}
			r.History[n] = h
		}
	}
	if _, e := service.ValidatePlan(r); e != nil {
		return nil, toStatus(e.Under("plan"))
	}
	out, e := l.svc().PutPlan(ctx, r)
	if e != nil {
		return nil, toStatus(e)
	}
	return planProto(out), nil
}

func (l *limitdServer) GetPlan(_ context.Context, req *limitdv1.GetPlanRequest) (*limitdv1.Plan, error) {
	p, e := l.svc().GetPlan(req.GetName())
	if e != nil {
		return nil, toStatus(e)
	}
	return planProto(p), nil
}

func (l *limitdServer) ListPlans(_ context.Context, _ *limitdv1.ListPlansRequest) (*limitdv1.ListPlansResponse, error) {
	ps := l.svc().ListPlans()
	out := &limitdv1.ListPlansResponse{Plans: make([]*limitdv1.Plan, len(ps)), DefaultPlan: l.svc().DefaultPlan()}
	for i, p := range ps {
		out.Plans[i] = planProto(p)
	}
	return out, nil
}

func (l *limitdServer) DeletePlan(ctx context.Context, req *limitdv1.DeletePlanRequest) (*limitdv1.DeletePlanResponse, error) {
	if e := l.svc().DeletePlan(ctx, req.GetName()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeletePlanResponse{}, nil
}

func (l *limitdServer) SetDefaultPlan(ctx context.Context, req *limitdv1.SetDefaultPlanRequest) (*limitdv1.SetDefaultPlanResponse, error) {
	if e := l.svc().SetDefaultPlan(ctx, req.GetPlan()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.SetDefaultPlanResponse{}, nil
}

func (l *limitdServer) AssignPlan(ctx context.Context, req *limitdv1.AssignPlanRequest) (*limitdv1.KeyPlan, error) {
	if e := l.svc().AssignPlan(ctx, req.GetKey(), req.GetPlan()); e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.KeyPlan{Key: req.GetKey(), Plan: req.GetPlan(), Assigned: req.GetPlan()}
	if out.Plan != "" {
		out.Source = nodeapi.SourceAssignment
	}
	return out, nil
}

func (l *limitdServer) GetKeyPlan(ctx context.Context, req *limitdv1.GetKeyPlanRequest) (*limitdv1.KeyPlan, error) {
	kp, e := l.svc().KeyPlan(ctx, req.GetKey())
	if e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.KeyPlan{Key: req.GetKey(), Plan: kp.Plan, Source: kp.Source, Assigned: kp.Assigned, Overridden: kp.Override != nil}, nil
}

func (l *limitdServer) PutPrefixRule(ctx context.Context, req *limitdv1.PrefixRule) (*limitdv1.PrefixRule, error) {
	if e := l.svc().PutPrefixRule(ctx, req.GetPrefix(), req.GetPlan()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.PrefixRule{Prefix: req.GetPrefix(), Plan: req.GetPlan()}, nil
}

func (l *limitdServer) DeletePrefixRule(ctx context.Context, req *limitdv1.DeletePrefixRuleRequest) (*limitdv1.DeletePrefixRuleResponse, error) {
	if e := l.svc().DeletePrefixRule(ctx, req.GetPrefix()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeletePrefixRuleResponse{}, nil
}

func (l *limitdServer) ListPrefixRules(_ context.Context, _ *limitdv1.ListPrefixRulesRequest) (*limitdv1.ListPrefixRulesResponse, error) {
	rs := l.svc().ListPrefixRules()
	out := &limitdv1.ListPrefixRulesResponse{Rules: make([]*limitdv1.PrefixRule, len(rs))}
	for i, r := range rs {
		out.Rules[i] = &limitdv1.PrefixRule{Prefix: r.Prefix, Plan: r.Plan}
	}
	return out, nil
}

func (l *limitdServer) PutOverride(ctx context.Context, req *limitdv1.Override) (*limitdv1.Override, error) {
	r := service.OverrideRequest{Limits: make(map[string]nodeapi.LimitOverride, len(req.GetLimits()))}
	for n, lo := range req.GetLimits() {
		r.Limits[n] = nodeapi.LimitOverride{Limit: lo.GetLimit(), Burst: lo.GetBurst()}
	}
	if req.GetExpires() != nil {
		if err := req.GetExpires().CheckValid(); err != nil {
			return nil, toStatus(service.Invalid("expires", err.Error()))
		}
		r.Expires = req.GetExpires().AsTime()
	}
	o, e := l.svc().PutOverride(ctx, req.GetKey(), r)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.Override{Key: req.GetKey(), Limits: make(map[string]*limitdv1.LimitOverride, len(o.Limits))}
	for _, lo := range o.Limits {
		out.Limits[lo.Name] = &limitdv1.LimitOverride{Limit: lo.Limit, Burst: lo.Burst}
	}
	if o.Expires > 0 {
		out.Expires = timestamppb.New(time.Unix(0, o.Expires))
	}
	return out, nil
}

func (l *limitdServer) DeleteOverride(ctx context.Context, req *limitdv1.DeleteOverrideRequest) (*limitdv1.DeleteOverrideResponse, error) {
	if e := l.svc().DeleteOverride(ctx, req.GetKey()); e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.DeleteOverrideResponse{}, nil
}
