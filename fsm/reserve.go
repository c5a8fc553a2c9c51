package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
)

// Costs known later: reserve then settle, overdraft, refunds.
//
// A reserve is a check of its estimated cost with a hold: allowed, it spends
// the estimate now like any check and leaves a reservation record with the
// key (storage key 'R' ‖ uvarint(len(state key)) ‖ state key ‖ id, a state
// of its own whose expiry is the hold's end, so snapshots, restores, digests
// and the expiry sweep carry it with the key and nothing else). A settle
// names the reservation and the actual cost: the difference is credited
// (algo.Credit: only into the window the estimate was spent in) or charged
// (algo.Debit: the extra always applies, and may put the key in debt). A
// reservation not settled by its hold's end stays settled at its estimate,
// unless its policy's reservation_expiry is "return" (LimitOptions,
// tag 'r'): the reserve then writes its record as version 2, and the expiry
// sweep that removes the record credits the estimate back (creditKey, the
// path a refund takes: only into the window it was spent in, so nothing
// once that window has rolled). The choice is the policy's at the reserve,
// kept in the record, so a later policy change does not alter a hold
// already made; the sweep runs in apply at the entry's leader time, and the
// record is removed in the same transaction that credits it, so every
// replica returns it once, and never one a settle has settled.
//
// Invariants. Every outcome is decided in apply from the entry's leader
// time, clamped monotonic: a settle at or after the hold's end is refused on
// every replica alike, whether or not the sweep has removed the record yet,
// so a leader change neither lengthens nor shortens a hold. A reservation is
// settled exactly once: the record is kept, marked settled with the actual
// cost, until its hold ends; a repeat of the same settle replays its answer
// (Replayed) and changes nothing, a settle with another cost is a conflict
// naming cost.
//
// An overdraft check is decided like any; refused by its limit (not by a
// ban, not in shadow mode), its cost is charged anyway (algo.Debit) and it
// answers allowed with the key's Debt. Under count_refused the refusal has
// charged the cost already.
//
// The ops travel in CmdCheck entries as single-check ops: kind bit
// limitCosts, then costs flags ‖ [varint(hold)] ‖ [bytes(reservation or
// request id)] before the cost. A node that does not know the bit stops on
// it ("unknown means stop"): upgrade every node before using them.
const (
	limitCosts byte = 128
	// decCosts, a decision flag (codec.go's decAllowed…decSlot): the
	// reservation, its hold, credited, debt and rolled follow it.
	decCosts byte = 0x20

	costReserve   byte = 1
	costOverdraft byte = 2
	costSettle    byte = 4
	costRefund    byte = 8
	costCredit    byte = 16 // Check.Credit: into the current window, at most to fresh

	reservationKeyPrefix byte = 'R'
	reservationVersion   byte = 1
	// reservationReturns: the same record, returned at its hold's end if
	// still open (reservation_expiry "return").
	reservationReturns byte = 2

	// MaxReserveHold bounds a reservation's hold: its record lives that long.
	MaxReserveHold = 24 * time.Hour
	// MaxReservationID bounds a reservation id (a request id, or
	// "<raft index>.<op>").
	MaxReservationID = MaxRequestIDBytes
)

// costRef is a check's costs fields in an entry.
type costRef struct {
	flags byte
	hold  int64  // costReserve: ns
	ref   []byte // costSettle: the reservation id; costRefund: the request id
}

func costsKind(c *Check) byte {
	if c.Reserve != 0 || c.Overdraft || c.Settle != "" || c.Refund != "" || c.Credit {
		return limitCosts
	}
	return 0
}

// appendCosts writes the costs fields of c (kind bit limitCosts).
func appendCosts(dst []byte, c *Check) []byte {
	var f byte
	if c.Reserve != 0 {
		f |= costReserve
	}
	if c.Overdraft {
		f |= costOverdraft
	}
	if c.Settle != "" {
		f |= costSettle
	}
	if c.Refund != "" {
		f |= costRefund
	}
	if c.Credit {
		f |= costCredit
	}
	dst = append(dst, f)
	if f&costReserve != 0 {
		dst = binary.AppendVarint(dst, int64(c.Reserve))
	}
	switch {
	case f&costSettle != 0:
		dst = appendString(dst, c.Settle)
	case f&costRefund != 0:
		dst = appendString(dst, c.Refund)
	}
	return dst
}

