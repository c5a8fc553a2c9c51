package service

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
)

// Refuser is the Node's over-limit cache (package overlimit): Refused answers a refusal of cost under the
// limit for key from memory, or reports a miss. It never answers "allowed".
// The service consults it before the log for checks without a request id
// (a cached refusal consumes nothing and is not remembered, but a retry of
// an allowed request must get that allowance back), and never for a peek.
type Refuser interface {
	Refused(id overlimit.LimitID, key string, cost int64) (algo.Decision, bool)
}

// cached answers c from the node's over-limit cache, if it holds a refusal
// covering c.
//
// A check of cost 0 is a peek wherever it comes from: peeks are linearizable
// reads of the key's state, so they always go through the log.
func (s *Service) cached(c *nodeapi.Check) (nodeapi.Decision, bool) {
	if c.Cost == 0 || c.ByPlan {
		// A plan check's limits are known only in apply: never cached.
		return nodeapi.Decision{}, false
	}
	id := overlimit.LimitID{Policy: true, Ident: c.Policy}
	if c.Spec != nil {
		// The state machine's identity of an inline limit: its canonical
		// encoding (the spec was validated by prepare's caller).
		id = overlimit.LimitID{Ident: specIdent(&s.specIdents, c.Spec)}
	}
	d, hit := s.deps.Refuser.Refused(id, c.Key, c.Cost)
	return nodeapi.Decision{Decision: d}, hit
}

// maxSpecIdents bounds the interned identities of inline limits (see
// Service.specIdents); past it, identities are built per check (a client
// sending endless distinct limits gets no worse than no cache).
const maxSpecIdents = maxCachedLimits

// specIdent returns string(algo.AppendSpec(nil, *spec)), interned: the
// identity the over-limit cache knows an inline limit by. Clients send the
// same few limits on every check, and building the string would cost two
// allocations per cached refusal.
func specIdent(in *Interner, spec *algo.Spec) string {
	var a [64]byte // enough for any spec: time zone names are short
	return in.Get(algo.AppendSpec(a[:0], *spec))
}

// CheckRequest is one check as a client asked it: may Key spend Cost under
// the named Policy, or under the inline Limit, now?
type CheckRequest struct {
	Key    string
	Policy string
	// Limit is an inline limit, validated by ValidateLimit or a LimitCache;
	// exactly one of Policy and Limit is set. It is shared, never modified.
	Limit *algo.Spec
	// Cost is what the check spends; 0 is a peek that consumes nothing.
	// Front ends choose what an absent cost means (HTTP: 1).
	Cost int64
	// RequestID, when set, makes the check idempotent: a repeat within the
	// retention gets the first answer and consumes nothing.
	RequestID string
	// MetricName, for an inline limit, is the name the check is counted
	// under in the decision metrics instead of InlineName (the RLS front end
	// names the domain, so its traffic shows as such). It must come from a
	// bounded set: it is a metric label.
	MetricName string
	// Addr is the client address the front end derived itself (forward-auth
	// with key source ip), the only thing a list's CIDR entries match; the
	// zero Addr when the key came from the client.
	Addr netip.Addr
	// Reserve, when set, makes an allowed check a reservation held that
	// long; Overdraft makes the charge apply past the limit (reserve.go).
	Reserve   time.Duration
	Overdraft bool
}

// CheckResult is one check's answer.
type CheckResult struct {
	Decision nodeapi.Decision
	Limit    Limit // what the check was decided under, for headers and metrics
	Replayed bool  // answered from the request_id table; nothing consumed
}

// Allowed is what the client is told: a shadow policy's refusal is reported as
// allowed (with ShadowRefused), whatever the state machine put in Allowed.
func Allowed(d *nodeapi.Decision) bool { return d.Allowed || d.ShadowRefused }

