package fsm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Degraded charges. A policy with the degraded option (LimitOptions tag
// 'd') lets a node that cannot reach a quorum decide alone with its share of
// the limit (service/degraded.go); once a quorum answers again the node
// proposes CmdChargeDegraded with what it admitted, and apply charges it to
// each key's state as an overdraft: the count goes up by the units even past
// the limit (algo.Adjust with a debit, which fixed and sliding windows apply
// in full), so the checks after it are refused until the window has made up
// for the overshoot. The charge lands in the window current at the entry's
// leader time; a window that ended meanwhile is not reopened to take it (a
// charge carried into a later window only makes that window stricter: it
// never over-admits).
//
// Exactly once: the entry carries a stable id (the node's, reused by every
// retry of the same charge), remembered in the state bucket under
// 'D' ‖ id for nodeapi.DegradedChargeRetention after it was applied (the
// sweep removes it then), so a retry answers Duplicate and charges nothing.

// CmdChargeDegraded charges what a node admitted alone (see the list in
// types.go; never renumber).
const CmdChargeDegraded byte = 33 // leader time, id, []DegradedCharge → error

const degradedKeyPrefix = 'D'

// DegradedCharge is nodeapi's.
type DegradedCharge = nodeapi.DegradedCharge

// EncodeChargeDegraded builds a CmdChargeDegraded entry.
func EncodeChargeDegraded(now int64, id string, charges []DegradedCharge) []byte {
	dst := binary.AppendVarint([]byte{CmdChargeDegraded, cmdVersion}, now)
	dst = appendString(dst, id)
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(charges)))
	for _, c := range charges {
		body = appendString(body, c.Policy)
		body = appendString(body, c.Key)
		body = binary.AppendUvarint(body, uint64(max(c.Units, 0)))
	}
	return appendString(dst, string(body))
}

func decodeDegradedCharges(b []byte) ([]DegradedCharge, error) {
	d := decoder{b: b}
	n := d.count(3)
	if n > nodeapi.MaxDegradedCharges {
		return nil, fmt.Errorf("%d charges, more than %d", n, nodeapi.MaxDegradedCharges)
	}
	cs := make([]DegradedCharge, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		c := DegradedCharge{Policy: string(d.bytes()), Key: string(d.bytes())}
		u := d.uvarint()
		if u == 0 || u > uint64(algo.MaxLimit) {
			return nil, fmt.Errorf("charge %d: %d units", i, u)
		}
		if c.Policy == "" || len(c.Policy) > MaxPolicyName || c.Key == "" || len(c.Key) > MaxKeyBytes {
			return nil, fmt.Errorf("charge %d: policy or key out of bounds", i)
		}
		c.Units = int64(u)
		cs = append(cs, c)
	}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	return cs, d.err
}

func init() {
	registerCommand(CmdChargeDegraded, commandType{
		name: "charge degraded",
		decode: func(c *command, d *decoder) {
			c.now = d.varint()
			c.name = string(d.bytes()) // the id
			c.domain = d.bytes()       // the charges, decoded at apply
		},
		validate: func(c *command) error {
			if c.name == "" || len(c.name) > nodeapi.MaxDegradedChargeID {
				return fmt.Errorf("%w: charge degraded: id of %d bytes", ErrBadCommand, len(c.name))
			}
			if _, err := decodeDegradedCharges(c.domain); err != nil {
				return fmt.Errorf("%w: charge degraded: %v", ErrBadCommand, err)
			}
			return nil
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			e, err := a.chargeDegraded(tx, c)
			return errResponse(e), err
		},
	})
}

// degradedCounts are the charges this replica's applies made (every replica
// applies the same), for metrics.
type degradedCounts struct {
	charged, skipped, duplicates atomic.Int64
}

var degradedApplied degradedCounts // per process: one FSM per process outside tests

// DegradedCharges is the units charged and skipped and the duplicate charge
// entries this process's applies saw (for metrics).
func (f *FSM) DegradedCharges() (charged, skipped, duplicates int64) {
	return degradedApplied.charged.Load(), degradedApplied.skipped.Load(), degradedApplied.duplicates.Load()
}

func (a *applier) chargeDegraded(tx *persist.Tx, c *command) (*Error, error) {
	now := clamp(tx, c.now)
	if c.name == "" || len(c.name) > nodeapi.MaxDegradedChargeID {
		return &Error{Code: CodeInvalidArgument, Field: "id", Message: "a charge id of 1 to 128 bytes"}, nil
	}
	charges, err := decodeDegradedCharges(c.domain)
	if err != nil {
		return &Error{Code: CodeInvalidArgument, Field: "charges", Message: err.Error()}, nil
	}
	rk := append([]byte{degradedKeyPrefix}, c.name...)
	rec, err := tx.State(rk)
	if err != nil {
		return nil, err
	}
	if rec.Found {
		degradedApplied.duplicates.Add(1)
		return nil, nil // charged before: a retry charges nothing again
	}
	var charged, skipped int64
	for i := range charges {
		ch := &charges[i]
		ck := checkRef{kind: limitPolicy, key: []byte(ch.Key), policy: []byte(ch.Policy)}
		var lim limit
		if a.resolve(&ck, &lim) != nil || !lim.spec.Algorithm.CanAdjust() {
			skipped += ch.Units // the policy is gone or changed: nothing to charge
			continue
		}
		key := a.storageKey(&ck, &lim)
		cur, err := tx.State(key)
		if err != nil {
			return nil, err
		}
		applied, next, d, err := algo.Adjust(a.decideBuf[:0], lim.spec, cur.Data, now, -ch.Units)
		if err != nil {
			skipped += ch.Units
			continue
		}
		t := tentative{key: key, prev: cur, data: next, expiry: now + int64(d.ResetAfter), changed: applied != 0}
		if err := writeState(tx, &t); err != nil {
			return nil, err
		}
		charged += -applied
		skipped += ch.Units + applied
	}
	b := binary.AppendVarint(tx.Alloc(binary.MaxVarintLen64)[:0], charged)
	if err := tx.PutState(rk, rec, b, now+int64(nodeapi.DegradedChargeRetention)); err != nil {
		return nil, err
	}
	degradedApplied.charged.Add(charged)
	degradedApplied.skipped.Add(skipped)
	return nil, nil
}