func (d *decoder) costs() costRef {
	r := costRef{flags: d.byte()}
	if r.flags == 0 || r.flags&^(costReserve|costOverdraft|costSettle|costRefund|costCredit) != 0 {
		d.fail(fmt.Errorf("unknown costs flags %#x", r.flags))
		return costRef{}
	}
	if r.flags&costReserve != 0 {
		r.hold = d.varint()
	}
	if r.flags&(costSettle|costRefund) != 0 {
		r.ref = d.bytes()
	}
	return r
}

// setCheck is DecodeOps' inverse of appendCosts.
func (r *costRef) setCheck(c *Check) {
	if r.flags&costReserve != 0 {
		c.Reserve = time.Duration(r.hold)
	}
	c.Overdraft = r.flags&costOverdraft != 0
	c.Credit = r.flags&costCredit != 0
	switch {
	case r.flags&costSettle != 0:
		c.Settle = string(r.ref)
	case r.flags&costRefund != 0:
		c.Refund = string(r.ref)
	}
}

// fingerprint folds the costs fields into a request id's limits hash, so a
// request id reused for a reserve of another hold, a settle of another
// reservation or an overdraft of a plain check is a conflict. A check
// without them hashes as it always did.
func (r *costRef) fingerprint(h uint64) uint64 {
	if r.flags == 0 {
		return h
	}
	h = (h ^ uint64(r.flags)) * fnvPrime64
	var n [binary.MaxVarintLen64]byte
	h = fnvBytes(h, n[:binary.PutVarint(n[:], r.hold)])
	return fnvField(h, r.ref)
}

func hasCostDecision(d *Decision) bool {
	return d.Reservation != "" || d.Credited != 0 || d.Debt != 0 || d.Rolled
}

func appendCostDecision(dst []byte, d *Decision) []byte {
	dst = appendString(dst, d.Reservation)
	dst = binary.AppendVarint(dst, int64(d.ReservationHold))
	dst = binary.AppendVarint(dst, d.Credited)
	dst = binary.AppendVarint(dst, d.Debt)
	var rolled byte
	if d.Rolled {
		rolled = 1
	}
	return append(dst, rolled)
}

func (d *decoder) costDecision(dd *Decision) {
	dd.Reservation = string(d.bytes())
	dd.ReservationHold = time.Duration(d.varint())
	dd.Credited = d.varint()
	dd.Debt = d.varint()
	switch d.byte() {
	case 0:
	case 1:
		dd.Rolled = true
	default:
		d.fail(fmt.Errorf("unknown rolled flag"))
	}
}

// costCounters count what the applied entries did (metrics; every replica
// counts the same entries).
type costCounters struct {
	// expired: ended open and settled at the estimate; returned: ended
	// open and given back (returnedUnits: the units credited).
	reserved, settled, expired, returned, refunds, overdrafts atomic.Uint64
	returnedUnits                                             atomic.Uint64
	// refunded is units given back by settles and refunds; debited the
	// extra and overdraft units charged past the limit.
	refunded, debited atomic.Uint64
}

// CostCounts is what the applied entries did with costs since this process
// started.
type CostCounts struct {
	Reserved, Settled, Expired, Refunds, Overdrafts uint64
	Refunded, Debited                               uint64
	// Returned reservations ended open under reservation_expiry "return"
	// (Expired: the others, settled at their estimate); ReturnedUnits the
	// units they gave back (none once their window had rolled).
	Returned, ReturnedUnits uint64
}

// CostCounts reports the costs counters (metrics).
func (f *FSM) CostCounts() CostCounts {
	c := &f.ap.costs.counters
	return CostCounts{
		Reserved: c.reserved.Load(), Settled: c.settled.Load(), Expired: c.expired.Load(),
		Refunds: c.refunds.Load(), Overdrafts: c.overdrafts.Load(),
		Refunded: c.refunded.Load(), Debited: c.debited.Load(),
		Returned: c.returned.Load(), ReturnedUnits: c.returnedUnits.Load(),
	}
}

// costOp reports whether the op carries costs fields; such a check must be
// the op's only one.
func costOp(checks []checkRef) (bool, *Error) {
	for i := range checks {
		if f := checks[i].costs.flags; f != 0 {
			if len(checks) > 1 {
				return false, &Error{Code: CodeInvalidArgument, Field: costField(f), Message: "a reserve, settle, refund or overdraft is one check, alone in its request"}
			}
			return true, nil
		}
	}
	return false, nil
}

func costField(f byte) string {
	switch {
	case f&costSettle != 0:
		return "reservation"
	case f&costRefund != 0:
		return "request_id"
	case f&costReserve != 0:
		return "reserve"
	case f&costCredit != 0:
		return "cost"
	}
	return "overdraft"
}

