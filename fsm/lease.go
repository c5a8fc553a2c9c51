package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
)

// Quota leases (algo/lease.go says what is leased and why it is exact).
//
// A grant consumes the leased units in the key's state, in the log, so a
// crash of any node keeps them counted. Every key with leases also has a
// lease record, stored in the state bucket under 'L' ‖ the key's storage key
// (so it is in snapshots and digests and expires through the same sweep):
// the leases outstanding on the key, each with its holder, the holder's id
// for it, the units, the window they are counted in and their expiry. The
// record makes the rest exact:
//
//   - A return credits only a lease that is in the record, at most its
//     units, once (the entry is removed): a repeated or forged return credits
//     nothing, nor does one later than LeaseReturnGrace after the lease's
//     expiry.
//   - A lease stays in the record for LeaseReturnGrace after its expiry, so
//     that a return its holder could not get applied in time (a leader died:
//     returns fail until a new one is elected) is still credited: once, at
//     most its units, in its window only (algo.ReturnLease). That is exact
//     because a holder stops spending a lease before its expiry
//     (service/lease.go), so what it reports unspent afterwards is final.
//     During the grace the lease is expired everywhere else: it is not
//     outstanding for MaxLeasesPerKey, LeasedElsewhere, retry_after, a
//     strict recall or a key reset.
//   - A repeated grant request (the same holder and id, say a retry after an
//     outcome_unknown) answers the recorded grant again and consumes nothing;
//     for a lease past its expiry, with Valid 0 (nothing to spend; its
//     holder gives the units back, credited within the grace). A fresh grant
//     under that id would make the id name two leases, or drop the expired
//     one's units beyond any return.
//   - A key reset keeps the units of leases outstanding in the current window
//     counted (algo.HoldLeased): a holder that has not heard of the reset
//     (partitioned) may still spend them, and the renewed budget must not
//     be handed out on top of them. Returns then credit them as usual. The
//     reset drops the leases in their grace: their units were forgiven with
//     the rest, so a late return must not take them off the renewed budget.
//
// Grants are refused (nothing consumed) beyond MaxLeasesPerKey outstanding
// leases on a key; a lease in its grace leaves the record once its window is
// over (graceUseless), and a record keeps at most maxLeaseRecord leases
// (those in their grace beyond it are dropped, the first to expire first),
// so a record stays small.

// Command types for leases (see the list in types.go; never renumber).
const (
	CmdGrantLease  byte = 10 // leader time, holder, []LeaseRequest → []LeaseGrant
	CmdReturnLease byte = 11 // leader time, holder, []LeaseReturn → []int64 (units credited)
)

// The lease contract (nodeapi's), aliased so that the state machine's code
// reads as before.
type (
	LeaseRequest = nodeapi.LeaseRequest
	LeaseGrant   = nodeapi.LeaseGrant
	LeaseReturn  = nodeapi.LeaseReturn
	LeaseHook    = nodeapi.LeaseHook
)

// Bounds on lease commands (nodeapi's) and records.
const (
	MaxLeasesPerKey  = nodeapi.MaxLeasesPerKey
	MaxLeaseOps      = nodeapi.MaxLeaseOps
	LeaseReturnGrace = nodeapi.LeaseReturnGrace
	// maxHolder bounds a holder's name (a node id).
	maxHolder = maxNodeField
	// maxLeaseRecord bounds the leases a record keeps, outstanding and in
	// their grace (LeaseReturnGrace): a key whose leases are spent to the
	// last unit (never returned) at a high rate, under a token bucket or a
	// long window (graceUseless prunes short ones), would otherwise gather
	// grace entries, and every grant rewrites the record.
	maxLeaseRecord = 2 * MaxLeasesPerKey
)

// lease record version.
const leaseRecordVersion byte = 1

// EncodeGrantLease appends a CmdGrantLease entry stamped with the leader's
// time now, for holder.
func EncodeGrantLease(dst []byte, now int64, holder string, reqs []LeaseRequest) []byte {
	dst = append(dst, CmdGrantLease, cmdVersion)
	dst = binary.AppendVarint(dst, now)
	dst = appendString(dst, holder)
	dst = binary.AppendUvarint(dst, uint64(len(reqs)))
	for i := range reqs {
		c := reqs[i].Check
		c.Cost = 0
		dst = binary.AppendUvarint(dst, reqs[i].ID)
		dst = appendCheck(dst, &c)
	}
	return dst
}

