package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/rls"
)

// Envoy RLS: domains (envoy ratelimit configurations, replicated through the
// log like policies) and the decisions of RateLimit. A configuration is
// validated completely here, with package rls, on the node that receives
// it; its canonical form is what the node replicates, so every replica
// compiles the same rules. The front ends (gRPC ShouldRateLimit, the HTTP
// POST /json and /v1/rls/domains) only translate.

// Domains is what the service needs of the node for RLS domains: this
// replica's copy to read, and replication of a canonical configuration
// already validated here. Part of Node; cluster.Node implements it.
type Domains interface {
	// RLSDomainConfig is this replica's canonical configuration of a domain.
	RLSDomainConfig(name string) ([]byte, bool)
	// RLSDomains lists this replica's domains sorted by name.
	RLSDomains() []nodeapi.Domain
	// RLSDomainsVersion changes whenever this replica's domains change.
	RLSDomainsVersion() uint64
	// PutRLSDomain stores a canonical configuration through the leader.
	// Errors as Node's.
	PutRLSDomain(ctx context.Context, name string, canonical []byte) error
	// DeleteRLSDomain deletes a domain through the leader; *nodeapi.Error
	// not_found when it does not exist.
	DeleteRLSDomain(ctx context.Context, name string) error
}

// RLSDomains returns this replica's domains sorted by name.
func (s *Service) RLSDomains() ([]nodeapi.Domain, *Error) {
	return s.deps.Domains.RLSDomains(), nil
}

// RLSDomain returns this replica's canonical configuration of a domain;
// ok is false when there is no such domain (front ends name it their way).
func (s *Service) RLSDomain(name string) (config []byte, ok bool, e *Error) {
	config, ok = s.deps.Domains.RLSDomainConfig(name)
	return config, ok, nil
}

// PutRLSDomain validates an envoy ratelimit configuration (YAML or JSON) and
// stores it through the leader. name, when not empty, must equal the
// configuration's domain. Errors: invalid_argument naming "config.<YAML
// path>" (nothing is proposed) or "domain", unavailable (no leader or no
// answer in time: repeating a put is safe), outcome_unknown, internal.
func (s *Service) PutRLSDomain(ctx context.Context, name string, config []byte) (*rls.Domain, *Error) {
	d, err := rls.Parse("", config)
	if err != nil {
		return nil, domainOpError(err)
	}
	if name != "" && d.Name() != name {
		return nil, Invalid("domain", fmt.Sprintf("the configuration's domain %q does not match %q", d.Name(), name))
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := s.deps.Domains.PutRLSDomain(ctx, d.Name(), d.Canonical()); err != nil {
		return nil, domainOpError(err)
	}
	return d, nil
}

// DeleteRLSDomain removes a domain through the leader. Errors as
// PutRLSDomain's, and not_found when the domain does not exist.
func (s *Service) DeleteRLSDomain(ctx context.Context, name string) *Error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := s.deps.Domains.DeleteRLSDomain(ctx, name); err != nil {
		return domainOpError(err)
	}
	return nil
}

// loadRetry is how long LoadRLSDomains waits between attempts while the
// cluster has no leader.
const loadRetry = 200 * time.Millisecond

// LoadRLSDomains writes domains (from --rls-config, already validated by
// rls.LoadPath) through the leader, skipping those stored as given; it
// retries until a leader exists or ctx ends. Domains that are stored but not
// given are kept: the file adds and replaces, the API deletes.
func (s *Service) LoadRLSDomains(ctx context.Context, domains []*rls.Domain) error {
	for _, d := range domains {
		if cur, ok := s.deps.Domains.RLSDomainConfig(d.Name()); ok && bytes.Equal(cur, d.Canonical()) {
			continue
		}
		for {
			err := s.deps.Domains.PutRLSDomain(ctx, d.Name(), d.Canonical())
			if err == nil {
				break
			}
			if e := domainOpError(err); e.Code != CodeUnavailable && e.Code != CodeOutcomeUnknown {
				return fmt.Errorf("rls domain %s: %w", d.Name(), e)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(loadRetry):
			}
		}
	}
	return nil
}

// domainOpError types an error of a domain operation. Its messages say what
// a client may do about a configuration change (repeat it: a put or a
// delete is idempotent), unlike fromNode's, which are about checks.
func domainOpError(err error) *Error {
	var fe *nodeapi.Error
	var re *rls.Error
	switch {
	case errors.As(err, &fe) && fe.Code != "":
		return fe
	case errors.As(err, &re):
		field := "config"
		if re.Field != "" {
			field += "." + re.Field
		}
		return Invalid(field, re.Error())
	case errors.Is(err, nodeapi.ErrTooLarge):
		// An admin command over MaxCommandBytes is the client's to split: 413, not 500.
		return &Error{Code: CodePayloadTooLarge, Field: "config", Message: err.Error() + "; split the domain's descriptors into several domains"}
	case errors.Is(err, nodeapi.ErrOutcomeUnknown):
		return &Error{Code: CodeOutcomeUnknown, Message: "leadership changed while the change was in flight, so it may or may not have been applied; repeating it is safe"}
	case errors.Is(err, nodeapi.ErrNoLeader), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &Error{Code: CodeUnavailable, Message: "the cluster did not apply the change: " + err.Error() + "; repeating it is safe"}
	}
	return Internal(err.Error())
}