// prepare validates r into the check the node decides. Fields are named
// relative to the check; batch callers locate it with Under. A request id is
// validated only when withRequestID (callers that refuse one do so first).
func (s *Service) prepare(r *CheckRequest, withRequestID bool) (nodeapi.Check, Limit, *Error) {
	if e := ValidateCheckFields(r, withRequestID); e != nil {
		return nodeapi.Check{}, Limit{}, e
	}
	c := nodeapi.Check{Key: r.Key, Cost: r.Cost, Reserve: r.Reserve, Overdraft: r.Overdraft}
	switch {
	case r.Policy != "" && r.Limit != nil:
		return nodeapi.Check{}, Limit{}, Invalid("limit", "give either policy or limit, not both")
	case r.Policy != "":
		if e := ValidatePolicyName(r.Policy, "policy"); e != nil {
			return nodeapi.Check{}, Limit{}, e
		}
		c.Policy = r.Policy
		return c, s.limitOf(r.Policy), nil
	case r.Limit != nil:
		if e := s.checkInline(r.Limit); e != nil {
			return nodeapi.Check{}, Limit{}, e
		}
		c.Spec = r.Limit
		name := InlineName
		if r.MetricName != "" {
			name = r.MetricName
		}
		return c, Limit{Name: name, Spec: *r.Limit, Known: true}, nil
	}
	// Neither: the check is decided under the key's plan, which only the
	// state machine resolves (atomically with the check; plans.go).
	c.ByPlan = true
	return c, Limit{Name: PlanMetricName}, nil
}

// ValidateCheckFields validates what a check's validity depends on before
// its limit: the key, the cost and (when withRequestID) the request id. A
// front end that resolves inline limits itself calls it, when resolving one
// fails, to report the same first error the service would.
func ValidateCheckFields(r *CheckRequest, withRequestID bool) *Error {
	if e := ValidateKey(r.Key, "key"); e != nil {
		return e
	}
	if r.Cost < 0 {
		return Invalid("cost", "must be zero (a peek) or a positive integer")
	}
	if withRequestID {
		return ValidateRequestID(r.RequestID, "request_id")
	}
	return nil
}

// Check decides one check.
func (s *Service) Check(ctx context.Context, r *CheckRequest) (CheckResult, *Error) {
	return s.check(ctx, r, false)
}

// CheckDetached is Check(Detach(ctx), r), detaching ctx only when the check
// goes to the node: a refusal answered from the over-limit cache waits for
// nothing, and the detached context would be its only allocation.
func (s *Service) CheckDetached(ctx context.Context, r *CheckRequest) (CheckResult, *Error) {
	return s.check(ctx, r, true)
}

func (s *Service) check(ctx context.Context, r *CheckRequest, detach bool) (CheckResult, *Error) {
	c, l, e := s.prepare(r, true)
	if e != nil {
		return CheckResult{}, e
	}
	if d, ok := s.listed(&c, r.Addr, &l); ok { // lists.go: deny > allow > limits
		s.obs.Decided(l, d)
		return CheckResult{Decision: d, Limit: l}, nil
	}
	if c.Reserve != 0 || c.Overdraft {
		return s.costCheck(ctx, c, l, r.RequestID) // reserve.go: always through the log
	}
	if r.RequestID == "" {
		if d, ok := s.bannedCheck(&c, &l); ok { // bans.go
			s.obs.Decided(l, d)
			return CheckResult{Decision: d, Limit: l}, nil
		}
		if d, ok := s.leased(&c, &l); ok { // lease.go
			s.obs.Decided(l, d)
			return CheckResult{Decision: d, Limit: l}, nil
		}
		if d, hit := s.cached(&c); hit {
			s.obs.Decided(l, d)
			return CheckResult{Decision: d, Limit: l}, nil
		}
	}
	if detach {
		// Detach(ctx) would be replaced by s.context with a shared
		// deadline, as any context that is never cancelled: Background
		// is, without the allocation. Tracing, when on, keeps the span.
		ctx = tracing.Detach(ctx)
	}
	if r.RequestID == "" && l.lease.Enabled() && l.lease.Strict() {
		return s.decideStrict(ctx, c, l) // lease.go
	}
	return s.decideOne(ctx, c, l, r.RequestID, false)
}

// Peek answers r as a check of cost 0 (r.Cost is ignored): the key's current
// decision, consuming nothing. It goes through the log like any check, so the
// answer is linearizable.
func (s *Service) Peek(ctx context.Context, r *CheckRequest) (CheckResult, *Error) {
	if r.RequestID != "" {
		return CheckResult{}, Invalid("request_id", "a peek consumes nothing and takes no request_id")
	}
	p := *r
	p.Cost = 0
	c, l, e := s.prepare(&p, false)
	if e != nil {
		return CheckResult{}, e
	}
	return s.decideOne(ctx, c, l, "", true)
}

