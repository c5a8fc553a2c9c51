package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Alerts: a limit with a notify option (nodeapi.LimitOptions.Notify) puts
// one event in the outbox (outbox.go) the first time a key's usage reaches
// each threshold in a window. The crossing is decided here, in apply, from
// the decision at the entry's leader time, and the thresholds that fired in
// the key's current window (its marks) are stored with the key: a mark
// record in the state bucket under 'N' ‖ the key's storage key, expiring
// at the window's end, so snapshots, restores, the digest and the sweep
// cover it as they cover ban records, and a key moving to another group
// takes its marks along.
//
// The rules (TestNotifyModel checks them against a plain model):
//
//   - The window is algo's WindowAt of the limit at the decision's time:
//     for fixed_window exactly its window, for the other algorithms the
//     period of the limit's length (calendar windows: the local period).
//   - After a check that costs something and whose op was applied (an
//     all-or-nothing op that was refused consumed nothing and fires
//     nothing), usage is limit − remaining; every threshold t with
//     usage·NotifyScale ≥ t·limit that has no mark in the window fires:
//     one event, and its mark.
//   - The event's id is derived from the limit, the key, the window's
//     start and the threshold, so a replay of the log, a request-id retry
//     and a redelivery by a new leader all carry the same id, and the mark
//     makes sure the event is produced once.
//   - A check refused because the key is banned reads no state and fires
//     nothing.
const notifyKeyPrefix = 'N'

// MaxNotify bounds a limit's thresholds (nodeapi's).
const MaxNotify = nodeapi.MaxNotify

// appendNotify writes the notify option's body: uvarint(count) ‖ uvarint(t)….
func appendNotify(dst []byte, n *[nodeapi.MaxNotify]uint16) []byte {
	k := 0
	for k < len(n) && n[k] != 0 {
		k++
	}
	dst = binary.AppendUvarint(dst, uint64(k))
	for _, t := range n[:k] {
		dst = binary.AppendUvarint(dst, uint64(t))
	}
	return dst
}

// decodeNotify reads appendNotify's body; a body that does not read as one,
// or thresholds ValidateNotify refuses, are invalid (an answer).
func decodeNotify(body []byte) (n [nodeapi.MaxNotify]uint16, invalid error) {
	bad := &algo.FieldError{Field: "notify", Message: "malformed thresholds"}
	k, w := binary.Uvarint(body)
	if w <= 0 || k == 0 || k > nodeapi.MaxNotify {
		return n, bad
	}
	off := w
	for i := range int(k) {
		t, w := binary.Uvarint(body[off:])
		if w <= 0 || t > nodeapi.NotifyScale {
			return [nodeapi.MaxNotify]uint16{}, bad
		}
		n[i] = uint16(t)
		off += w
	}
	if off != len(body) {
		return [nodeapi.MaxNotify]uint16{}, bad
	}
	if err := ValidateNotify(&n); err != nil {
		return [nodeapi.MaxNotify]uint16{}, err
	}
	return n, nil
}

// ValidateNotify checks a notify option: at least one threshold, each in
// (0, NotifyScale], strictly increasing, unused entries zero at the end.
func ValidateNotify(n *[nodeapi.MaxNotify]uint16) *algo.FieldError {
	prev := uint16(0)
	for i, t := range n {
		if t == 0 {
			for _, u := range n[i:] {
				if u != 0 {
					return &algo.FieldError{Field: "notify", Message: "thresholds must be contiguous"}
				}
			}
			if i == 0 {
				return &algo.FieldError{Field: "notify", Message: "at least one threshold"}
			}
			return nil
		}
		if t > nodeapi.NotifyScale || t <= prev {
			return &algo.FieldError{Field: "notify[" + strconv.Itoa(i) + "]", Message: "thresholds are in (0, 1] and strictly increasing"}
		}
		prev = t
	}
	return nil
}

// notifyOf is a policy's thresholds, nil without any.
func notifyOf(p *Policy) *[nodeapi.MaxNotify]uint16 { return notifyOfLimit(&p.Options) }

// notifyOfLimit is a policy's or plan limit's thresholds, nil without any.
func notifyOfLimit(o *nodeapi.LimitOptions) *[nodeapi.MaxNotify]uint16 {
	if o.Notify[0] == 0 {
		return nil
	}
	return &o.Notify
}

// A mark record: varint(window start) ‖ fired bits (bit i: threshold i).
func decodeMarks(b []byte) (start int64, fired byte, err error) {
	s, n := binary.Varint(b)
	if n <= 0 || n+1 != len(b) {
		return 0, 0, errors.New("malformed mark record")
	}
	return s, b[n], nil
}

