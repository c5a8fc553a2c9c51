package fsm

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// SlotOp and its values are nodeapi's.
type SlotOp = nodeapi.SlotOp

const (
	SlotRelease = nodeapi.SlotRelease
	SlotRenew   = nodeapi.SlotRenew
)

// Concurrency slots (algo.Concurrency): an allowed check of cost 1 under a
// concurrency limit acquires a slot, which a later op releases or renews by
// its id. The slots live in the key's state like any algorithm's, so
// snapshots, restores, digests and the expiry sweep cover them with no new
// bucket.
//
// Invariant: at every applied index the slots held on a key (hold not yet
// ended at the entry's time) number at most its limit. Acquires are decided
// in apply against the leader-stamped, clamped time like every check, so a
// slot whose holder crashed comes back at exactly its hold's end on every
// replica, and a leader change neither frees one early nor keeps one longer
// (time never runs backwards across leaders).
//
// A slot's id is the op's request_id when it has one (a retry of the
// acquire then replays the same slot through the request table), else
// "<raft index>.<op>.<check>", unique in the log and the same on every
// replica.
//
// Release and renew travel as single-check ops of a CmdCheck entry (limit
// kind bits limitRelease, limitRenew, beside limitPolicy or limitSpec; the
// slot id follows the limit): like adjustments they are stamped with the
// leader's time, batched and forwarded like checks, and need no command of
// their own. A node that does not know the bits stops on them ("unknown
// means stop"): upgrade every node before using concurrency limits.
//
// The over-limit cache never keeps a concurrency limit's refusals
// (notCacheable): a release frees a slot without a check observing it, so a
// cached refusal could outlive the slot that caused it.
const (
	limitRelease byte = 32
	limitRenew   byte = 64
	// decSlot, a decision flag (codec.go's decAllowed…decPlan): the
	// decision's Slot and SlotHold follow it.
	decSlot byte = 16
)

type slotApplier struct {
	op        int    // the op's position in its entry
	requestID []byte // the op's request id, if any
	idBuf     []byte
	// Slots acquired and released by the entries this replica applied
	// (SlotCounts). Every replica counts the same entries.
	acquired, released atomic.Uint64
}

// SlotCounts is how many concurrency slots the applied entries acquired and
// released since this process started (a slot not released ended with its
// hold). For metrics: a rolled-back apply stops the node.
func (f *FSM) SlotCounts() (acquired, released uint64) {
	return f.ap.slot.acquired.Load(), f.ap.slot.released.Load()
}

// countAcquired counts the slots an applied op holds.
func (a *applier) countAcquired(res *Result) {
	if res.Err != nil {
		return
	}
	for i := range res.Decisions {
		if res.Decisions[i].Slot != "" {
			a.slot.acquired.Add(1)
		}
	}
}

// slotGrant is what an acquire holds.
type slotGrant struct {
	id   string
	hold time.Duration
}

func notCacheable(s *algo.Spec) bool { return s.Algorithm == algo.Concurrency }

// slotKind is appendCheck's kind bits for c's slot op.
func slotKind(c *Check) byte {
	switch c.SlotOp {
	case SlotRelease:
		return limitRelease
	case SlotRenew:
		return limitRenew
	}
	return 0
}

// slotOpOf is DecodeOps' inverse of slotKind.
func slotOpOf(c *checkRef) (SlotOp, string) {
	switch {
	case c.kind&limitRelease != 0:
		return SlotRelease, string(c.slot)
	case c.kind&limitRenew != 0:
		return SlotRenew, string(c.slot)
	}
	return 0, ""
}

// slotOp reports whether the op is a release or renewal, which must be the
// op's only check.
func slotOp(checks []checkRef) (bool, *Error) {
	n := 0
	for i := range checks {
		if checks[i].kind&(limitRelease|limitRenew) != 0 {
			n++
		}
	}
	switch {
	case n == 0:
		return false, nil
	case len(checks) > 1:
		return false, &Error{Code: CodeInvalidArgument, Field: "slot", Message: "a release or renewal names one slot, alone in its request"}
	}
	return true, nil
}