// EncodeReturnLease appends a CmdReturnLease entry.
func EncodeReturnLease(dst []byte, now int64, holder string, rets []LeaseReturn) []byte {
	dst = append(dst, CmdReturnLease, cmdVersion)
	dst = binary.AppendVarint(dst, now)
	dst = appendString(dst, holder)
	dst = binary.AppendUvarint(dst, uint64(len(rets)))
	for i := range rets {
		c := rets[i].Check
		c.Cost = rets[i].Unspent
		dst = binary.AppendUvarint(dst, rets[i].ID)
		dst = appendCheck(dst, &c) // the cost carries the unspent units
	}
	return dst
}

// leaseRef is one request of a lease command; for a return, check.cost is
// the unspent units.
type leaseRef struct {
	id    uint64
	check checkRef
}

func decodeLeases(c *command, d *decoder) {
	c.now = d.varint()
	c.holder = d.bytes()
	n := d.count(1 + minCheck)
	if d.err == nil && n > MaxLeaseOps {
		d.fail(fmt.Errorf("%d lease requests (bound %d)", n, MaxLeaseOps))
	}
	c.leases = c.leases[:0]
	for i := 0; i < n && d.err == nil; i++ {
		id := d.uvarint()
		c.leases = append(c.leases, leaseRef{id: id, check: d.check()})
	}
	// A grant entry carries the leader's bounds after its requests, as a
	// check entry does (StampLeaseCommandBounded): a grant creates the
	// key's state when the key has none, so it is bounded like a check.
	c.bounds = Bounds{}
	if c.typ == CmdGrantLease {
		c.bounds = d.bounds()
	}
}

// badHolder reports a holder no node can have: its requests are answered
// with an error (grants) or nothing (returns) on every replica alike.
func badHolder(h []byte) bool { return len(h) == 0 || len(h) > maxHolder }

func init() {
	registerCommand(CmdGrantLease, commandType{
		// Not proposable by clients (no validate): the entry carries the
		// leader's time, so only a leader builds it (cluster/lease.go).
		name:   "grant lease",
		decode: decodeLeases,
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			return a.grantLeases(tx, c)
		},
	})
	registerCommand(CmdReturnLease, commandType{
		name:   "return lease",
		decode: decodeLeases,
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			return a.returnLeases(tx, c)
		},
	})
}

// leasedRefusal is decideOp's hook for a refused check (cost > 0) under a
// policy: when the policy has a lease option and leases on the key are
// outstanding, the refusal may be false for now (their holders may give
// units back), so dec says so (LeasedElsewhere) and its RetryAfter is at
// most the time until the first of them expires: by then its holder has
// given back what it did not spend (holders return before the expiry,
// service/lease.go) or lost it. Under a strict lease option the holders are
// also told to give their leases back (LeaseHook.Recall).
func (a *applier) leasedRefusal(tx *persist.Tx, ck *checkRef, lim *limit, key []byte, now int64, dec *Decision) error {
	p, ok := a.lookupPolicy(lim.ident)
	if !ok || !p.Lease.Enabled() || dec.RetryAfter == algo.Never {
		return nil // Never: no amount given back lets the cost pass
	}
	if _, err := a.readLeases(tx, a.leaseKey(key), &p.Spec, now); err != nil || a.liveLeases(now) == 0 {
		return err
	}
	dec.LeasedElsewhere = true
	dec.RetryAfter = min(dec.RetryAfter, time.Duration(max(a.firstLeaseExpiry(now)-now, 1)))
	if h := a.f.opts.Leases; h != nil && p.Lease.Strict() {
		h.Recall(p.Name, string(ck.key))
	}
	return nil
}

// liveLeases counts the leases in a.leaseEntries outstanding at now (not
// past their expiry: those in their grace are over but for a return).
func (a *applier) liveLeases(now int64) int {
	n := 0
	for _, e := range a.leaseEntries {
		if e.expiry > now {
			n++
		}
	}
	return n
}

// firstLeaseExpiry is the earliest expiry of the leases in a.leaseEntries
// outstanding at now (there must be one: liveLeases > 0).
func (a *applier) firstLeaseExpiry(now int64) int64 {
	first := int64(math.MaxInt64)
	for _, e := range a.leaseEntries {
		if e.expiry > now {
			first = min(first, e.expiry)
		}
	}
	return first
}