// reservation is a reservation record:
//
//	reservationVersion ‖ varint(estimate) ‖ varint(window) ‖ varint(settled) ‖ varint(credited)
//
// settled is -1 while open, else the actual cost it was settled at;
// credited is what that settle gave back (negative: charged). The version
// is reservationReturns when an open one is returned at its hold's end.
type reservation struct {
	estimate, window, settled, credited int64
	returns                             bool
}

func (r *reservation) appendTo(dst []byte) []byte {
	v := reservationVersion
	if r.returns {
		v = reservationReturns
	}
	dst = append(dst, v)
	dst = binary.AppendVarint(dst, r.estimate)
	dst = binary.AppendVarint(dst, r.window)
	dst = binary.AppendVarint(dst, r.settled)
	return binary.AppendVarint(dst, r.credited)
}

func decodeReservation(b []byte) (reservation, error) {
	d := decoder{b: b}
	v := d.byte()
	if d.err == nil && v != reservationVersion && v != reservationReturns {
		return reservation{}, fmt.Errorf("reservation record version %d", v)
	}
	r := reservation{estimate: d.varint(), window: d.varint(), settled: d.varint(), credited: d.varint(), returns: v == reservationReturns}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err == nil && (r.estimate <= 0 || r.settled < -1) {
		d.err = fmt.Errorf("estimate %d, settled %d", r.estimate, r.settled)
	}
	return r, d.err
}

// reservationKey is the record's storage key for the state key stateKey.
func reservationKey(dst, stateKey, id []byte) []byte {
	dst = append(dst[:0], reservationKeyPrefix)
	dst = binary.AppendUvarint(dst, uint64(len(stateKey)))
	dst = append(dst, stateKey...)
	return append(dst, id...)
}

// peek is the key's decision at now (cost 0), in reused memory.
func (c *costApplier) peek(s *algo.Spec, state []byte, now, _ int64) (algo.Decision, []byte, error) {
	d, next, err := algo.Decide(c.peekBuf[:0], s, state, now, 0)
	if cap(next) > cap(c.peekBuf) {
		c.peekBuf = next[:0]
	}
	return d, nil, err
}

// debt is algo.Debt, skipped where there can be none: a key with units
// remaining owes nothing.
func (c *costApplier) debt(s *algo.Spec, state []byte, now int64) (int64, error) {
	if d, _, err := c.peek(s, state, now, 0); err != nil || d.Remaining > 0 {
		return 0, err
	}
	return algo.Debt(s, state, now)
}

// costApplier is the apply path's memory for costs.
type costApplier struct {
	stateKey, resKey, idBuf, rec, peekBuf []byte
	spent                                 spentRef
	counters                              costCounters
	// returns are the records the running sweep removed open under
	// reservation_expiry "return", credited once it is done (expire).
	returns []sweptReservation
}

type sweptReservation struct {
	stateKey []byte
	r        reservation
}