// decideOne sends one single-check op to the node and checks the result's shape.
func (s *Service) decideOne(ctx context.Context, c nodeapi.Check, l Limit, requestID string, peek bool) (CheckResult, *Error) {
	// The op and its check escape through the Node interface: one allocation
	// holds both. (They are not pooled: a Node may keep what it is given.)
	one := &singleOp{checks: [1]nodeapi.Check{c}}
	one.ops[0] = nodeapi.Op{Checks: one.checks[:], RequestID: requestID}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, one.ops[:])
	cancel()
	if err != nil {
		e := s.nodeError(err)
		if degradedFallback(&l, requestID, peek, e) { // degraded.go: decided alone
			if d, ok := s.decideDegraded(&c, &l); ok {
				s.obs.Decided(l, d)
				return CheckResult{Decision: d, Limit: l}, nil
			}
		}
		s.obs.Failed(l)
		return CheckResult{}, e
	}
	if len(results) != 1 {
		s.obs.Failed(l)
		return CheckResult{}, Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op")
	}
	res := &results[0]
	if res.Err != nil {
		s.obs.Failed(l)
		return CheckResult{}, s.nodeError(res.Err)
	}
	if len(res.Decisions) != 1 {
		s.obs.Failed(l)
		if res.Replayed {
			return CheckResult{}, conflictRequestID("request_id")
		}
		return CheckResult{}, Internal("the node returned " + strconv.Itoa(len(res.Decisions)) + " decisions for 1 check")
	}
	out := CheckResult{Decision: res.Decisions[0], Limit: l, Replayed: res.Replayed}
	if !res.Replayed && !peek {
		// A replay or a peek consumed nothing: counting it would inflate the metrics.
		s.obs.Decided(out.Limit, out.Decision)
	}
	return out, nil
}

type singleOp struct {
	checks [1]nodeapi.Check
	ops    [1]nodeapi.Op
}

// CheckAllResult is the answer to CheckAll.
type CheckAllResult struct {
	Allowed   bool               // every check allowed (shadow refusals count as allowed)
	Decisions []nodeapi.Decision // one per check, in order
	Limits    []Limit            // one per check, in order
	Replayed  bool
}

// CheckAll decides checks as one atomic op: if any refuses, none consumes.
// The checks carry no request id of their own; requestID covers them all.
// Errors name the check ("checks[1].key").
func (s *Service) CheckAll(ctx context.Context, checks []CheckRequest, requestID string) (CheckAllResult, *Error) {
	if e := s.CheckCount(len(checks)); e != nil {
		return CheckAllResult{}, e
	}
	if e := ValidateRequestID(requestID, "request_id"); e != nil {
		return CheckAllResult{}, e
	}
	op := nodeapi.Op{Checks: make([]nodeapi.Check, len(checks)), All: true, RequestID: requestID}
	limits := make([]Limit, len(checks))
	for i := range checks {
		if checks[i].RequestID != "" {
			return CheckAllResult{}, Invalid(EntryField(i)+".request_id",
				"the checks of an all-or-nothing request are one request: put request_id at the top level")
		}
		var e *Error
		if op.Checks[i], limits[i], e = s.prepare(&checks[i], false); e == nil {
			e = costAlone(&checks[i]) // reserve.go
		}
		if e != nil {
			return CheckAllResult{}, e.Under(EntryField(i))
		}
		if op.Checks[i].ByPlan {
			return CheckAllResult{}, Invalid(EntryField(i)+".policy",
				"each check of an all-or-nothing request names a policy or a limit (a check under the key's plan is atomic by itself: POST /v1/check)")
		}
	}
	if e := s.crossSlotAll(op.Checks); e != nil { // hashslots.go
		return CheckAllResult{}, e
	}
	listed, out, done := s.listedAll(checks, op.Checks, limits) // lists.go
	if done {
		return out, nil
	}
	if listed != nil {
		// Allow-listed checks are answered, not counted: the op holds the rest.
		full := op.Checks
		op.Checks = make([]nodeapi.Check, 0, len(full))
		for i := range full {
			if listed[i].Reason == 0 {
				op.Checks = append(op.Checks, full[i])
			}
		}
		checks, limits = checks[:len(op.Checks)], slices.Clone(limits)
		all := limits
		limits = limits[:0:0]
		for i := range all {
			if listed[i].Reason == 0 {
				limits = append(limits, all[i])
			}
		}
		res, e := s.checkAllOp(ctx, checks, op, limits, requestID)
		if e != nil {
			return res, e
		}
		merged := make([]nodeapi.Decision, len(full))
		j := 0
		for i := range full {
			if listed[i].Reason != 0 {
				merged[i] = listed[i]
				continue
			}
			merged[i] = res.Decisions[j]
			j++
		}
		res.Decisions, res.Limits = merged, all
		return res, nil
	}
	return s.checkAllOp(ctx, checks, op, limits, requestID)
}