// leaseEntry is one lease in a record: outstanding until its expiry, then
// kept for LeaseReturnGrace for a late return only.
type leaseEntry struct {
	holder []byte // aliases the record or the entry
	id     uint64
	units  int64
	window int64
	expiry int64
}

// A lease record is a key's outstanding leases. Encoding, version 1:
//
//	[1] uvarint(n) n × (holder string, uvarint(id), uvarint(units), varint(window), varint(expiry))

func decodeLeaseRecord(b []byte, into []leaseEntry) ([]leaseEntry, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != leaseRecordVersion {
		return nil, fmt.Errorf("lease record version %d", v)
	}
	n := d.count(5)
	into = into[:0]
	for i := 0; i < n && d.err == nil; i++ {
		e := leaseEntry{holder: d.bytes(), id: d.uvarint()}
		e.units = int64(d.uvarint())
		e.window = d.varint()
		e.expiry = d.varint()
		into = append(into, e)
	}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	return into, nil
}

func appendLeaseRecord(dst []byte, es []leaseEntry) []byte {
	dst = append(dst, leaseRecordVersion)
	dst = binary.AppendUvarint(dst, uint64(len(es)))
	for _, e := range es {
		dst = appendString(dst, string(e.holder))
		dst = binary.AppendUvarint(dst, e.id)
		dst = binary.AppendUvarint(dst, uint64(e.units))
		dst = binary.AppendVarint(dst, e.window)
		dst = binary.AppendVarint(dst, e.expiry)
	}
	return dst
}

// leaseKey is 'L' ‖ the state's storage key, in a.leaseKeyBuf.
func (a *applier) leaseKey(stateKey []byte) []byte {
	a.leaseKeyBuf = append(append(a.leaseKeyBuf[:0], 'L'), stateKey...)
	return a.leaseKeyBuf
}

// readLeases reads a key's lease record into a.leaseEntries, pruning the
// leases whose grace is over (expiry + LeaseReturnGrace ≤ now) and those
// past their expiry that no return could credit any more under spec (the
// key's policy now: graceUseless); the others past their expiry are kept
// (see liveLeases). The entries alias the transaction's memory until the
// next write of the record.
func (a *applier) readLeases(tx *persist.Tx, lkey []byte, spec *algo.Spec, now int64) (persist.State, error) {
	st, err := tx.State(lkey)
	if err != nil {
		return st, err
	}
	a.leaseEntries = a.leaseEntries[:0]
	if !st.Found {
		return st, nil
	}
	es, err := decodeLeaseRecord(st.Data, a.leaseEntries)
	if err != nil {
		return st, fmt.Errorf("lease record %q: %w: %v", lkey, persist.ErrCorrupt, err)
	}
	kept := es[:0]
	graceFrom := now - int64(LeaseReturnGrace) // now ≥ 0 (clamped): no overflow
	for _, e := range es {
		if e.expiry > graceFrom && !graceUseless(spec, &e, now) {
			kept = append(kept, e)
		}
	}
	a.leaseEntries = kept
	return st, nil
}

// graceUseless reports a lease past its expiry whose window (of a fixed
// window of fixed length, or a sliding window) is over at now: algo.ReturnLease
// credits a return only in the lease's window, so keeping it would only
// grow the record. A key with short windows whose leases are spent to the
// last unit (never returned) would otherwise keep a grant rate × the grace
// of them. Calendar windows (a day at least) and token buckets keep theirs
// for the whole grace.
func graceUseless(spec *algo.Spec, e *leaseEntry, now int64) bool {
	if e.expiry > now || spec.Calendar != algo.CalendarNone || spec.Window <= 0 {
		return false
	}
	switch spec.Algorithm {
	case algo.FixedWindow, algo.SlidingWindow:
		// Both count in [window, window + Window): ReturnLease wants
		// window to be the key's current one, which starts after now
		// - Window.
		return e.window <= now-int64(spec.Window)
	}
	return false
}

// writeLeases stores a.leaseEntries as the record under lkey (deleting it
// when empty), to expire at the end of its last lease's grace.
func (a *applier) writeLeases(tx *persist.Tx, lkey []byte, prev persist.State) error {
	if len(a.leaseEntries) == 0 {
		return tx.DeleteState(lkey, prev)
	}
	var expiry int64
	for _, e := range a.leaseEntries {
		expiry = max(expiry, e.expiry)
	}
	b := appendLeaseRecord(a.leaseBuf[:0], a.leaseEntries)
	a.leaseBuf = b
	// The entries may alias the old value; the new one is a copy the
	// transaction owns (PutState keeps it until the commit).
	return tx.PutState(lkey, prev, append(tx.Alloc(len(b))[:0], b...), expiry+int64(LeaseReturnGrace))
}