// applyCostOp applies an op whose one check carries costs fields.
func (a *applier) applyCostOp(tx *persist.Tx, op *opRef, checks []checkRef, decs []Decision, now int64) (Result, error) {
	ck := &checks[0]
	f := ck.costs.flags
	switch {
	case f&(costSettle|costRefund) == costSettle|costRefund, f&(costSettle|costRefund) != 0 && f&(costReserve|costOverdraft) != 0:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: costField(f), Message: "a settle or refund is a request of its own"}}, nil
	}
	if f&costRefund != 0 {
		a.lims = a.lims[:0]
		return a.refund(tx, ck, decs, now)
	}
	a.lims = append(a.lims[:0], limit{})
	lim := &a.lims[0]
	if e := a.resolve(ck, lim); e != nil {
		return Result{Err: e}, nil
	}
	if !lim.spec.Algorithm.CanOverdraw() {
		field := "limit"
		if lim.policy {
			field = "policy"
		}
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(
			"%s cannot be reserved, settled, refunded or overdrawn exactly (fixed_window, sliding_window, token_bucket and leaky_bucket can)", lim.spec.Algorithm)}}, nil
	}
	switch {
	case f&costSettle != 0:
		return a.settle(tx, ck, lim, decs, now)
	case f&costCredit != 0:
		if f != costCredit {
			return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: "a credit is a request of its own"}}, nil
		}
		return a.credit(tx, ck, lim, decs, now)
	}
	reserve := f&costReserve != 0
	if reserve {
		switch {
		case ck.costs.hold <= 0 || ck.costs.hold > int64(MaxReserveHold):
			return Result{Err: &Error{Code: CodeInvalidArgument, Field: "reserve.hold", Message: fmt.Sprintf("must be within (0, %s]", MaxReserveHold)}}, nil
		case ck.cost <= 0:
			return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: "a reservation spends its estimated cost now: must be at least 1"}}, nil
		case lim.shadow:
			return Result{Err: &Error{Code: CodeInvalidArgument, Field: "policy", Message: "a shadow policy spends nothing: there is nothing to reserve"}}, nil
		}
		// The record is a key of its own: refused before anything is spent.
		if e, err := a.refuseNewKeys(tx, 1, &a.cmd.bounds, now); e != nil || err != nil {
			return Result{Err: e}, err
		}
	}
	res, err := a.decideOp(tx, checks, a.lims, decs, now, false)
	if err != nil || res.Err != nil {
		return res, err
	}
	d := &decs[0]
	if f&costOverdraft != 0 && !d.Allowed && d.Reason != ReasonBanned && !lim.shadow && ck.cost > 0 {
		if e, err := a.overdraw(tx, ck, lim, d, now); e != nil || err != nil {
			return Result{Err: e}, err
		}
		res.Allowed = true
	}
	if reserve && d.Allowed {
		a.costs.stateKey = append(a.costs.stateKey[:0], a.storageKey(ck, lim)...)
		id := op.requestID
		if len(id) == 0 {
			b := strconv.AppendUint(a.costs.idBuf[:0], a.index, 10)
			b = append(b, '.')
			b = strconv.AppendInt(b, int64(a.slot.op), 10)
			a.costs.idBuf, id = b, b
		}
		window, err := lim.spec.WindowStart(nil, now)
		if err != nil {
			return Result{}, err
		}
		r := reservation{estimate: ck.cost, window: window, settled: -1, returns: a.returnsAtExpiry(lim)}
		a.costs.rec = r.appendTo(a.costs.rec[:0])
		a.costs.resKey = reservationKey(a.costs.resKey, a.costs.stateKey, id)
		prev, err := tx.State(a.costs.resKey)
		if err != nil {
			return Result{}, err
		}
		if err := tx.PutState(a.costs.resKey, prev, a.costs.rec, now+ck.costs.hold); err != nil {
			return Result{}, err
		}
		d.Reservation, d.ReservationHold = string(id), time.Duration(ck.costs.hold)
		a.costs.counters.reserved.Add(1)
	}
	return res, nil
}

// overdraw charges a refused overdraft check's cost anyway.
func (a *applier) overdraw(tx *persist.Tx, ck *checkRef, lim *limit, d *Decision, now int64) (*Error, error) {
	key := a.storageKey(ck, lim)
	st, err := tx.State(key)
	if err != nil {
		return nil, err
	}
	var next []byte
	var ad algo.Decision
	if lim.spec.CountRefused {
		next, ad = st.Data, d.Decision // the refusal has counted the cost already
	} else {
		if !st.Found {
			if e, err := a.refuseNewKeys(tx, 1, &a.cmd.bounds, now); e != nil || err != nil {
				return e, err
			}
			if e, err := a.refuseInlineKey(tx, key, &a.cmd.bounds, now); e != nil || err != nil {
				return e, err
			}
		}
		if next, ad, err = algo.Debit(a.decideBuf[:0], lim.spec, st.Data, now, ck.cost); err != nil {
			return decideError(err), nil
		}
		if cap(next) > cap(a.decideBuf) {
			a.decideBuf = next[:0]
		}
		t := tentative{key: key, prev: st, data: next, expiry: now + int64(ad.ResetAfter), changed: true}
		if err := writeState(tx, &t); err != nil {
			return nil, err
		}
	}
	debt, err := a.costs.debt(lim.spec, next, now)
	if err != nil {
		return decideError(err), nil
	}
	ad.Allowed = true
	*d = Decision{Decision: ad, Debt: debt}
	a.costs.counters.overdrafts.Add(1)
	a.costs.counters.debited.Add(uint64(ck.cost))
	return nil, nil
}