// checkAllOp decides CheckAll's validated op.
func (s *Service) checkAllOp(ctx context.Context, checks []CheckRequest, op nodeapi.Op, limits []Limit, requestID string) (CheckAllResult, *Error) {
	if requestID == "" {
		if out, ok := s.cachedAll(op.Checks, limits); ok {
			return out, nil
		}
	}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, []nodeapi.Op{op})
	cancel()
	failed := func(e *Error) (CheckAllResult, *Error) {
		for i := range limits {
			s.obs.Failed(limits[i])
		}
		return CheckAllResult{}, e
	}
	switch {
	case err != nil:
		return failed(s.nodeError(err))
	case len(results) != 1:
		return failed(Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op"))
	case results[0].Err != nil:
		return failed(s.locate(results[0].Err, op))
	case len(results[0].Decisions) != len(checks):
		if results[0].Replayed {
			return failed(conflictRequestID("request_id"))
		}
		return failed(Internal("the node returned " + strconv.Itoa(len(results[0].Decisions)) +
			" decisions for " + strconv.Itoa(len(checks)) + " checks"))
	}
	res := &results[0]
	out := CheckAllResult{Allowed: true, Decisions: res.Decisions, Limits: limits, Replayed: res.Replayed}
	for i := range res.Decisions {
		out.Allowed = out.Allowed && Allowed(&res.Decisions[i])
		if !res.Replayed {
			s.obs.Decided(limits[i], res.Decisions[i])
		}
	}
	return out, nil
}

// cachedAll answers an atomic op from the over-limit cache when every check
// of it is cached as refused: the log would refuse the group and consume
// nothing. When only some are, the group goes through the log, so that every
// check's decision is one the state machine made (exact, and still consumes
// nothing when it refuses).
func (s *Service) cachedAll(checks []nodeapi.Check, limits []Limit) (CheckAllResult, bool) {
	ds := make([]nodeapi.Decision, len(checks))
	for i := range checks {
		d, hit := s.cached(&checks[i])
		if !hit {
			return CheckAllResult{}, false
		}
		ds[i] = d
	}
	for i := range ds {
		s.obs.Decided(limits[i], ds[i])
	}
	return CheckAllResult{Decisions: ds, Limits: limits}, true
}

// locate names the check a state-machine error of an atomic op is about: the
// state machine names the field within a check ("policy").
func (s *Service) locate(fe *Error, op nodeapi.Op) *Error {
	e := *s.nodeError(fe) // a copy: fe may be shared with the node
	// A request_id conflict is about the op's own id, not one check's.
	if strings.HasPrefix(e.Field, "checks") || e.Field == "request_id" {
		return &e
	}
	idx := -1
	if len(op.Checks) == 1 {
		idx = 0
	} else if e.Code == CodeNotFound {
		// The first policy this node does not know either; failing that, the
		// first whose name the message quotes.
		for i, c := range op.Checks {
			if _, ok := s.deps.Policies.Policy(c.Policy); c.Policy != "" && !ok {
				idx = i
				break
			}
		}
		for i, c := range op.Checks {
			if idx < 0 && c.Policy != "" && strings.Contains(e.Message, strconv.Quote(c.Policy)) {
				idx = i
			}
		}
	}
	if idx < 0 {
		return e.Under("checks")
	}
	return e.Under(EntryField(idx))
}

// CheckCount refuses a CheckAll or Batch of n checks when n is 0 or over
// Config.MaxBatch. Front ends may call it before decoding the checks.
func (s *Service) CheckCount(n int) *Error {
	if n == 0 {
		return Invalid("checks", "must hold at least one check")
	}
	if n > s.cfg.MaxBatch {
		return Invalid("checks", "at most "+strconv.Itoa(s.cfg.MaxBatch)+" checks per request")
	}
	return nil
}

// EntryField names entry i of "checks"; built only for errors.
func EntryField(i int) string { return "checks[" + strconv.Itoa(i) + "]" }

// BatchResult is one entry's answer in a Batch: a result, or Err.
type BatchResult struct {
	CheckResult
	Err *Error
}

