package service

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/rls"
)

// Costs known later (fsm/reserve.go decides them all, in the log, from the
// leader's time):
//
//   - a check with Reserve spends its estimated cost now and answers a
//     reservation; Settle gives the actual cost, refunding the difference or
//     charging the extra; a reservation not settled by its hold's end stays
//     settled at its estimate, or, under a policy's reservation_expiry
//     "return", is given back (reserve_expiry.go);
//   - a check with Overdraft always applies: past the limit the key goes
//     into debt, refused until the debt has refilled or rolled;
//   - Refund gives back at most what a request id's check spent, in the
//     window it spent it.
//
// Where the shortcuts apply: none of these is answered from the over-limit
// cache, a quota lease or a ban shortcut in the service; each goes to the
// log, so that the state that holds the key's budget sees every credit and
// charge (a refund or settle also drops the cache's refusal of the key).
//
// The reservation a client holds is a token naming the key and the limit as
// well as the state machine's id, so that a settle needs nothing else:
// "r1." + base64url(kind ‖ uvarint(len(limit)) ‖ limit ‖ uvarint(len(key)) ‖
// key ‖ id), kind 'p' (limit: the policy name) or 's' (the inline limit's
// canonical encoding).

// MaxReserveHold bounds a reservation's hold (fsm.MaxReserveHold).
const MaxReserveHold = 24 * time.Hour

// maxReservationToken bounds a settle's reservation: a key, a limit and an id.
const maxReservationToken = 4096

const reservationPrefix = "r1."

// ValidateReserve checks a check's reserve hold and cost.
func ValidateReserve(hold time.Duration, cost int64, field string) *Error {
	switch {
	case hold <= 0 || hold > MaxReserveHold:
		return Invalid(field+".hold", "must be a duration within (0, "+MaxReserveHold.String()+"]")
	case cost <= 0:
		return Invalid("cost", "a reservation spends its estimated cost now: must be at least 1")
	}
	return nil
}

// costLimit refuses a reserve, settle, refund or overdraft under an algorithm
// that cannot credit or hold a debt exactly.
func costLimit(l *Limit, c *nodeapi.Check, what string) *Error {
	if !l.Known || l.Spec.Algorithm.CanOverdraw() {
		return nil
	}
	field := "limit.algorithm"
	if c.Policy != "" {
		field = "policy"
	}
	return Invalid(field, l.Spec.Algorithm.String()+" cannot be "+what+" exactly (fixed_window, sliding_window, token_bucket and leaky_bucket can)")
}

// costAlone refuses a reserve or overdraft inside an all-or-nothing group:
// each is a check of its own (POST /v1/check; a reserve may also be a batch
// entry, batchreserve.go).
func costAlone(r *CheckRequest) *Error {
	switch {
	case r.Reserve != 0:
		return Invalid("reserve", "a reserve is a check of its own or a batch entry, not part of an all-or-nothing group")
	case r.Overdraft:
		return Invalid("overdraft", "an overdraft is a check of its own, not part of a batch or group")
	}
	return nil
}

// costCheck decides a validated check with Reserve or Overdraft: always in
// the log (see above), its reservation id wrapped into the token.
func (s *Service) costCheck(ctx context.Context, c nodeapi.Check, l Limit, requestID string) (CheckResult, *Error) {
	if c.Reserve != 0 {
		if e := validReserve(&c, &l); e != nil { // batchreserve.go
			return CheckResult{}, e
		}
	} else if c.ByPlan {
		return CheckResult{}, Invalid("overdraft", "a reserve or overdraft names a policy or a limit")
	} else if e := costLimit(&l, &c, "overdrawn"); e != nil {
		return CheckResult{}, e
	}
	out, e := s.decideOne(ctx, c, l, requestID, false)
	if e != nil {
		return out, e
	}
	if id := out.Decision.Reservation; id != "" {
		out.Decision.Reservation = reservationToken(&c, id)
	}
	return out, nil
}