// acquire decides check j of the current op under a concurrency limit.
func (a *applier) acquire(s *algo.Spec, state []byte, now, cost int64, j int) (algo.Decision, slotGrant, []byte, error) {
	var id []byte
	if cost == 1 {
		if len(a.slot.requestID) > 0 {
			id = a.slot.requestID
		} else {
			b := strconv.AppendUint(a.slot.idBuf[:0], a.index, 10)
			b = append(b, '.')
			b = strconv.AppendInt(b, int64(a.slot.op), 10)
			b = append(b, '.')
			b = strconv.AppendInt(b, int64(j), 10)
			a.slot.idBuf, id = b, b
		}
	}
	d, hold, next, err := algo.Acquire(a.decideBuf[:0], s, state, now, cost, id)
	if err != nil {
		return d, slotGrant{}, nil, err
	}
	var g slotGrant
	if d.Allowed && cost == 1 {
		g = slotGrant{id: string(id), hold: hold}
	}
	return d, g, next, nil
}

// dropSlots clears the slots of a refused all-or-nothing op's decisions:
// none of its states was written, so it holds nothing.
func dropSlots(decs []Decision) {
	for i := range decs {
		decs[i].Slot, decs[i].SlotHold = "", 0
	}
}

// applySlotOp releases or renews the slot ck names. An unknown slot is
// not_found naming slot; one already freed (released, or its hold ended)
// answers not allowed (released/renewed false) and changes nothing.
func (a *applier) applySlotOp(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	renew := ck.kind&limitRenew != 0
	c := *ck
	c.kind &^= limitRelease | limitRenew
	c.cost = 0
	var lim limit
	if e := a.resolve(&c, &lim); e != nil {
		return Result{Err: e}, nil
	}
	if lim.spec.Algorithm != algo.Concurrency {
		field := "limit"
		if lim.policy {
			field = "policy"
		}
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: field, Message: "slots are released and renewed under a concurrency limit only"}}, nil
	}
	if len(ck.slot) == 0 || len(ck.slot) > algo.MaxSlotID {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "slot", Message: fmt.Sprintf("must be 1 to %d bytes", algo.MaxSlotID)}}, nil
	}
	key := a.storageKey(&c, &lim)
	st, err := tx.State(key)
	if err != nil {
		return Result{}, err
	}
	var ans algo.SlotAnswer
	var left time.Duration
	var d algo.Decision
	var next []byte
	if renew {
		ans, left, d, next, err = algo.Renew(a.decideBuf[:0], lim.spec, st.Data, now, ck.slot)
	} else {
		ans, d, next, err = algo.Release(a.decideBuf[:0], lim.spec, st.Data, now, ck.slot)
	}
	if err != nil {
		return Result{Err: decideError(err)}, nil
	}
	if cap(next) > cap(a.decideBuf) {
		a.decideBuf = next[:0]
	}
	if ans == algo.SlotUnknown {
		return Result{Err: &Error{Code: CodeNotFound, Field: "slot", Message: fmt.Sprintf("slot %q is not held on this key under this limit (never acquired here, or freed longer than max_hold ago)", ck.slot)}}, nil
	}
	if ans == algo.SlotHeld {
		t := tentative{key: key, prev: st, data: next, expiry: now + int64(d.ResetAfter), changed: true}
		if err := writeState(tx, &t); err != nil {
			return Result{}, err
		}
	}
	d.Allowed = ans == algo.SlotHeld
	if d.Allowed && !renew {
		a.slot.released.Add(1)
	}
	decs[0] = Decision{Decision: d, Slot: string(ck.slot), SlotHold: left}
	return Result{Allowed: d.Allowed, Decisions: decs}, nil
}