// notify fires the thresholds the op's checks crossed (called once per
// applied op, after its states are written).
func (a *applier) notify(tx *persist.Tx, checks []checkRef, lims []limit, decs []Decision, now int64) error {
	for j := range checks {
		lim := &lims[j]
		if lim.notify == nil || checks[j].cost <= 0 || decs[j].Reason == ReasonBanned {
			continue
		}
		if err := a.crossings(tx, lim, a.storageKey(&checks[j], lim), string(checks[j].key), &decs[j].Decision, now); err != nil {
			return err
		}
	}
	return nil
}

// crossings fires the thresholds of lim that d's usage reached and key's
// marks (under its storage key sk) do not hold yet for the window at now.
func (a *applier) crossings(tx *persist.Tx, lim *limit, sk []byte, key string, d *algo.Decision, now int64) error {
	if d.Limit <= 0 {
		return nil
	}
	used := d.Limit - max(d.Remaining, 0)
	start, end, err := lim.spec.WindowAt(now)
	if err != nil {
		return nil // a spec without windows (validated away): nothing to count in
	}
	mk := append(append(a.markKeyBuf[:0], notifyKeyPrefix), sk...)
	a.markKeyBuf = mk
	st, err := tx.State(mk)
	if err != nil {
		return err
	}
	var fired byte
	if st.Found {
		s, f, err := decodeMarks(st.Data)
		if err != nil {
			return fmt.Errorf("mark record %q: %w: %v", mk, persist.ErrCorrupt, err)
		}
		if s == start {
			fired = f
		}
	}
	next := fired
	for i, t := range lim.notify {
		if t == 0 {
			break
		}
		if fired&(1<<i) != 0 || used*nodeapi.NotifyScale < int64(t)*d.Limit {
			continue
		}
		next |= 1 << i
		body, id := thresholdEvent(lim.tag == tagPlanLimit, lim.name, key, start, end, t, used, d.Limit, now)
		if err := a.emit(tx, id, body, now); err != nil {
			return err
		}
	}
	if next == fired {
		return nil
	}
	b := binary.AppendVarint(tx.Alloc(binary.MaxVarintLen64 + 1)[:0], start)
	return tx.PutState(mk, st, append(b, next), end)
}

// eventID is the stable id of an event: a hash of what identifies it.
func eventID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func stamp(t int64) string { return time.Unix(0, t).UTC().Format(time.RFC3339Nano) }

// thresholdEvent is a threshold crossing's JSON body and its id.
// A plan limit's event names it as "plan_limit" in place of "policy".
func thresholdEvent(planLimit bool, name, key string, start, end int64, t uint16, used, limit, now int64) ([]byte, string) {
	kind, policy, pl := "policy", name, ""
	if planLimit {
		kind, policy, pl = "plan_limit", "", name
	}
	id := eventID("threshold", kind, name, key, strconv.FormatInt(start, 10), strconv.Itoa(int(t)))
	body, _ := json.Marshal(struct { // strings and numbers: cannot fail
		ID          string  `json:"id"`
		Type        string  `json:"type"`
		Key         string  `json:"key"`
		Policy      string  `json:"policy,omitempty"`
		PlanLimit   string  `json:"plan_limit,omitempty"`
		WindowStart string  `json:"window_start"`
		WindowEnd   string  `json:"window_end"`
		Threshold   float64 `json:"threshold"`
		Used        int64   `json:"used"`
		Limit       int64   `json:"limit"`
		At          string  `json:"at"`
	}{id, "threshold", key, policy, pl, stamp(start), stamp(end), float64(t) / nodeapi.NotifyScale, used, limit, stamp(now)})
	return body, id
}

// banEvent puts a ban in the outbox (ban.go calls it where the ban is
// decided). Its id names the policy, the key and the ban's end: one event
// per ban.
func (a *applier) banEvent(tx *persist.Tx, policy, key string, until int64, offences uint64, now int64) error {
	id := eventID("ban", policy, key, strconv.FormatInt(until, 10))
	body, _ := json.Marshal(struct { // strings and numbers: cannot fail
		ID       string `json:"id"`
		Type     string `json:"type"`
		Key      string `json:"key"`
		Policy   string `json:"policy"`
		Until    string `json:"until"`
		Offences uint64 `json:"offences"`
		At       string `json:"at"`
	}{id, "ban", key, policy, stamp(until), offences, stamp(now)})
	return a.emit(tx, id, body, now)
}