func reservationToken(c *nodeapi.Check, id string) string {
	b := make([]byte, 0, 16+len(c.Policy)+len(c.Key)+len(id))
	if c.Policy != "" {
		b = append(b, 'p')
		b = binary.AppendUvarint(b, uint64(len(c.Policy)))
		b = append(b, c.Policy...)
	} else {
		enc := algo.AppendSpec(nil, *c.Spec)
		b = append(b, 's')
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	b = append(b, id...)
	return reservationPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseReservation reads a token into the settle's check (Cost unset).
func parseReservation(tok string) (nodeapi.Check, *Error) {
	bad := func(why string) (nodeapi.Check, *Error) {
		return nodeapi.Check{}, Invalid("reservation", why)
	}
	switch {
	case tok == "":
		return bad("is required: the reservation an allowed check with reserve answered")
	case len(tok) > maxReservationToken:
		return bad("longer than " + strconv.Itoa(maxReservationToken) + " bytes")
	case !strings.HasPrefix(tok, reservationPrefix):
		return bad("not a reservation this server answered")
	}
	b, err := base64.RawURLEncoding.DecodeString(tok[len(reservationPrefix):])
	if err != nil || len(b) < 2 {
		return bad("not a reservation this server answered")
	}
	kind := b[0]
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n == 0 || uint64(len(b)-1-w) < n {
		return bad("not a reservation this server answered")
	}
	ident := b[1+w : 1+w+int(n)]
	rest := b[1+w+int(n):]
	kn, kw := binary.Uvarint(rest)
	if kw <= 0 || uint64(len(rest)-kw) <= kn {
		return bad("not a reservation this server answered")
	}
	c := nodeapi.Check{Key: string(rest[kw : kw+int(kn)]), Settle: string(rest[kw+int(kn):])}
	switch kind {
	case 'p':
		c.Policy = string(ident)
	case 's':
		spec, m, err := algo.DecodeSpec(ident)
		if err != nil || m != len(ident) {
			return bad("not a reservation this server answered")
		}
		if spec, err = spec.Validate(); err != nil {
			return bad("not a reservation this server answered")
		}
		c.Spec = &spec
	default:
		return bad("not a reservation this server answered")
	}
	return c, nil
}

// SettleRequest settles a reservation at its actual cost.
type SettleRequest struct {
	Reservation string
	Cost        int64
}

// CostResult is a settle's or refund's answer. Credited is the units given
// back to the key (negative: a settle's extra charge); Debt what the key owes
// past its limit after it; Rolled, that less than asked could be given back
// (the window the units were spent in has rolled, or the bucket refilled);
// Replayed, a repeat of a settle already applied (nothing changed).
type CostResult struct {
	Credited int64
	Debt     int64
	Rolled   bool
	Replayed bool
	Decision nodeapi.Decision // the key after it
	Limit    Limit
}

// Settle settles the reservation at r.Cost, exactly once: a repeat with the
// same cost replays the answer, another cost is a conflict naming cost, and
// a settle at or after the hold's end is refused naming reservation (it was
// settled at its estimate, or returned under reservation_expiry "return").
func (s *Service) Settle(ctx context.Context, r *SettleRequest) (CostResult, *Error) {
	c, l, e := s.settleCheck(r)
	if e != nil {
		return CostResult{}, e
	}
	return s.costOp(ctx, c, l)
}

// settleCheck validates r into the one check of its op (shared by the single
// and the batch routes).
func (s *Service) settleCheck(r *SettleRequest) (nodeapi.Check, Limit, *Error) {
	c, e := parseReservation(r.Reservation)
	if e != nil {
		return nodeapi.Check{}, Limit{}, e
	}
	if r.Cost < 0 {
		return nodeapi.Check{}, Limit{}, Invalid("cost", "the actual cost must be zero or a positive integer")
	}
	if r.Cost > algo.MaxLimit {
		return nodeapi.Check{}, Limit{}, Invalid("cost", "must be at most "+strconv.FormatInt(algo.MaxLimit, 10))
	}
	c.Cost = r.Cost
	if c.Policy != "" {
		return c, s.limitOf(c.Policy), nil
	}
	return c, Limit{Name: InlineName, Spec: *c.Spec, Known: true}, nil
}

// RefundRequest gives back up to Cost units a request id's check spent.
type RefundRequest struct {
	RequestID string
	Cost      int64
}

// Refund credits at most what the request r.RequestID spent and has not been
// refunded, into the window it spent it: after that window rolled it gives
// back nothing and says so (Rolled). A request that spent nothing that can
// be refunded, or a cost larger than what is left, is invalid_argument.
func (s *Service) Refund(ctx context.Context, r *RefundRequest) (CostResult, *Error) {
	if r.RequestID == "" {
		return CostResult{}, Invalid("request_id", "is required: the request_id of the check whose units to give back")
	}
	if e := ValidateRequestID(r.RequestID, "request_id"); e != nil {
		return CostResult{}, e
	}
	if r.Cost <= 0 || r.Cost > algo.MaxLimit {
		return CostResult{}, Invalid("cost", "must be a positive integer up to what the request spent")
	}
	return s.costOp(ctx, nodeapi.Check{Refund: r.RequestID, Cost: r.Cost}, Limit{})
}

func (s *Service) costOp(ctx context.Context, c nodeapi.Check, l Limit) (CostResult, *Error) {
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, []nodeapi.Op{{Checks: []nodeapi.Check{c}}})
	cancel()
	switch {
	case err != nil:
		return CostResult{}, s.nodeError(err)
	case len(results) != 1:
		return CostResult{}, Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op")
	}
	return s.costResult(&c, &results[0], l)
}

// costResult reads a settle's or refund's op result.
func (s *Service) costResult(c *nodeapi.Check, res *nodeapi.Result, l Limit) (CostResult, *Error) {
	switch {
	case res.Err != nil:
		return CostResult{}, s.nodeError(res.Err)
	case len(res.Decisions) != 1:
		return CostResult{}, Internal("the node returned " + strconv.Itoa(len(res.Decisions)) + " decisions for a settle or refund")
	}
	d := res.Decisions[0]
	if d.Reservation != "" {
		d.Reservation = reservationToken(c, d.Reservation)
	}
	return CostResult{Credited: d.Credited, Debt: d.Debt, Rolled: d.Rolled, Replayed: res.Replayed, Decision: d, Limit: l}, nil
}

// Envoy's negative hits (is_negative_hits, sent with hits_addend on the
// response path by apply_on_stream_done): each matched descriptor's hits are
// given back to its counter's current window, at most to fresh, as
// envoyproxy/ratelimit decrements its counter. RLS rules are fixed windows
// (requests per unit), which credit exactly; a concurrency limit is never
// an RLS rule, so there is no slot to release here. A request is all
// negative or all positive: one answer cannot both spend and refund.
func negativeHits(req *rls.Request) (bool, *Error) {
	neg := 0
	for i := range req.Descriptors {
		if req.Descriptors[i].Negative {
			neg++
		}
	}
	if neg > 0 && neg < len(req.Descriptors) {
		for i := range req.Descriptors {
			if req.Descriptors[i].Negative != req.Descriptors[0].Negative {
				return false, Invalid("descriptors["+strconv.Itoa(i)+"].is_negative_hits", "a request's descriptors are all negative hits or none")
			}
		}
	}
	return neg > 0, nil
}

// creditPlan gives each checked item's cost back, in one round trip.
func (s *Service) creditPlan(ctx context.Context, plan *rls.Plan) ([]rls.Result, *Error) {
	results := make([]rls.Result, len(plan.Items))
	var ops []nodeapi.Op
	var idx []int
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Kind != rls.Checked || it.Cost <= 0 {
			continue
		}
		ops = append(ops, nodeapi.Op{Checks: []nodeapi.Check{{Key: it.Key, Spec: &it.Spec, Cost: it.Cost, Credit: true}}})
		idx = append(idx, i)
	}
	for i := range plan.Items {
		results[i] = rls.Result{Decision: algo.Decision{Allowed: true}, Consumed: true}
	}
	if len(ops) == 0 {
		return results, nil
	}
	ctx, cancel := s.context(ctx)
	rs, err := s.node.Check(ctx, ops)
	cancel()
	if err != nil {
		return nil, s.nodeError(err)
	}
	if len(rs) != len(ops) {
		return nil, Internal("the node returned " + strconv.Itoa(len(rs)) + " results for " + strconv.Itoa(len(ops)) + " ops")
	}
	for j, i := range idx {
		if rs[j].Err != nil {
			return nil, s.nodeError(rs[j].Err).Under("descriptors[" + strconv.Itoa(i) + "]")
		}
		if len(rs[j].Decisions) == 1 {
			results[i] = rls.Result{Decision: rs[j].Decisions[0].Decision, Consumed: true}
			results[i].Decision.Allowed = true
		}
	}
	return results, nil
}