// Batch decides independent checks in one round trip, answered in order; an
// invalid entry gets its own error (named "checks[i]...") and the others are
// decided. invalid, when not nil, holds errors a front end found while
// decoding entries (already located), one slot per check: those entries are
// answered with them and not decided. The returned error is for the batch as
// a whole.
func (s *Service) Batch(ctx context.Context, checks []CheckRequest, invalid []*Error) ([]BatchResult, *Error) {
	if e := s.CheckCount(len(checks)); e != nil {
		return nil, e
	}
	if invalid != nil && len(invalid) != len(checks) {
		return nil, Internal("Batch: " + strconv.Itoa(len(invalid)) + " decoding errors for " + strconv.Itoa(len(checks)) + " checks")
	}
	out := make([]BatchResult, len(checks))
	// One op per valid entry; slot maps an op back to its entry.
	ops := make([]nodeapi.Op, 0, len(checks))
	fc := make([]nodeapi.Check, len(checks))
	slot := make([]int, 0, len(checks))
	for i := range checks {
		if invalid != nil && invalid[i] != nil {
			out[i].Err = invalid[i]
			continue
		}
		var e *Error
		if fc[i], out[i].Limit, e = s.prepare(&checks[i], true); e == nil {
			e = batchCost(&checks[i], &fc[i], &out[i].Limit) // batchreserve.go
		}
		if e != nil {
			out[i].Err = e.Under(EntryField(i))
			continue
		}
		if d, ok := s.listed(&fc[i], checks[i].Addr, &out[i].Limit); ok {
			out[i].Decision = d
			s.obs.Decided(out[i].Limit, d)
			continue
		}
		if checks[i].RequestID == "" && fc[i].Reserve == 0 { // a reserve: always the log
			if d, hit := s.bannedCheck(&fc[i], &out[i].Limit); hit {
				out[i].Decision = d
				s.obs.Decided(out[i].Limit, d)
				continue
			}
			if d, hit := s.cached(&fc[i]); hit {
				// Answered in its slot; only misses become ops.
				out[i].Decision = d
				s.obs.Decided(out[i].Limit, d)
				continue
			}
		}
		ops = append(ops, nodeapi.Op{Checks: fc[i : i+1 : i+1], RequestID: checks[i].RequestID})
		slot = append(slot, i)
	}
	if len(ops) == 0 {
		return out, nil
	}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, ops)
	cancel()
	if err != nil {
		for _, i := range slot {
			s.obs.Failed(out[i].Limit)
		}
		return nil, s.nodeError(err)
	}
	if len(results) != len(ops) {
		return nil, Internal("the node returned " + strconv.Itoa(len(results)) + " results for " + strconv.Itoa(len(ops)) + " ops")
	}
	for j, i := range slot {
		res, o := &results[j], &out[i]
		switch {
		case res.Err != nil:
			s.obs.Failed(o.Limit)
			e := *s.nodeError(res.Err)
			o.Err = e.Under(EntryField(i))
		case len(res.Decisions) != 1:
			s.obs.Failed(o.Limit)
			if res.Replayed {
				o.Err = conflictRequestID(EntryField(i) + ".request_id")
			} else {
				o.Err = Internal("the node returned " + strconv.Itoa(len(res.Decisions)) + " decisions for 1 check")
			}
		default:
			o.Decision, o.Replayed = res.Decisions[0], res.Replayed
			batchReservation(&fc[i], &o.Decision)
			if !res.Replayed {
				s.obs.Decided(o.Limit, o.Decision)
			}
		}
	}
	return out, nil
}

// ResetKey forgets r.Key's state under r's limit, as if the key had never
// been seen (r.Cost and r.RequestID are ignored).
func (s *Service) ResetKey(ctx context.Context, r *CheckRequest) *Error {
	p := *r
	p.Cost, p.RequestID = 0, ""
	c, _, e := s.prepare(&p, false)
	if e != nil {
		return e
	}
	if c.ByPlan {
		return Invalid("policy", "a reset names the policy or limit whose state it forgets")
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	if c.Policy != "" {
		// This node's leases on the key go back first: the state machine
		// keeps outstanding leased units counted across a reset, so a
		// lease still held would shrink the renewed budget (lease.go).
		s.leases.Forget(c.Policy, c.Key)
	}
	return s.nodeError(s.node.ResetKey(ctx, c))
}