// RateLimitResult is one Envoy rate-limit request decided: the domain (nil
// when unknown: every descriptor is then OK) and plan it was decided under,
// each plan item's result, and the answer to send.
type RateLimitResult struct {
	Domain   *rls.Domain
	Plan     *rls.Plan
	Results  []rls.Result
	Response *rls.Response
}

// RateLimit decides an Envoy rate-limit request (gRPC ShouldRateLimit and
// POST /json alike): it compiles the request's domain (cached per version
// of this replica's domains), plans the request with package rls, and runs
// the plan's groups through the log: an all-or-nothing group as CheckAll,
// the others as a Batch of independent checks; peeks consume nothing.
// Errors (no leader, outcome unknown, a bad request) mean no answer: Envoy
// then applies its own failure mode, never a guess by limitd.
func (s *Service) RateLimit(ctx context.Context, req *rls.Request) (*RateLimitResult, *Error) {
	d, err := s.rlsCache.Get(s.deps.Domains.RLSDomainsVersion(), req.Domain, s.deps.Domains.RLSDomainConfig)
	if err != nil {
		return nil, Internal(fmt.Sprintf("domain %q: stored configuration does not compile: %v", req.Domain, err))
	}
	plan, err := rls.NewPlan(d, req)
	if err != nil {
		var re *rls.RequestError
		if errors.As(err, &re) {
			return nil, Invalid(re.Field, re.Message)
		}
		return nil, Internal(err.Error())
	}
	metricName := ""
	if d != nil {
		metricName = RLSMetricPrefix + d.Name() // domains are configured: a bounded label
	}
	neg, e := negativeHits(req) // reserve.go
	if e != nil {
		return nil, e
	}
	if neg {
		for i := range plan.Items {
			if plan.Items[i].Kind == rls.PlanChecked {
				// A plan's limits are given back by an adjustment, which
				// names the limit and happens once under retries.
				return nil, Invalid(fmt.Sprintf("descriptors[%d].is_negative_hits", i),
					"not supported for a descriptor decided under the key's plan (POST /v1/keys/{key}/adjust credits a plan limit)")
			}
		}
	}
	var results []rls.Result
	if neg {
		results, e = s.creditPlan(ctx, plan)
	} else {
		results, e = s.decidePlan(ctx, plan, metricName)
	}
	if e != nil {
		return nil, e
	}
	return &RateLimitResult{Domain: d, Plan: plan, Results: results, Response: plan.Respond(results, time.Now())}, nil
}

// RLSMetricPrefix and the domain name are the policy label RLS checks are
// counted under in limitd_checks_total ("rls:shop"), not "inline".
const RLSMetricPrefix = "rls:"

// decidePlan runs the plan's groups through the service: an all-or-nothing
// group as CheckAll, the others as a Batch of independent checks, each
// counted under metricName.
func (s *Service) decidePlan(ctx context.Context, plan *rls.Plan, metricName string) ([]rls.Result, *Error) {
	results := make([]rls.Result, len(plan.Items))
	for _, g := range plan.Groups {
		checks := make([]CheckRequest, len(g.Items))
		for j, i := range g.Items {
			it := &plan.Items[i]
			if it.Kind == rls.PlanChecked {
				// Neither policy nor limit: decided under the key's plan
				// (prepare), counted under the plan metric name.
				checks[j] = CheckRequest{Key: it.Key, Cost: it.Cost}
			} else {
				checks[j] = CheckRequest{Key: it.Key, Limit: &it.Spec, Cost: it.Cost, MetricName: metricName}
			}
			if g.Peek {
				checks[j].Cost = 0
			}
		}
		if g.All {
			res, e := s.CheckAll(ctx, checks, "")
			if e != nil {
				return nil, descriptorError(e, g)
			}
			for j, i := range g.Items {
				results[i] = rls.Result{Decision: res.Decisions[j].Decision, Consumed: res.Allowed && !g.Peek}
			}
			continue
		}
		res, e := s.Batch(ctx, checks, nil)
		if e != nil {
			return nil, descriptorError(e, g)
		}
		for j, i := range g.Items {
			if res[j].Err != nil {
				return nil, descriptorError(res[j].Err, g)
			}
			results[i] = rls.Result{Decision: res[j].Decision.Decision, Consumed: true}
			if pd := res[j].Decision.Plan; pd != nil {
				results[i].Limit = pd.Plan + "/" + pd.Limit
			}
		}
	}
	return results, nil
}

// descriptorError renames a check's field ("checks[2].key") to the
// descriptor it came from ("descriptors[5]"). Checks are built from
// validated rules, so such errors are not expected; the name helps if one is.
func descriptorError(e *Error, g rls.Group) *Error {
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