// settle settles the reservation ck names at ck.cost.
func (a *applier) settle(tx *persist.Tx, ck *checkRef, lim *limit, decs []Decision, now int64) (Result, error) {
	id := ck.costs.ref
	switch {
	case len(id) == 0 || len(id) > MaxReservationID:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "reservation", Message: fmt.Sprintf("must be 1 to %d bytes", MaxReservationID)}}, nil
	case ck.cost < 0:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: "the actual cost must not be negative"}}, nil
	}
	a.costs.stateKey = append(a.costs.stateKey[:0], a.storageKey(ck, lim)...)
	a.costs.resKey = reservationKey(a.costs.resKey, a.costs.stateKey, id)
	rs, err := tx.State(a.costs.resKey)
	if err != nil {
		return Result{}, err
	}
	if !rs.Found {
		return Result{Err: &Error{Code: CodeNotFound, Field: "reservation", Message: fmt.Sprintf("no reservation %q on this key under this limit (never made, or its hold ended and it was settled at its estimate)", id)}}, nil
	}
	r, err := decodeReservation(rs.Data)
	if err != nil {
		return Result{}, fmt.Errorf("reservation %q: %w: %v", id, persist.ErrCorrupt, err)
	}
	st, err := tx.State(a.costs.stateKey)
	if err != nil {
		return Result{}, err
	}
	hold := time.Duration(rs.Expiry - now)
	if rs.Expiry <= now { // decided from the entry's time, swept or not
		msg := fmt.Sprintf("reservation %q ended %s ago: it was settled at its estimate %d", id, time.Duration(now-rs.Expiry), r.estimate)
		if r.returns {
			msg = fmt.Sprintf("reservation %q ended %s ago: its estimate %d is given back by the expiry sweep (reservation_expiry \"return\")", id, time.Duration(now-rs.Expiry), r.estimate)
		}
		if r.settled >= 0 {
			msg = fmt.Sprintf("reservation %q was settled at cost %d and its hold has ended", id, r.settled)
		}
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "reservation", Message: msg}}, nil
	}
	if r.settled >= 0 {
		if r.settled != ck.cost {
			return Result{Err: &Error{Code: CodeConflict, Field: "cost", Message: fmt.Sprintf("reservation %q was settled already, at cost %d: a settle happens once", id, r.settled)}}, nil
		}
		d, _, err := a.costs.peek(lim.spec, st.Data, now, 0)
		if err != nil {
			return Result{Err: decideError(err)}, nil
		}
		d.Allowed = true
		decs[0] = Decision{Decision: d, Reservation: string(id), ReservationHold: hold, Credited: r.credited}
		return Result{Allowed: true, Replayed: true, Decisions: decs}, nil
	}
	delta := ck.cost - r.estimate
	var next []byte
	var credited int64
	changed := false
	switch {
	case delta < 0:
		credited, next, changed, err = algo.Credit(a.decideBuf[:0], lim.spec, st.Data, now, r.window, -delta)
	case delta > 0:
		next, _, err = algo.Debit(a.decideBuf[:0], lim.spec, st.Data, now, delta)
		credited, changed = -delta, true
	}
	if err != nil {
		return Result{Err: decideError(err)}, nil
	}
	if cap(next) > cap(a.decideBuf) {
		a.decideBuf = next[:0]
	}
	if !changed {
		next = st.Data
	}
	d, _, err := a.costs.peek(lim.spec, next, now, 0)
	if err != nil {
		return Result{Err: decideError(err)}, nil
	}
	if changed {
		if !st.Found && next != nil {
			if e, err := a.refuseNewKeys(tx, 1, &a.cmd.bounds, now); e != nil || err != nil {
				return Result{Err: e}, err
			}
			if e, err := a.refuseInlineKey(tx, a.costs.stateKey, &a.cmd.bounds, now); e != nil || err != nil {
				return Result{Err: e}, err
			}
		}
		t := tentative{key: a.costs.stateKey, prev: st, data: next, expiry: now + int64(d.ResetAfter), changed: true}
		if err := writeState(tx, &t); err != nil {
			return Result{}, err
		}
	}
	r.settled, r.credited = ck.cost, credited // a settled record is never returned
	a.costs.rec = r.appendTo(a.costs.rec[:0])
	if err := tx.PutState(a.costs.resKey, rs, a.costs.rec, rs.Expiry); err != nil {
		return Result{}, err
	}
	debt, err := a.costs.debt(lim.spec, next, now)
	if err != nil {
		return Result{Err: decideError(err)}, nil
	}
	d.Allowed = true
	decs[0] = Decision{Decision: d, Reservation: string(id), ReservationHold: hold, Credited: credited, Debt: debt,
		Rolled: delta < 0 && credited < -delta}
	c := &a.costs.counters
	c.settled.Add(1)
	if credited > 0 {
		c.refunded.Add(uint64(credited))
	} else if credited < 0 {
		c.debited.Add(uint64(-credited))
	}
	if c := a.f.opts.OverLimit; c != nil && credited > 0 {
		// A credit can end a cached refusal early.
		c.Forget(overlimitID(lim), ck.key)
	}
	return Result{Allowed: true, Decisions: decs}, nil
}