// evictGraceLease makes room for one more lease in a full record
// (maxLeaseRecord) by dropping the lease in its grace that expired first;
// at most MaxLeasesPerKey are outstanding, so there is one.
func (a *applier) evictGraceLease(now int64) {
	if len(a.leaseEntries) < maxLeaseRecord {
		return
	}
	j := -1
	for i, e := range a.leaseEntries {
		if e.expiry <= now && (j < 0 || e.expiry < a.leaseEntries[j].expiry) {
			j = i
		}
	}
	if j >= 0 {
		a.leaseEntries = append(a.leaseEntries[:j], a.leaseEntries[j+1:]...)
	}
}

func (a *applier) findLease(holder []byte, id uint64) int {
	for i, e := range a.leaseEntries {
		if e.id == id && bytes.Equal(e.holder, holder) {
			return i
		}
	}
	return -1
}

// resolveLease resolves a lease command's limit: a policy, for a grant one
// with a lease option.
func (a *applier) resolveLease(ck *checkRef, lim *limit, grant bool) (*Policy, *Error) {
	if ck.kind != limitPolicy {
		return nil, &Error{Code: CodeInvalidArgument, Field: "limit", Message: "leases are only taken under a policy with a lease option"}
	}
	if e := a.resolve(ck, lim); e != nil {
		return nil, e
	}
	p, _ := a.lookupPolicy(ck.policy)
	if grant && (!p.Lease.Enabled() || p.Shadow) {
		return nil, &Error{Code: CodeInvalidArgument, Field: "policy", Message: fmt.Sprintf("policy %q has no lease option", p.Name)}
	}
	return p, nil
}

func (a *applier) grantLeases(tx *persist.Tx, c *command) ([]LeaseGrant, error) {
	now := clamp(tx, c.now)
	out := make([]LeaseGrant, len(c.leases))
	for i := range c.leases {
		g, err := a.grantLease(tx, c.holder, &c.leases[i], now, &c.bounds)
		if err != nil {
			return nil, err
		}
		out[i] = g
	}
	if _, err := a.expire(tx, now, 2*len(c.leases)+16); err != nil {
		return nil, err
	}
	return out, nil
}

func (a *applier) grantLease(tx *persist.Tx, holder []byte, lr *leaseRef, now int64, bounds *Bounds) (LeaseGrant, error) {
	g := LeaseGrant{ID: lr.id}
	if badHolder(holder) {
		g.Err = &Error{Code: CodeInvalidArgument, Field: "holder", Message: fmt.Sprintf("must be 1 to %d bytes", maxHolder)}
		return g, nil
	}
	var lim limit
	p, e := a.resolveLease(&lr.check, &lim, true)
	if e != nil {
		g.Err = e
		return g, nil
	}
	g.Limit = p.Spec.Limit
	key := a.storageKey(&lr.check, &lim)
	lkey := a.leaseKey(key)
	lprev, err := a.readLeases(tx, lkey, &p.Spec, now)
	if err != nil {
		return g, err
	}
	if i := a.findLease(holder, lr.id); i >= 0 {
		// A repeat: the same grant, nothing consumed again. Past its
		// expiry (in its grace) it is valid no more: Valid 0, and its
		// holder gives the units back (see the top of this file).
		le := a.leaseEntries[i]
		g.Units, g.Window, g.Valid = le.units, le.window, time.Duration(max(le.expiry-now, 0))
		return g, nil
	}
	if a.liveLeases(now) >= MaxLeasesPerKey {
		g.RetryAfter = time.Duration(a.firstLeaseExpiry(now) - now)
		return g, nil
	}
	st, err := tx.State(key)
	if err != nil {
		return g, err
	}
	if !st.Found {
		if e, err := a.refuseNewKeys(tx, 1, bounds, now); e != nil || err != nil {
			g.Err = e
			return g, err
		}
		if e, err := a.refusePolicyKey(tx, p.Name, lim.ident, p.MaxKeys, 1, now); e != nil || err != nil {
			g.Err = e
			return g, err
		}
	}
	ag, next, err := algo.GrantLease(a.decideBuf[:0], &p.Spec, p.Lease, st.Data, now)
	if err != nil {
		g.Err = decideError(err)
		return g, nil
	}
	if cap(next) > cap(a.decideBuf) {
		a.decideBuf = next[:0]
	}
	g.Remaining, g.RetryAfter = ag.Remaining, ag.RetryAfter
	if ag.Units == 0 {
		if a.liveLeases(now) > 0 && g.RetryAfter != algo.Never {
			// Everything left is leased: a unit may be free again when
			// the first lease ends (given back, see leasedRefusal).
			g.RetryAfter = min(g.RetryAfter, time.Duration(max(a.firstLeaseExpiry(now)-now, 1)))
		}
		return g, nil
	}
	g.Units, g.Window, g.Valid = ag.Units, ag.Window, ag.Valid
	g.ResetAt = now + int64(ag.ResetAfter)
	t := tentative{key: key, prev: st, data: next, expiry: now + int64(ag.ResetAfter), changed: true}
	if err := writeState(tx, &t); err != nil {
		return g, err
	}
	a.evictGraceLease(now)
	a.leaseEntries = append(a.leaseEntries, leaseEntry{
		holder: holder, id: lr.id, units: ag.Units, window: ag.Window, expiry: now + int64(ag.Valid),
	})
	if err := a.writeLeases(tx, a.leaseKey(key), lprev); err != nil {
		return g, err
	}
	if lim.history > 0 {
		if err := a.addUsage(tx, key, &lim, ag.Units, 0, now); err != nil { // history.go: charged at grant
			return g, err
		}
	}
	return g, a.noteGrant(tx, p.Name, now, ag.Valid) // leasefence.go
}

