package algo

import (
	"fmt"
	"time"
)

// The decode, prune and re-encode implementation of Acquire, Release and
// Renew that concurrency_edit.go replaced: the oracle its property and fuzz
// tests hold the one-pass editor to, byte for byte.

func (st *slotState) appendTo(dst []byte) []byte {
	if len(st.held) == 0 && len(st.freed) == 0 {
		return nil
	}
	dst = append(dst, stateTag(Concurrency))
	dst = appendUvarint(dst, int64(len(st.held)))
	for _, s := range st.held {
		dst = appendUvarint(dst, s.acquired)
		dst = appendUvarint(dst, s.end)
		dst = appendUvarint(dst, int64(len(s.id)))
		dst = append(dst, s.id...)
	}
	dst = appendUvarint(dst, int64(len(st.freed)))
	for _, s := range st.freed {
		dst = appendUvarint(dst, s.end)
		dst = appendUvarint(dst, int64(len(s.id)))
		dst = append(dst, s.id...)
	}
	return dst
}

func find(ss []slot, id []byte) int {
	for i := range ss {
		if string(ss[i].id) == string(id) {
			return i
		}
	}
	return -1
}

// decision describes st at now.
func (st *slotState) decision(s *Spec, now int64) Decision {
	d := Decision{Limit: s.Limit, Remaining: max(s.Limit-int64(len(st.held)), 0)}
	last := now
	for _, h := range st.held {
		last = max(last, h.end)
	}
	for _, f := range st.freed {
		last = max(last, f.end)
	}
	d.ResetAfter = time.Duration(last - now)
	return d
}

// earliestEnd is the time until the first held slot ends (0 with none).
func (st *slotState) earliestEnd(now int64) time.Duration {
	var first int64 = -1
	for _, h := range st.held {
		if first < 0 || h.end < first {
			first = h.end
		}
	}
	if first < 0 {
		return 0
	}
	return time.Duration(first - now)
}

// Acquire decides one acquire of the slot id at now (cost 1), or a peek
// (cost 0: id unused, nothing held). Allowed acquires hold the slot until
// now + hold, returned as hold; an id already held on the key is answered
// allowed with its remaining hold and changes nothing (a retry of the same
// acquire must not take a second slot). A refusal's RetryAfter is the time
// until the earliest held slot ends. next is the new state (nil: fresh);
// a refusal or peek returns the pruned state. A cost other than 0 or 1 is a
// *FieldError for "cost".
func refAcquire(dst []byte, s *Spec, state []byte, now, cost int64, id []byte) (d Decision, hold time.Duration, next []byte, err error) {
	if cost < 0 || cost > 1 {
		return d, 0, nil, &FieldError{Field: "cost", Message: "must be 0 (a peek) or 1 under the concurrency algorithm (one check acquires one slot)"}
	}
	if cost == 1 && (len(id) == 0 || len(id) > MaxSlotID) {
		return d, 0, nil, &FieldError{Field: "slot", Message: fmt.Sprintf("a slot id must be 1 to %d bytes", MaxSlotID)}
	}
	st, te, err := concurrencyState(s, state, now)
	if err != nil {
		return d, 0, nil, err
	}
	st.prune(s, te)
	if cost == 1 {
		if i := find(st.held, id); i >= 0 {
			d = st.decision(s, now)
			d.Allowed = true
			return d, time.Duration(st.held[i].end - now), st.appendTo(dst), nil
		}
		if int64(len(st.held)) < s.Limit {
			if i := find(st.freed, id); i >= 0 { // the id is held again
				st.freed = append(st.freed[:i], st.freed[i+1:]...)
			}
			st.held = append(st.held, slot{acquired: te, end: te + int64(s.Window), id: id})
			d = st.decision(s, now)
			d.Allowed = true
			return d, time.Duration(te + int64(s.Window) - now), st.appendTo(dst), nil
		}
	}
	d = st.decision(s, now)
	if d.Allowed = int64(len(st.held)) < s.Limit; !d.Allowed {
		d.RetryAfter = st.earliestEnd(now)
	}
	return d, 0, st.appendTo(dst), nil
}

// Release frees the slot id at now. SlotHeld: it was held and is freed now
// (remembered as a tombstone); SlotFreed: it had been freed already (a
// repeated release, or its hold ended); SlotUnknown: never held here. next
// is the new state (nil: fresh), also after SlotFreed/SlotUnknown (pruned).
func refRelease(dst []byte, s *Spec, state []byte, now int64, id []byte) (SlotAnswer, Decision, []byte, error) {
	st, te, err := concurrencyState(s, state, now)
	if err != nil {
		return SlotUnknown, Decision{}, nil, err
	}
	st.prune(s, te)
	ans := SlotUnknown
	if i := find(st.held, id); i >= 0 {
		st.held = append(st.held[:i], st.held[i+1:]...)
		st.tomb(slot{end: te + int64(s.MaxHold), id: id})
		ans = SlotHeld
	} else if find(st.freed, id) >= 0 {
		ans = SlotFreed
	}
	return ans, st.decision(s, now), st.appendTo(dst), nil
}

// Renew extends the slot id's hold to now + hold, but never past its
// acquisition + max_hold, and returns the hold left. SlotFreed and
// SlotUnknown as for Release: a freed slot cannot be renewed (another
// holder may have its place).
func refRenew(dst []byte, s *Spec, state []byte, now int64, id []byte) (SlotAnswer, time.Duration, Decision, []byte, error) {
	st, te, err := concurrencyState(s, state, now)
	if err != nil {
		return SlotUnknown, 0, Decision{}, nil, err
	}
	st.prune(s, te)
	ans, left := SlotUnknown, time.Duration(0)
	if i := find(st.held, id); i >= 0 {
		h := &st.held[i]
		h.end = max(h.end, min(te+int64(s.Window), h.acquired+int64(s.MaxHold)))
		ans, left = SlotHeld, time.Duration(h.end-now)
	} else if find(st.freed, id) >= 0 {
		ans = SlotFreed
	}
	return ans, left, st.decision(s, now), st.appendTo(dst), nil
}
