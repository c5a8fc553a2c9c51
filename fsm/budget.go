package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// CodeKeyBudgetExhausted is nodeapi's: a new key or request id past the
// bounds below.
const CodeKeyBudgetExhausted = nodeapi.CodeKeyBudgetExhausted

// Bounds are the leader's limits on the state a CmdCheck entry may create,
// stamped in the entry like its time, so that every replica refuses the same
// ops at the same log position whatever its own configuration or disk says.
// The zero Bounds bounds nothing (and is what an entry written before bounds
// existed decodes to).
//
// The invariant they keep: the number of live key states (persist's
// Meta.Keys, maintained exactly by every put, delete and expiry and stored in
// the meta record, so it survives restarts, snapshots and restores) exceeds
// MaxKeys only by keys created before the bound was lowered, and no key is
// created by an entry stamped NoNewKeys; likewise for request-id records and
// MaxRequestIDs.
type Bounds struct {
	// MaxKeys: a check that would create a key while the live keys number
	// MaxKeys (or an op whose new keys would pass it) is refused. 0: none.
	MaxKeys int64
	// MaxRequestIDs: an op with a request_id the table does not hold is
	// refused while the live records number MaxRequestIDs. A replay of a
	// recorded id is still answered. 0: none.
	MaxRequestIDs int64
	// NoNewKeys: the leader's data directory is short of free space. No
	// check creates a key; decisions on existing keys go on. Request ids
	// are still recorded (within MaxRequestIDs): they expire after the
	// retention, so their table does not grow at a steady rate, and
	// refusing them would refuse every client that always sends one.
	NoNewKeys bool
}

const (
	boundsNoNewKeys     byte = 1
	boundsMaxKeys       byte = 2
	boundsMaxRequestIDs byte = 4
)

// EncodeCheckBounded is EncodeCheck with the leader's bounds after the ops:
// flags ‖ [uvarint max keys] ‖ [uvarint max request ids]. Zero bounds add
// nothing, so such an entry is byte for byte what EncodeCheck wrote before
// bounds existed (and a binary from before them can still apply it; one
// that meets bounds stops, so upgrade followers before the leader).
func EncodeCheckBounded(dst []byte, now, retention int64, b Bounds, ops []Op) []byte {
	dst = EncodeCheck(dst, now, retention, ops)
	if b == (Bounds{}) {
		return dst
	}
	return appendBounds(dst, b)
}

// appendBounds writes b (not zero) as flags ‖ [uvarint] ‖ [uvarint].
func appendBounds(dst []byte, b Bounds) []byte {
	var flags byte
	if b.NoNewKeys {
		flags |= boundsNoNewKeys
	}
	if b.MaxKeys > 0 {
		flags |= boundsMaxKeys
	}
	if b.MaxRequestIDs > 0 {
		flags |= boundsMaxRequestIDs
	}
	dst = append(dst, flags)
	if b.MaxKeys > 0 {
		dst = binary.AppendUvarint(dst, uint64(b.MaxKeys))
	}
	if b.MaxRequestIDs > 0 {
		dst = binary.AppendUvarint(dst, uint64(b.MaxRequestIDs))
	}
	return dst
}

// bounds reads what EncodeCheckBounded appended, if anything remains.
func (d *decoder) bounds() Bounds {
	if d.err != nil || d.off == len(d.b) {
		return Bounds{}
	}
	flags := d.byte()
	if flags == 0 || flags&^(boundsNoNewKeys|boundsMaxKeys|boundsMaxRequestIDs) != 0 {
		d.fail(fmt.Errorf("unknown bounds flags %#x", flags))
		return Bounds{}
	}
	b := Bounds{NoNewKeys: flags&boundsNoNewKeys != 0}
	if flags&boundsMaxKeys != 0 {
		b.MaxKeys = clampCount(d.uvarint())
	}
	if flags&boundsMaxRequestIDs != 0 {
		b.MaxRequestIDs = clampCount(d.uvarint())
	}
	return b
}

func clampCount(v uint64) int64 {
	if v > 1<<62 {
		return 1 << 62
	}
	return int64(v)
}

// budgetCounters count the ops refused by bounds, on every replica alike
// (they are decided in apply): BudgetRefusals.
type budgetCounters struct {
	keys, noSpace, requestIDs atomic.Uint64
}

// BudgetRefusals are the ops this replica's state machine refused for the
// key budget, for the free-disk guard and for the request-id budget, since
// it was opened.
func (f *FSM) BudgetRefusals() (keys, noSpace, requestIDs uint64) {
	c := &f.ap.budget
	return c.keys.Load(), c.noSpace.Load(), c.requestIDs.Load()
}

// refuseNewKeys says whether an op that would create n keys must be refused
// under b, and with which error. Called before anything of the op is
// written: a refused op consumes nothing.
func (a *applier) refuseNewKeys(live uint64, n int, b *Bounds) *Error {
	switch {
	case n == 0:
		return nil
	case b.NoNewKeys:
		a.budget.noSpace.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: "the cluster is short of disk space and creates no new keys; existing keys are still decided"}
	case b.MaxKeys > 0 && live+uint64(n) > uint64(b.MaxKeys):
		a.budget.keys.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: fmt.Sprintf("the cluster holds its maximum of %d keys and creates no new ones until keys expire; existing keys are still decided", b.MaxKeys)}
	}
	return nil
}

// refuseNewRequestID is refuseNewKeys for an op recording a new request id
// while live records are stored.
func (a *applier) refuseNewRequestID(live uint64, b *Bounds) *Error {
	if b.MaxRequestIDs > 0 && live >= uint64(b.MaxRequestIDs) {
		a.budget.requestIDs.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "request_id", Message: fmt.Sprintf("the cluster remembers its maximum of %d request ids; retry later, or without a request_id", b.MaxRequestIDs)}
	}
	return nil
}

// policyOfKey is persist's KeyGroup: the policy name of a policy key's
// storage key ('p' ‖ uvarint(len) ‖ name ‖ key), nil for inline limits and
// lease records, whose keys the policy budgets do not count.
func policyOfKey(key []byte) []byte {
	if len(key) < 2 || key[0] != 'p' {
		return nil
	}
	n, w := binary.Uvarint(key[1:])
	if w <= 0 || uint64(len(key)-1-w) < n {
		return nil
	}
	return key[1+w : 1+w+int(n)]
}

// refusePolicyKeys refuses an op whose new keys would take a policy past its
// MaxKeys: the live keys of each policy (persist's count of its group,
// exact like Meta.Keys) plus the op's new keys under it. a.tent[k] is the
// state of the k-th distinct key of the op, in the order of its checks.
func (a *applier) refusePolicyKeys(tx *persist.Tx, checks []checkRef, lims []limit) *Error {
	for j := range lims {
		lim := &lims[j]
		if !lim.policy || lim.maxKeys <= 0 {
			continue
		}
		var n int64
		for k := range a.tent {
			t := &a.tent[k]
			if t.changed && !t.prev.Found && t.data != nil && bytes.Equal(policyOfKey(t.key), lim.ident) {
				n++
			}
		}
		if n > 0 && tx.GroupKeys(lim.ident)+n > lim.maxKeys {
			a.budget.keys.Add(1)
			return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: fmt.Sprintf("policy %q holds its maximum of %d keys (max_keys) and creates no new ones until keys expire; existing keys are still decided", lim.name, lim.maxKeys)}
		}
	}
	return nil
}
