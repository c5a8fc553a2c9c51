package algo

import (
	"fmt"
	"time"
)

// The concurrency algorithm bounds work in flight: at most Limit slots are
// held per key at any instant. An allowed acquire holds a slot, named by the
// caller's id, until now + hold (Spec.Window); a release frees it at once and
// a renewal moves its end to now + hold, never past its acquisition +
// MaxHold. A slot whose holder crashed comes back when its hold ends: a slot
// whose end is ≤ now is not held, whether or not the state still lists it.
//
// Invariant: for every state and now, the live slots (end > now) number at
// most Limit after any Acquire that allowed (it allows only below Limit).
//
// A freed slot (released, or ended) is remembered as a tombstone for MaxHold
// after it was freed, at most maxTombstones of them, so that a repeated
// release answers "already freed" (not an error) and a slot id never held on
// the key can be told apart from one that was.
//
// State, version 1:
//
//	[tag] uvarint(held) { uvarint(acquired) uvarint(end) uvarint(len(id)) id }
//	      uvarint(freed) { uvarint(until) uvarint(len(id)) id }
//
// held slots in acquisition order, tombstones oldest first.

// MaxConcurrencyLimit bounds limit for concurrency: the state lists every
// held slot with its id (up to MaxSlotID bytes).
const MaxConcurrencyLimit int64 = 10_000

// MaxSlotID bounds a slot's id (the request id's bound).
const MaxSlotID = 128

// DefaultMaxHoldFactor: max_hold defaults to this many holds.
const DefaultMaxHoldFactor = 10

// maxTombstones bounds the freed slots a state remembers.
const maxTombstones = 64

type slot struct {
	acquired, end int64 // end: the hold's end (held); until (a tombstone)
	id            []byte
}

type slotState struct {
	held, freed []slot
}

// SlotAnswer is what Release and Renew found.
type SlotAnswer uint8

const (
	// SlotUnknown: the id was never held on this key (or was freed longer
	// than max_hold ago).
	SlotUnknown SlotAnswer = iota
	// SlotFreed: the id was held and has been freed already (released or
	// ended); nothing changed.
	SlotFreed
	// SlotHeld: the id was held; Release freed it, Renew extended it.
	SlotHeld
)

func decodeSlots(state []byte) (slotState, error) {
	var st slotState
	if len(state) == 0 {
		return st, nil
	}
	r := reader{b: state, off: 1}
	n := r.upTo(MaxConcurrencyLimit, "slots")
	for i := int64(0); i < n && r.err == nil; i++ {
		s := slot{acquired: r.time(), end: r.time()}
		s.id = r.bytes(int(r.upTo(MaxSlotID, "slot id length")))
		st.held = append(st.held, s)
	}
	m := r.upTo(maxTombstones, "freed slots")
	for i := int64(0); i < m && r.err == nil; i++ {
		s := slot{end: r.time()}
		s.id = r.bytes(int(r.upTo(MaxSlotID, "slot id length")))
		st.freed = append(st.freed, s)
	}
	return st, r.done("concurrency")
}

// prune frees every held slot whose hold has ended by now (remembered as a
// tombstone from its end) and forgets tombstones past their time.
func (st *slotState) prune(s *Spec, now int64) (expired int) {
	kept := st.held[:0]
	for _, h := range st.held {
		if h.end > now {
			kept = append(kept, h)
			continue
		}
		expired++
		st.tomb(slot{end: h.end + int64(s.MaxHold), id: h.id})
	}
	st.held = kept
	fr := st.freed[:0]
	for _, f := range st.freed {
		if f.end > now {
			fr = append(fr, f)
		}
	}
	st.freed = fr
	return expired
}

func (st *slotState) tomb(t slot) {
	if len(st.freed) >= maxTombstones {
		st.freed = append(st.freed[:0], st.freed[1:]...)
	}
	st.freed = append(st.freed, t)
}

