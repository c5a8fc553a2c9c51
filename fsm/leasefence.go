package fsm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// Lease fences: a policy change that makes the limit stricter is
// acknowledged only once the leases granted under the previous versions have
// ended.
//
// A lease's units are consumed in the key's state when it is granted, so the
// state read under a new spec already counts them against the new limit. But
// a holder cut off from the cluster cannot hear of the change and goes on
// spending its lease from memory until its deadline: units allowed after the
// change, counted under the old limit. The promise "after a policy change is
// acknowledged, the units allowed in a window are at most the new limit" is
// kept by not acknowledging it before those leases are over:
//
//   - Every grant under a policy updates its fence record, in the state
//     bucket under 'F' ‖ policy name (so snapshots, digests and the expiry
//     sweep cover it): the horizon, the latest expiry (log time) of a lease
//     granted under the policy, and ttl, the longest Valid among the leases
//     granted since the record was last empty. Past its horizon no lease
//     granted under the policy is outstanding, and the record expires.
//   - A put or delete while the record is live (a lease may be outstanding)
//     is pending when it is stricter (a lower limit or burst, or another
//     algorithm, window or calendar), a delete, a create (the policy was
//     deleted meanwhile), or any put while an earlier pending change's
//     record is live (a retry of the same PUT must not be acknowledged
//     early). The entry then answers LeaseFence{Wait: ttl}, and marks the
//     record pending. With no lease outstanding nothing waits.
//   - The node that receives that answer waits Wait on its own monotonic
//     clock before acknowledging (cluster/leasefence.go). That bound needs no
//     clock agreement: every lease in question was granted (stamped) before
//     the entry was applied, its holder spends it at most Valid ≤ ttl after
//     it sent the request (service/lease.go), and the answer arrives after
//     the entry was applied.
//
// New grants after the entry are decided under the new spec (applied at
// once), so they are bounded by the new limit like any check. Time in the
// fence is the replicated LastTime, never a clock.

// LeaseFence is the answer to a CmdPutPolicy or CmdDeletePolicy entry whose
// change must not be acknowledged before Wait has passed after the answer
// (see above). A change that needs no wait answers nil as before.
type LeaseFence struct {
	Policy string
	Wait   time.Duration
}

const leaseFenceVersion byte = 1

// fenceKey is 'F' ‖ uvarint(len(name)) ‖ name, in a.leaseKeyBuf.
func (a *applier) fenceKey(name string) []byte {
	b := append(a.leaseKeyBuf[:0], 'F')
	b = binary.AppendUvarint(b, uint64(len(name)))
	a.leaseKeyBuf = append(b, name...)
	return a.leaseKeyBuf
}

type leaseFence struct {
	horizon, ttl int64
	pending      bool
}

func decodeLeaseFence(b []byte) (leaseFence, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != leaseFenceVersion {
		return leaseFence{}, fmt.Errorf("lease fence version %d", v)
	}
	f := leaseFence{horizon: d.varint(), ttl: d.varint(), pending: d.byte() == 1}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	return f, d.err
}

func appendLeaseFence(dst []byte, f leaseFence) []byte {
	dst = append(dst, leaseFenceVersion)
	dst = binary.AppendVarint(dst, f.horizon)
	dst = binary.AppendVarint(dst, f.ttl)
	if f.pending {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// stricter reports a spec change under which units counted under old may
// admit more than next allows: anything but the same limit shape with a
// limit (and burst) at least as high.
func stricter(old, next *algo.Spec) bool {
	if old.Algorithm != next.Algorithm || old.Window != next.Window || old.Calendar != next.Calendar ||
		old.Timezone != next.Timezone || old.CountRefused != next.CountRefused {
		return true
	}
	burst := func(s *algo.Spec) int64 {
		if s.Burst == 0 {
			return s.Limit
		}
		return s.Burst
	}
	return next.Limit < old.Limit || burst(next) < burst(old)
}

// readFence reads name's fence record; live reports it still bounds a lease
// at now.
func (a *applier) readFence(tx *persist.Tx, name string, now int64) (f leaseFence, st persist.State, live bool, err error) {
	key := a.fenceKey(name)
	if st, err = tx.State(key); err != nil || !st.Found {
		return f, st, false, err
	}
	if f, err = decodeLeaseFence(st.Data); err != nil {
		return f, st, false, fmt.Errorf("lease fence %q: %w: %v", key, persist.ErrCorrupt, err)
	}
	if f.horizon <= now {
		return leaseFence{}, st, false, nil
	}
	return f, st, true, nil
}

func (a *applier) writeFence(tx *persist.Tx, name string, st persist.State, f leaseFence) error {
	b := appendLeaseFence(nil, f)
	return tx.PutState(a.fenceKey(name), st, append(tx.Alloc(len(b))[:0], b...), f.horizon)
}

// noteGrant is grantLease's hook: a lease valid for valid from now was
// granted under policy.
func (a *applier) noteGrant(tx *persist.Tx, policy string, now int64, valid time.Duration) error {
	f, st, _, err := a.readFence(tx, policy, now)
	if err != nil {
		return err
	}
	if now+int64(valid) <= f.horizon && int64(valid) <= f.ttl {
		return nil // already covered: no write
	}
	f.horizon = max(f.horizon, now+int64(valid))
	f.ttl = max(f.ttl, int64(valid))
	return a.writeFence(tx, policy, st, f)
}

// fencePolicy is putPolicy's and deletePolicy's hook, after the change is
// staged: old is the policy as it was (nil when absent), next the new one
// (nil for a delete). It marks the fence record pending and returns the
// answer, when the change must wait.
func (a *applier) fencePolicy(tx *persist.Tx, name string, old, next *Policy) (interface{}, error) {
	now := tx.Meta().LastTime
	f, st, live, err := a.readFence(tx, name, now)
	if err != nil || !live {
		return nil, err // no lease granted under the policy is outstanding
	}
	if !f.pending {
		switch {
		case old == nil || next == nil:
			f.pending = true // created over live leases (deleted meanwhile), or deleted
		case stricter(&old.Spec, &next.Spec):
			f.pending = true
		default:
			return nil, nil
		}
		if err := a.writeFence(tx, name, st, f); err != nil {
			return nil, err
		}
	}
	return LeaseFence{Policy: name, Wait: time.Duration(f.ttl)}, nil
}