// reservationSwept is keepExpired's branch for reservation records: one
// swept while still open ended with its hold, settled at its estimate, or,
// when it returns, queued for expire to credit once the sweep is done (the
// sweep's cursors must not see writes of other keys under them).
func (a *applier) reservationSwept(key, data []byte) int64 {
	r, err := decodeReservation(data)
	if err != nil || r.settled >= 0 {
		return 0
	}
	if !r.returns {
		a.costs.counters.expired.Add(1)
		return 0
	}
	n, w := binary.Uvarint(key[1:])
	if w <= 0 || uint64(len(key)-1-w) < n {
		return 0
	}
	a.costs.returns = append(a.costs.returns, sweptReservation{stateKey: bytes.Clone(key[1+w : 1+w+int(n)]), r: r})
	return 0
}

// returnsAtExpiry reports whether a reservation made now under lim is
// returned at its hold's end: its policy's reservation_expiry.
func (a *applier) returnsAtExpiry(lim *limit) bool {
	if !lim.policy {
		return false
	}
	p, ok := a.lookupPolicy(lim.ident)
	return ok && p.Options.ReservationExpiry == nodeapi.ExpiryReturn
}

// expire is the bounded expiry sweep every entry runs (tx.ExpireWith with
// keepExpired), then the returns of the reservations it removed: each
// credited at the sweep's leader time into the window its estimate was
// spent in, in the order swept, in the transaction that removed its record.
// Under a policy since deleted nothing counts the key: nothing is credited.
func (a *applier) expire(tx *persist.Tx, now int64, max int) (int, error) {
	a.costs.returns = a.costs.returns[:0]
	n, err := tx.ExpireWith(now, max, a.keepExpired)
	if err != nil {
		return n, err
	}
	for i := range a.costs.returns {
		sw := &a.costs.returns[i]
		lim, e := a.limitOfStateKey(sw.stateKey)
		if e != nil {
			continue
		}
		a.costs.stateKey = append(a.costs.stateKey[:0], sw.stateKey...)
		st, err := tx.State(a.costs.stateKey)
		if err != nil {
			return n, err
		}
		credited, _, _, e, err := a.creditKey(tx, &lim, st, now, sw.r.window, sw.r.estimate)
		if err != nil {
			return n, err
		}
		if e != nil {
			continue
		}
		a.costs.counters.returned.Add(1)
		a.costs.counters.returnedUnits.Add(uint64(credited))
	}
	a.costs.returns = a.costs.returns[:0]
	return n, nil
}

func overlimitID(lim *limit) overlimit.LimitID {
	return overlimit.LimitID{Policy: lim.policy, Ident: lim.name}
}

// Refunds. A request id's record (requestid.go) of a single check that
// spent units under a limit that can be credited exactly also keeps what it
// spent, flagged fpFlagSpent:
//
//	… hashes ‖ bytes(state key) ‖ varint(cost) ‖ varint(window) ‖ varint(refunded) ‖ results
//
// so a refund names only the request id, and gives back at most what that
// request spent and has not been refunded, in the window it was spent in
// (algo.Credit): after the window rolled it credits nothing and says so
// (Rolled). The record lives as long as the request id (its retention).
const fpFlagSpent byte = 2

type spentRef struct {
	stateKey               []byte
	cost, window, refunded int64
}

// spent reports whether an op's record keeps what it spent (into
// a.costs.spent), after its result res was decided at now.
func (a *applier) spent(checks []checkRef, res *Result, now int64) bool {
	if len(checks) != 1 || !res.Allowed || res.Err != nil || len(res.Decisions) != 1 || len(a.lims) != 1 {
		return false
	}
	ck, d := &checks[0], &res.Decisions[0]
	// A reserve's estimate comes back through its settle or its return at
	// expiry, never a refund too: else it could be given back twice.
	if ck.cost <= 0 || ck.costs.flags&(costSettle|costRefund|costReserve) != 0 || ck.kind != limitPolicy && ck.kind != limitSpec ||
		d.ShadowRefused || d.Slot != "" || d.Reason != nodeapi.ReasonNone || !a.lims[0].spec.Algorithm.CanOverdraw() {
		return false
	}
	window, err := a.lims[0].spec.WindowStart(nil, now)
	if err != nil {
		return false
	}
	a.costs.spent = spentRef{stateKey: append(a.costs.spent.stateKey[:0], a.storageKey(ck, &a.lims[0])...), cost: ck.cost, window: window}
	return true
}