func concurrencyState(s *Spec, state []byte, now int64) (slotState, int64, error) {
	if err := checkConcurrency(s, now); err != nil {
		return slotState{}, 0, err
	}
	if len(state) > 0 && state[0] != stateTag(Concurrency) {
		state = nil
	}
	st, err := decodeSlots(state)
	if err != nil {
		return st, 0, err
	}
	// Time never runs backwards for a key: decide as of the latest
	// acquisition recorded.
	for _, h := range st.held {
		now = max(now, h.acquired)
	}
	return st, now, nil
}

func checkConcurrency(s *Spec, now int64) error {
	if s == nil || s.Algorithm != Concurrency {
		return fmt.Errorf("algo: not a concurrency spec")
	}
	if now < 0 || now > MaxTime {
		return fmt.Errorf("algo: time %d outside [0, %d]", now, MaxTime)
	}
	return s.decidable()
}

// Acquire decides one acquire of the slot id at now (cost 1), or a peek
// (cost 0: id unused, nothing held). Allowed acquires hold the slot until
// now + hold, returned as hold; an id already held on the key is answered
// allowed with its remaining hold and changes nothing (a retry of the same
// acquire must not take a second slot). A refusal's RetryAfter is the time
// until the earliest held slot ends. next is the new state (nil: fresh);
// a refusal or peek returns the pruned state. A cost other than 0 or 1 is a
// *FieldError for "cost".
func Acquire(dst []byte, s *Spec, state []byte, now, cost int64, id []byte) (d Decision, hold time.Duration, next []byte, err error) {
	if cost < 0 || cost > 1 {
		return d, 0, nil, &FieldError{Field: "cost", Message: "must be 0 (a peek) or 1 under the concurrency algorithm (one check acquires one slot)"}
	}
	if cost == 1 && (len(id) == 0 || len(id) > MaxSlotID) {
		return d, 0, nil, &FieldError{Field: "slot", Message: fmt.Sprintf("a slot id must be 1 to %d bytes", MaxSlotID)}
	}
	sc, err := scanSlots(s, state, now, id, cost == 1)
	if err != nil {
		return d, 0, nil, err
	}
	e := noEdit()
	if cost == 1 {
		if sc.liveAt >= 0 {
			e.watch = sc.liveAt
			next, d, end, _ := sc.emit(dst, s, now, e)
			d.Allowed = true
			return d, time.Duration(end - now), next, nil
		}
		if sc.live < s.Limit {
			e.dropTomb = sc.tombAt // the id is held again
			e.add, e.addEnd = id, sc.te+int64(s.Window)
			next, d, _, _ := sc.emit(dst, s, now, e)
			d.Allowed = true
			return d, time.Duration(e.addEnd - now), next, nil
		}
	}
	next, d, _, earliest := sc.emit(dst, s, now, e)
	if d.Allowed = sc.live < s.Limit; !d.Allowed {
		d.RetryAfter = earliest
	}
	return d, 0, next, nil
}

// Release frees the slot id at now. SlotHeld: it was held and is freed now
// (remembered as a tombstone); SlotFreed: it had been freed already (a
// repeated release, or its hold ended); SlotUnknown: never held here. next
// is the new state (nil: fresh), also after SlotFreed/SlotUnknown (pruned).
func Release(dst []byte, s *Spec, state []byte, now int64, id []byte) (SlotAnswer, Decision, []byte, error) {
	sc, err := scanSlots(s, state, now, id, true)
	if err != nil {
		return SlotUnknown, Decision{}, nil, err
	}
	e, ans := noEdit(), SlotUnknown
	if sc.liveAt >= 0 {
		e.dropHeld = sc.liveAt
		e.tomb, e.tombUntil = id, sc.te+int64(s.MaxHold)
		ans = SlotHeld
	} else if sc.tombAt >= 0 {
		ans = SlotFreed
	}
	next, d, _, _ := sc.emit(dst, s, now, e)
	return ans, d, next, nil
}

