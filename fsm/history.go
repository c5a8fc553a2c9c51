package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Usage per window, kept with the key (so a key moves to another group
// whole), decided in apply at the entry's leader time:
//
//   - 'U' ‖ the key's state key: the key's latest window of a limit with
//     a history option (start, end, used, refused). Refused counts every
//     refusal of a check with cost > 0 decided through the log; a refusal
//     the over-limit cache answers from a node's memory never reaches the
//     log and is not counted (docs/API.md says so: "refusals decided
//     through the log"). Used counts the allowed cost: each allowed check,
//     a lease's units at grant less what its return credits, an
//     adjustment's applied units. A limit without the option writes no
//     record: its refusals still store nothing (decideOp's invariant, which
//     keeps a refused check under attack free of writes), and an allowed
//     check costs what it did.
//   - 'W' ‖ state key ‖ be64(start): a closed window of a limit with a
//     history option (end, used, refused), written when apply first sees
//     the key in a later window, kept until end + history by the expiry
//     sweep (the pruning, in apply, on every replica alike).
//
// The window is algo's Spec.WindowAt: a fixed_window's own window (calendar
// ones included); for other algorithms, refusals are counted per
// epoch-aligned period of the limit's window. The 'U' record lives until
// its window's end plus the history, so a window no later check closes is
// still read (it is then the latest closed window).
const (
	tagUsage       byte = 'U'
	tagUsageWindow byte = 'W'
	usageVersion   byte = 1
)

// usageRec is a 'U' record's or a 'W' row's content (a row's start is in
// its key).
type usageRec struct{ start, end, used, refused int64 }

func appendUsageRec(dst []byte, r usageRec) []byte {
	dst = append(dst, usageVersion)
	dst = binary.AppendVarint(dst, r.start)
	dst = binary.AppendVarint(dst, r.end)
	dst = binary.AppendVarint(dst, r.used)
	return binary.AppendVarint(dst, r.refused)
}

func decodeUsageRec(b []byte) (usageRec, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != usageVersion {
		return usageRec{}, fmt.Errorf("usage record version %d", v)
	}
	r := usageRec{start: d.varint(), end: d.varint(), used: d.varint(), refused: d.varint()}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err == nil && (r.end <= r.start || r.refused < 0) {
		d.err = fmt.Errorf("window [%d, %d) refused %d", r.start, r.end, r.refused)
	}
	return r, d.err
}

// historyApplier is the apply path's memory for usage records.
type historyApplier struct {
	key, row, val []byte
}

// limitOptionsFit checks a limit's options against its spec; invalid is
// the options block's own verdict, returned first.
func limitOptionsFit(s *algo.Spec, o *nodeapi.LimitOptions, invalid error) error {
	if invalid != nil || o.History == 0 {
		return invalid
	}
	return algo.ValidateHistory(*s, o.History)
}

// usageLimit reports whether lim's usage is recorded: a policy's or a plan
// limit's (inline limits have no listing and no options).
func usageLimit(lim *limit) bool { return lim.policy || lim.tag == tagPlanLimit }

// recordUsage is decideOp's hook, after the op's states are written:
// committed is whether the op's allowed checks consumed (an All op that
// refused consumed nothing).
func (a *applier) recordUsage(tx *persist.Tx, checks []checkRef, lims []limit, decs []Decision, now int64, committed bool) error {
	a.recordTop(checks, lims, decs, now, committed) // topkeys.go
	for j := range checks {
		ck, lim, d := &checks[j], &lims[j], &decs[j]
		if ck.cost <= 0 || lim.history <= 0 || !usageLimit(lim) {
			continue
		}
		var used, refused int64
		switch {
		case !d.Allowed:
			refused = 1
		case committed && !d.ShadowRefused:
			used = ck.cost
		default:
			continue
		}
		if err := a.addUsage(tx, a.storageKey(ck, lim), lim, used, refused, now); err != nil {
			return err
		}
	}
	return nil
}

// addUsage adds to the key's current window of lim (sk is the key's state
// key), closing the record's window into a 'W' row first when now is past
// it.
func (a *applier) addUsage(tx *persist.Tx, sk []byte, lim *limit, used, refused, now int64) error {
	if used == 0 && refused == 0 {
		return nil
	}
	start, end, err := lim.spec.WindowAt(now)
	if err != nil {
		return nil // a spec whose zone is unknown decided nothing either
	}
	h := &a.hist
	h.key = append(append(h.key[:0], tagUsage), sk...)
	st, err := tx.State(h.key)
	if err != nil {
		return err
	}
	r := usageRec{start: start, end: end}
	if st.Found {
		old, err := decodeUsageRec(st.Data)
		if err != nil {
			return fmt.Errorf("usage record of %q: %w: %v", sk, persist.ErrCorrupt, err)
		}
		if old.start == start {
			r = old
		} else if err := a.closeWindow(tx, sk, old, lim.history, now); err != nil {
			return err
		}
	}
	r.used = max(r.used+used, 0) // an adjustment's credit beyond what was recorded (history turned on mid-window)
	r.refused += refused
	h.val = appendUsageRec(h.val[:0], r)
	return tx.PutState(h.key, st, h.val, r.end+lim.history)
}

// closeWindow keeps a record's window as a 'W' row while the history
// covers it.
func (a *applier) closeWindow(tx *persist.Tx, sk []byte, r usageRec, history, now int64) error {
	if history <= 0 || r.end+history <= now || r.used == 0 && r.refused == 0 {
		return nil
	}
	h := &a.hist
	h.row = binary.BigEndian.AppendUint64(append(append(h.row[:0], tagUsageWindow), sk...), uint64(r.start))
	st, err := tx.State(h.row)
	if err != nil {
		return err
	}
	h.val = appendUsageRec(h.val[:0], r)
	return tx.PutState(h.row, st, h.val, r.end+history)
}

// creditUsage takes a lease return's credit off the window it was granted
// in (window is the window's start): the record's own window or its row.
// A window past the history is gone: nothing to correct.
func (a *applier) creditUsage(tx *persist.Tx, sk []byte, lim *limit, credited, window, now int64) error {
	if credited <= 0 || lim.history <= 0 {
		return nil
	}
	h := &a.hist
	h.key = append(append(h.key[:0], tagUsage), sk...)
	st, err := tx.State(h.key)
	if err != nil || !st.Found {
		return err
	}
	r, err := decodeUsageRec(st.Data)
	if err != nil {
		return fmt.Errorf("usage record of %q: %w: %v", sk, persist.ErrCorrupt, err)
	}
	if r.start == window {
		r.used = max(r.used-credited, 0)
		h.val = appendUsageRec(h.val[:0], r)
		return tx.PutState(h.key, st, h.val, st.Expiry)
	}
	h.row = binary.BigEndian.AppendUint64(append(append(h.row[:0], tagUsageWindow), sk...), uint64(window))
	st, err = tx.State(h.row)
	if err != nil || !st.Found {
		return err
	}
	if r, err = decodeUsageRec(st.Data); err != nil {
		return fmt.Errorf("usage window of %q: %w: %v", sk, persist.ErrCorrupt, err)
	}
	r.used = max(r.used-credited, 0)
	h.val = appendUsageRec(h.val[:0], r)
	return tx.PutState(h.row, st, h.val, st.Expiry)
}