// appendSpentRecord is appendRequestRecord with what the request spent.
func appendSpentRecord(dst []byte, fp fingerprint, r *Result, sp *spentRef) []byte {
	flags := fpFlagSpent
	if fp.all {
		flags |= fpFlagAll
	}
	dst = append(dst, requestRecordVersion, flags)
	dst = binary.AppendUvarint(dst, fp.checks)
	dst = binary.BigEndian.AppendUint64(dst, fp.keys)
	dst = binary.BigEndian.AppendUint64(dst, fp.limits)
	dst = binary.BigEndian.AppendUint64(dst, fp.costs)
	dst = appendString(dst, string(sp.stateKey))
	dst = binary.AppendVarint(dst, sp.cost)
	dst = binary.AppendVarint(dst, sp.window)
	dst = binary.AppendVarint(dst, sp.refunded)
	dst = append(dst, resultsVersion, 1)
	return appendResult(dst, r)
}

// decodeSpent reads the spent fields at the start of b and their length.
func decodeSpent(b []byte) (spentRef, int, error) {
	d := decoder{b: b}
	sp := spentRef{stateKey: d.bytes(), cost: d.varint(), window: d.varint(), refunded: d.varint()}
	if d.err == nil && (len(sp.stateKey) == 0 || sp.cost <= 0 || sp.refunded < 0 || sp.refunded > sp.cost) {
		d.err = fmt.Errorf("spent: cost %d, refunded %d", sp.cost, sp.refunded)
	}
	return sp, d.off, d.err
}

// spentOf reads a request record's spent fields, if it has them, and the
// offset where they start.
func spentOf(b []byte) (sp spentRef, at int, ok bool, err error) {
	if len(b) < 2 || b[0] != requestRecordVersion || b[1]&fpFlagSpent == 0 {
		return sp, 0, false, nil
	}
	_, w := binary.Uvarint(b[2:])
	if w <= 0 || len(b) < 2+w+24 {
		return sp, 0, false, fmt.Errorf("request record: short fingerprint")
	}
	at = 2 + w + 24
	sp, _, err = decodeSpent(b[at:])
	return sp, at, err == nil, err
}

// refund credits up to ck.cost units of what the request ck.costs.ref spent.
func (a *applier) refund(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	id := ck.costs.ref
	switch {
	case len(id) == 0 || len(id) > MaxRequestIDBytes:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "request_id", Message: fmt.Sprintf("must be 1 to %d bytes", MaxRequestIDBytes)}}, nil
	case ck.cost <= 0:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: "a refund gives back at least 1 unit"}}, nil
	}
	req, err := tx.Request(id)
	if err != nil {
		return Result{}, err
	}
	if !req.Found || req.Expiry <= now {
		return Result{Err: &Error{Code: CodeNotFound, Field: "request_id", Message: fmt.Sprintf("no request %q within the request-id retention", id)}}, nil
	}
	sp, at, ok, err := spentOf(req.Result)
	if err != nil {
		return Result{}, fmt.Errorf("request %q: %w: %v", id, persist.ErrCorrupt, err)
	}
	if !ok {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "request_id", Message: fmt.Sprintf("request %q spent nothing that can be refunded (refused, a peek, a group of checks, a slot, a reserve — settle it instead —, or under a limit that cannot be credited exactly)", id)}}, nil
	}
	if left := sp.cost - sp.refunded; ck.cost > left {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: fmt.Sprintf("request %q spent %d and has %d refunded already: at most %d can be given back", id, sp.cost, sp.refunded, left)}}, nil
	}
	lim, e := a.limitOfStateKey(sp.stateKey)
	if e != nil {
		return Result{Err: e}, nil
	}
	a.costs.stateKey = append(a.costs.stateKey[:0], sp.stateKey...)
	st, err := tx.State(a.costs.stateKey)
	if err != nil {
		return Result{}, err
	}
	credited, d, changed, e, err := a.creditKey(tx, &lim, st, now, sp.window, ck.cost)
	if e != nil || err != nil {
		return Result{Err: e}, err
	}
	if changed {
		// The record, with what is now refunded, under the same expiry.
		sp.refunded += credited
		rec := append(a.costs.rec[:0], req.Result[:at]...)
		_, n, _ := decodeSpent(req.Result[at:])
		rec = appendString(rec, string(sp.stateKey))
		rec = binary.AppendVarint(rec, sp.cost)
		rec = binary.AppendVarint(rec, sp.window)
		rec = binary.AppendVarint(rec, sp.refunded)
		rec = append(rec, req.Result[at+n:]...)
		a.costs.rec = rec
		if err := tx.PutRequest(id, req, rec, req.Expiry); err != nil {
			return Result{}, err
		}
	}
	d.Allowed = true
	decs[0] = Decision{Decision: d, Credited: credited, Rolled: credited < ck.cost}
	a.costs.counters.refunds.Add(1)
	a.costs.counters.refunded.Add(uint64(credited))
	return Result{Allowed: true, Decisions: decs}, nil
}