func (a *applier) returnLeases(tx *persist.Tx, c *command) ([]int64, error) {
	now := clamp(tx, c.now)
	out := make([]int64, len(c.leases))
	for i := range c.leases {
		n, err := a.returnLease(tx, c.holder, &c.leases[i], now)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	if _, err := a.expire(tx, now, 2*len(c.leases)+16); err != nil {
		return nil, err
	}
	return out, nil
}

func (a *applier) returnLease(tx *persist.Tx, holder []byte, lr *leaseRef, now int64) (int64, error) {
	if badHolder(holder) {
		return 0, nil
	}
	var lim limit
	p, e := a.resolveLease(&lr.check, &lim, false)
	if e != nil {
		return 0, nil // the policy is gone: its keys are left to expire
	}
	key := a.storageKey(&lr.check, &lim)
	lkey := a.leaseKey(key)
	lprev, err := a.readLeases(tx, lkey, &p.Spec, now)
	if err != nil {
		return 0, err
	}
	i := a.findLease(holder, lr.id)
	if i < 0 {
		return 0, nil // unknown, already returned, past its grace, or dropped by a reset
	}
	le := a.leaseEntries[i]
	a.leaseEntries = append(a.leaseEntries[:i], a.leaseEntries[i+1:]...)
	if err := a.writeLeases(tx, lkey, lprev); err != nil {
		return 0, err
	}
	if h := a.f.opts.Leases; h != nil {
		h.Returned(p.Name, string(lr.check.key))
	}
	unspent := min(max(lr.check.cost, 0), le.units)
	key = a.storageKey(&lr.check, &lim) // leaseKey's buffer is separate, but be explicit
	st, err := tx.State(key)
	if err != nil {
		return 0, err
	}
	credited, next, changed, err := algo.ReturnLease(a.decideBuf[:0], &p.Spec, st.Data, now, le.window, unspent)
	if err != nil || !changed {
		return 0, nil // a state algo cannot read, or nothing to credit: a no-op
	}
	if cap(next) > cap(a.decideBuf) {
		a.decideBuf = next[:0]
	}
	expiry := st.Expiry
	if next != nil {
		// Crediting never moves a state's expiry later; recompute it from
		// a peek so the sweep files the key where it now ends.
		d, _, err := algo.Decide(nil, &p.Spec, next, now, 0)
		if err != nil {
			return 0, nil
		}
		expiry = now + int64(d.ResetAfter)
	}
	t := tentative{key: key, prev: st, data: next, expiry: expiry, changed: true}
	if err := writeState(tx, &t); err != nil {
		return 0, err
	}
	if err := a.creditUsage(tx, key, &lim, credited, le.window, now); err != nil { // history.go
		return 0, err
	}
	if c := a.f.opts.OverLimit; c != nil && credited > 0 {
		// A credit can end a cached refusal early.
		c.Forget(overlimit.LimitID{Policy: true, Ident: lim.name}, lr.check.key)
	}
	return credited, nil
}

// holdLeased is the key-reset hook: after the key's state is deleted, the
// units of its leases still outstanding are counted again, and the leases in
// their grace are dropped from the record (see above).
func (a *applier) holdLeased(tx *persist.Tx, ck *checkRef, lim *limit, key []byte) error {
	if !lim.policy {
		return nil
	}
	now := tx.Meta().LastTime
	lkey := a.leaseKey(key)
	lprev, err := a.readLeases(tx, lkey, lim.spec, now)
	if err != nil || len(a.leaseEntries) == 0 {
		return err
	}
	if live := a.liveLeases(now); live < len(a.leaseEntries) {
		kept := a.leaseEntries[:0]
		for _, e := range a.leaseEntries {
			if e.expiry > now {
				kept = append(kept, e)
			}
		}
		a.leaseEntries = kept
		if err := a.writeLeases(tx, lkey, lprev); err != nil {
			return err
		}
		if live == 0 {
			return nil
		}
	}
	held := make([]algo.LeasedUnits, 0, len(a.leaseEntries))
	for _, e := range a.leaseEntries {
		held = append(held, algo.LeasedUnits{Window: e.window, Units: e.units})
	}
	next, resetAfter, err := algo.HoldLeased(nil, lim.spec, now, held)
	if err != nil || next == nil {
		return nil // nothing outstanding in the current window (or unreadable: stays reset)
	}
	key = a.storageKey(ck, lim)
	st, err := tx.State(key)
	if err != nil {
		return err
	}
	t := tentative{key: key, prev: st, data: append(tx.Alloc(len(next))[:0], next...), expiry: now + int64(resetAfter), changed: true}
	return writeState(tx, &t)
}

// LeaseCommandHolder returns the holder a grant or return command names (the
// node whose leases it takes or gives back), or ErrBadCommand.
func LeaseCommandHolder(cmd []byte) (string, error) {
	var c command
	if err := decodeCommand(&c, cmd); err != nil {
		return "", err
	}
	if c.typ != CmdGrantLease && c.typ != CmdReturnLease {
		return "", fmt.Errorf("%w: type %d is not a lease command", ErrBadCommand, c.typ)
	}
	return string(c.holder), nil
}

// StampLeaseCommand returns cmd, a CmdGrantLease or CmdReturnLease entry
// (built by a follower with any time), stamped with the leader's time now,
// after checking that it decodes completely and names a holder. A follower
// forwards its lease commands so; only the leader's clock enters the log.
func StampLeaseCommand(dst, cmd []byte, now int64) ([]byte, error) {
	return StampLeaseCommandBounded(dst, cmd, now, Bounds{})
}

// StampLeaseCommandBounded is StampLeaseCommand with the leader's bounds
// after a grant's requests (as EncodeCheckBounded writes them; zero bounds
// add nothing): a grant on a key without state creates it, and every
// replica must refuse the same grants as the same checks.
func StampLeaseCommandBounded(dst, cmd []byte, now int64, b Bounds) ([]byte, error) {
	var c command
	if err := decodeCommand(&c, cmd); err != nil {
		return nil, err
	}
	if c.typ != CmdGrantLease && c.typ != CmdReturnLease {
		return nil, fmt.Errorf("%w: type %d is not a lease command", ErrBadCommand, c.typ)
	}
	if badHolder(c.holder) {
		return nil, fmt.Errorf("%w: lease holder of %d bytes", ErrBadCommand, len(c.holder))
	}
	if c.typ == CmdGrantLease && c.bounds != (Bounds{}) {
		return nil, fmt.Errorf("%w: a lease grant carries bounds before the leader stamped it", ErrBadCommand)
	}
	_, n := binary.Varint(cmd[2:]) // decodeCommand read it
	dst = append(dst, c.typ, cmdVersion)
	dst = binary.AppendVarint(dst, now)
	dst = append(dst, cmd[2+n:]...)
	if c.typ == CmdGrantLease && b != (Bounds{}) {
		dst = appendBounds(dst, b)
	}
	return dst, nil
}
