package service

import (
	"context"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Concurrency slots. An acquire is an ordinary check (cost 1) under a
// concurrency limit, whose decision carries the slot (Decision.Slot); Release
// and Renew name that slot under the same key and limit. Both go through the
// log like a check, stamped with the leader's time, so a slot's end is decided
// on every replica alike (fsm/slots.go).

// SlotRequest names a held slot: the key, exactly one of Policy and Limit
// (validated, shared, never modified), and the slot's id.
type SlotRequest struct {
	Key    string
	Policy string
	Limit  *algo.Spec
	Slot   string
}

// SlotResult is a release's or renewal's answer. Done: the slot was held
// and is now released (or renewed); false when it had been freed already
// (released before, or its hold ended), which changed nothing. Hold is the
// time left on a renewed slot.
type SlotResult struct {
	Slot     string
	Done     bool
	Hold     time.Duration
	Decision nodeapi.Decision // the key's slots after the operation
	Limit    Limit
}

// Release frees a slot at once (idempotent: a slot freed already answers
// Done false). A slot never held on the key is not_found naming slot.
func (s *Service) Release(ctx context.Context, r *SlotRequest) (SlotResult, *Error) {
	return s.slotOp(ctx, r, nodeapi.SlotRelease)
}

// Renew extends a held slot's hold by the limit's hold from now, never past
// its acquisition + max_hold. A slot freed already answers Done false: it
// cannot come back, since another holder may have its place.
func (s *Service) Renew(ctx context.Context, r *SlotRequest) (SlotResult, *Error) {
	return s.slotOp(ctx, r, nodeapi.SlotRenew)
}

// ValidateSlot checks a slot id: 1 to algo.MaxSlotID bytes of UTF-8.
func ValidateSlot(slot, field string) *Error {
	switch {
	case slot == "":
		return Invalid(field, "is required: the slot an allowed check of a concurrency limit answered")
	case len(slot) > algo.MaxSlotID:
		return Invalid(field, "must be at most "+strconv.Itoa(algo.MaxSlotID)+" bytes, got "+strconv.Itoa(len(slot)))
	case !utf8.ValidString(slot):
		return Invalid(field, "must be valid UTF-8")
	}
	return nil
}

func (s *Service) slotOp(ctx context.Context, r *SlotRequest, what nodeapi.SlotOp) (SlotResult, *Error) {
	c, l, e := s.slotCheck(r, what)
	if e != nil {
		return SlotResult{}, e
	}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, []nodeapi.Op{{Checks: []nodeapi.Check{c}}})
	cancel()
	switch {
	case err != nil:
		return SlotResult{}, s.nodeError(err)
	case len(results) != 1:
		return SlotResult{}, Internal("the node returned " + strconv.Itoa(len(results)) + " results for 1 op")
	}
	return s.slotResult(r, &results[0], l)
}

// slotCheck validates r into the one check of its op (shared by the single
// and the batch routes, so both refuse the same input the same way).
func (s *Service) slotCheck(r *SlotRequest, what nodeapi.SlotOp) (nodeapi.Check, Limit, *Error) {
	if e := ValidateKey(r.Key, "key"); e != nil {
		return nodeapi.Check{}, Limit{}, e
	}
	c := nodeapi.Check{Key: r.Key, SlotOp: what, Slot: r.Slot}
	var l Limit
	switch {
	case r.Policy != "" && r.Limit != nil:
		return nodeapi.Check{}, Limit{}, Invalid("limit", "give either policy or limit, not both")
	case r.Policy != "":
		if e := ValidatePolicyName(r.Policy, "policy"); e != nil {
			return nodeapi.Check{}, Limit{}, e
		}
		c.Policy, l = r.Policy, s.limitOf(r.Policy)
		if l.Known && l.Spec.Algorithm != algo.Concurrency {
			return nodeapi.Check{}, Limit{}, Invalid("policy", "policy "+strconv.Quote(r.Policy)+" is "+l.Spec.Algorithm.String()+": slots are released and renewed under a concurrency limit only")
		}
	case r.Limit != nil:
		if r.Limit.Algorithm != algo.Concurrency {
			return nodeapi.Check{}, Limit{}, Invalid("limit.algorithm", "slots are released and renewed under a concurrency limit only")
		}
		if e := s.checkInline(r.Limit); e != nil {
			return nodeapi.Check{}, Limit{}, e
		}
		c.Spec, l = r.Limit, Limit{Name: InlineName, Spec: *r.Limit, Known: true}
	default:
		return nodeapi.Check{}, Limit{}, Invalid("policy", "name the concurrency policy (or give the inline limit) the slot was acquired under")
	}
	if e := ValidateSlot(r.Slot, "slot"); e != nil {
		return nodeapi.Check{}, Limit{}, e
	}
	return c, l, nil
}

// slotResult reads a release's or renewal's op result.
func (s *Service) slotResult(r *SlotRequest, res *nodeapi.Result, l Limit) (SlotResult, *Error) {
	switch {
	case res.Err != nil:
		return SlotResult{}, s.nodeError(res.Err)
	case len(res.Decisions) != 1:
		return SlotResult{}, Internal("the node returned " + strconv.Itoa(len(res.Decisions)) + " decisions for a slot")
	}
	d := res.Decisions[0]
	return SlotResult{Slot: r.Slot, Done: res.Allowed, Hold: d.SlotHold, Decision: d, Limit: l}, nil
}