// Renew extends the slot id's hold to now + hold, but never past its
// acquisition + max_hold, and returns the hold left. SlotFreed and
// SlotUnknown as for Release: a freed slot cannot be renewed (another
// holder may have its place).
func Renew(dst []byte, s *Spec, state []byte, now int64, id []byte) (SlotAnswer, time.Duration, Decision, []byte, error) {
	sc, err := scanSlots(s, state, now, id, true)
	if err != nil {
		return SlotUnknown, 0, Decision{}, nil, err
	}
	e, ans := noEdit(), SlotUnknown
	if sc.liveAt >= 0 {
		acquired, end := sc.heldAt(sc.liveAt)
		e.renewHeld, e.watch = sc.liveAt, sc.liveAt
		e.renewEnd = max(end, min(sc.te+int64(s.Window), acquired+int64(s.MaxHold)))
		ans = SlotHeld
	} else if sc.tombAt >= 0 {
		ans = SlotFreed
	}
	next, d, end, _ := sc.emit(dst, s, now, e)
	var left time.Duration
	if ans == SlotHeld {
		left = time.Duration(end - now)
	}
	return ans, left, d, next, nil
}

// HeldSlots returns the ids of the slots held at now, in acquisition order
// (for tests and inspection).
func HeldSlots(s *Spec, state []byte, now int64) ([]string, error) {
	st, te, err := concurrencyState(s, state, now)
	if err != nil {
		return nil, err
	}
	st.prune(s, te)
	ids := make([]string, len(st.held))
	for i, h := range st.held {
		ids[i] = string(h.id)
	}
	return ids, nil
}

// validateConcurrency is Validate for a normalized concurrency spec.
func (s Spec) validateConcurrency() (Spec, error) {
	bad := func(field, format string, args ...any) (Spec, error) {
		return Spec{}, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Limit < 1 || s.Limit > MaxConcurrencyLimit:
		return bad("limit", "must be between 1 and %d for concurrency (slots held at once)", MaxConcurrencyLimit)
	case s.Window < 1 || s.Window > MaxWindow:
		return bad("hold", "must be positive and at most %s", FormatWindow(MaxWindow))
	case s.MaxHold < s.Window || s.MaxHold > MaxWindow:
		return bad("max_hold", "must be at least hold (%s) and at most %s", FormatWindow(s.Window), FormatWindow(MaxWindow))
	case s.Calendar != CalendarNone:
		return bad("calendar", "not with concurrency")
	case s.Timezone != "":
		return bad("timezone", "not with concurrency")
	case s.Burst != 0:
		return bad("burst", "only allowed with token_bucket and leaky_bucket")
	case s.CountRefused:
		return bad("count_refused", "only allowed with sliding_log")
	}
	return s, nil
}

func (s *Spec) concurrencyDecidable() bool {
	return s.Limit <= MaxConcurrencyLimit && s.Window >= 1 && s.Window <= MaxWindow &&
		s.MaxHold >= s.Window && s.MaxHold <= MaxWindow && s.Calendar == CalendarNone && s.Burst == 0
}

// concurrencySpec is Config.Spec for concurrency: hold (required) and
// max_hold replace window.
func (c Config) concurrencySpec(s Spec) (Spec, error) {
	if s.Algorithm != Concurrency {
		field := "hold"
		if c.Hold == "" {
			field = "max_hold"
		}
		return Spec{}, &FieldError{Field: field, Message: "only allowed with concurrency"}
	}
	if c.Window != "" {
		return Spec{}, &FieldError{Field: "window", Message: "not with concurrency (a slot's length is hold)"}
	}
	var err error
	if c.Hold == "" {
		return Spec{}, &FieldError{Field: "hold", Message: "required for concurrency (a duration such as 30s)"}
	}
	if s.Window, err = parseDurationField(c.Hold, "hold"); err != nil {
		return Spec{}, err
	}
	if c.MaxHold != "" {
		if s.MaxHold, err = parseDurationField(c.MaxHold, "max_hold"); err != nil {
			return Spec{}, err
		}
	}
	return s.Validate()
}

func parseDurationField(v, field string) (time.Duration, error) {
	d, err := ParseWindow(v)
	if fe, ok := err.(*FieldError); ok {
		fe.Field = field
	}
	return d, err
}