// limitOfStateKey resolves the limit a state key ('p' or 's' ‖
// uvarint(len) ‖ ident ‖ key) is stored under.
func (a *applier) limitOfStateKey(k []byte) (limit, *Error) {
	if len(k) < 2 || k[0] != 'p' && k[0] != 's' {
		return limit{}, &Error{Code: CodeInvalidArgument, Field: "request_id", Message: "the request was decided under a limit refunds do not cover"}
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)-1-w) < n {
		return limit{}, &Error{Code: CodeInternal, Field: "state", Message: "a refund's state key does not parse"}
	}
	ident := k[1+w : 1+w+int(n)]
	ck := checkRef{key: k[1+w+int(n):]}
	if k[0] == 'p' {
		ck.kind, ck.policy = limitPolicy, ident
	} else {
		ck.kind, ck.spec = limitSpec, ident
	}
	var lim limit
	if e := a.resolve(&ck, &lim); e != nil {
		return limit{}, e
	}
	return lim, nil
}

func stateKeyUserKey(k []byte) []byte {
	n, w := binary.Uvarint(k[1:])
	return k[1+w+int(n):]
}

// credit gives back up to ck.cost units to the key's current window (at
// most to fresh): Envoy's negative hits, which refill a counter by what a
// request turned out not to need. It is bounded by the state, not by a
// request: RLS carries no request id to bind it to.
func (a *applier) credit(tx *persist.Tx, ck *checkRef, lim *limit, decs []Decision, now int64) (Result, error) {
	if ck.cost <= 0 || ck.cost > algo.MaxLimit {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: fmt.Sprintf("a credit gives back 1 to %d units", algo.MaxLimit)}}, nil
	}
	a.costs.stateKey = append(a.costs.stateKey[:0], a.storageKey(ck, lim)...)
	st, err := tx.State(a.costs.stateKey)
	if err != nil {
		return Result{}, err
	}
	window, err := lim.spec.WindowStart(st.Data, now)
	if err != nil {
		return Result{Err: decideError(err)}, nil
	}
	credited, d, _, e, err := a.creditKey(tx, lim, st, now, window, ck.cost)
	if e != nil || err != nil {
		return Result{Err: e}, err
	}
	d.Allowed = true
	decs[0] = Decision{Decision: d, Credited: credited}
	a.costs.counters.refunded.Add(uint64(credited))
	return Result{Allowed: true, Decisions: decs}, nil
}

// creditKey is the one credit path of refunds, credits and reservations
// returned at expiry: it gives back up to units to the state st stored at
// a.costs.stateKey, only into window (algo.Credit: nothing once the window
// rolled), writes the state when it changed and drops the over-limit
// cache's refusal of the key (a credit can end it early). d is the key's
// decision after the credit.
func (a *applier) creditKey(tx *persist.Tx, lim *limit, st persist.State, now, window, units int64) (credited int64, d algo.Decision, changed bool, e *Error, err error) {
	credited, next, changed, err := algo.Credit(a.decideBuf[:0], lim.spec, st.Data, now, window, units)
	if err != nil {
		return 0, d, false, decideError(err), nil
	}
	if cap(next) > cap(a.decideBuf) {
		a.decideBuf = next[:0]
	}
	if !changed {
		next = st.Data
	}
	if d, _, err = a.costs.peek(lim.spec, next, now, 0); err != nil {
		return 0, d, false, decideError(err), nil
	}
	if !changed {
		return credited, d, false, nil, nil
	}
	t := tentative{key: a.costs.stateKey, prev: st, data: next, expiry: now + int64(d.ResetAfter), changed: true}
	if err := writeState(tx, &t); err != nil {
		return 0, d, false, nil, err
	}
	if c := a.f.opts.OverLimit; c != nil {
		c.Forget(overlimitID(lim), stateKeyUserKey(a.costs.stateKey))
	}
	return credited, d, true, nil, nil
}
