package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
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
// the meta record, so it survives restarts, snapshots and restores, less the
// outbox's events: liveKeys) exceeds
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
	// MaxInlineKeys: a check that would create a key under an inline limit
	// (its spec given in the check: not a policy, not a plan) is refused
	// while the live inline keys (persist's count of inlineGroup) number
	// MaxInlineKeys, so anonymous inline checks cannot take the whole key
	// budget from the policies. Existing inline keys are still decided.
	// 0: none (what an entry from before this bound decodes to).
	MaxInlineKeys int64
}

const (
	boundsNoNewKeys     byte = 1
	boundsMaxKeys       byte = 2
	boundsMaxRequestIDs byte = 4
	boundsMaxInlineKeys byte = 8
)

// inlineGroup is persist's key group of the inline limits' states ('s'
// storage keys): its count is what MaxInlineKeys bounds. No policy name
// starts with 0, so it names no policy's group.
const inlineGroup = "\x00inline"

// inlineKeyGroup is keyGroup's answer for an inline limit's state key.
func inlineKeyGroup(key []byte) []byte {
	if len(key) > 1 && key[0] == 's' {
		return []byte(inlineGroup)
	}
	return nil
}

// EncodeCheckBounded is EncodeCheck with the leader's bounds after the ops:
// flags ‖ [uvarint max keys] ‖ [uvarint max request ids] ‖ [uvarint max
// inline keys]. Zero bounds add
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
	if b.MaxInlineKeys > 0 {
		flags |= boundsMaxInlineKeys
	}
	dst = append(dst, flags)
	if b.MaxKeys > 0 {
		dst = binary.AppendUvarint(dst, uint64(b.MaxKeys))
	}
	if b.MaxRequestIDs > 0 {
		dst = binary.AppendUvarint(dst, uint64(b.MaxRequestIDs))
	}
	if b.MaxInlineKeys > 0 {
		dst = binary.AppendUvarint(dst, uint64(b.MaxInlineKeys))
	}
	return dst
}

// bounds reads what EncodeCheckBounded appended, if anything remains.
func (d *decoder) bounds() Bounds {
	if d.err != nil || d.off == len(d.b) {
		return Bounds{}
	}
	flags := d.byte()
	if flags == 0 || flags&^(boundsNoNewKeys|boundsMaxKeys|boundsMaxRequestIDs|boundsMaxInlineKeys) != 0 {
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
	if flags&boundsMaxInlineKeys != 0 {
		b.MaxInlineKeys = clampCount(d.uvarint())
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
// (they are decided in apply): BudgetRefusals. episodes is the table of
// open exhaustion episodes (below).
type budgetCounters struct {
	keys, noSpace, requestIDs atomic.Uint64
	inline                    atomic.Uint64
	episodes                  episodeTable
}

// InlineBudgetRefusals are the ops this replica's state machine refused for
// MaxInlineKeys since it was opened.
func (f *FSM) InlineBudgetRefusals() uint64 { return f.ap.budget.inline.Load() }

// BudgetRefusals are the ops this replica's state machine refused for the
// key budget, for the free-disk guard and for the request-id budget, since
// it was opened.
func (f *FSM) BudgetRefusals() (keys, noSpace, requestIDs uint64) {
	c := &f.ap.budget
	return c.keys.Load(), c.noSpace.Load(), c.requestIDs.Load()
}

// Reasons of a key_budget_exhausted refusal, as its event and the
// limitd_key_budget_refusals_total metric name them.
const (
	ReasonMaxKeys       = "max_keys"
	ReasonDisk          = "disk"
	ReasonMaxRequestIDs = "max_request_ids"
	ReasonMaxInlineKeys = "max_inline_keys"
)

// refuseNewKeys says whether an op that would create n keys must be refused
// under b, and with which error. Called before anything of the op is
// written: a refused op consumes nothing. It also opens and closes the
// cluster-wide exhaustion episodes (below): a refusal opens its reason's,
// an op that may create its keys closes those whose cause is gone.
func (a *applier) refuseNewKeys(tx *persist.Tx, n int, b *Bounds, now int64) (*Error, error) {
	if n == 0 {
		return nil, nil
	}
	live := liveKeys(tx)
	if b.NoNewKeys {
		a.budget.noSpace.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: "the cluster is short of disk space and creates no new keys; existing keys are still decided"},
			a.openEpisode(tx, ReasonDisk, "", 0, live, now)
	}
	if err := a.closeEpisode(tx, ReasonDisk, ""); err != nil {
		return nil, err
	}
	if b.MaxKeys > 0 && live+uint64(n) > uint64(b.MaxKeys) {
		a.budget.keys.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: fmt.Sprintf("the cluster holds its maximum of %d keys and creates no new ones until keys expire; existing keys are still decided", b.MaxKeys)},
			a.openEpisode(tx, ReasonMaxKeys, "", uint64(b.MaxKeys), live, now)
	}
	if b.MaxKeys <= 0 || live < lowWater(b.MaxKeys) {
		return nil, a.closeEpisode(tx, ReasonMaxKeys, "")
	}
	return nil, nil
}

// refuseInlineKey is refuseInlineKeys for one new state under key.
func (a *applier) refuseInlineKey(tx *persist.Tx, key []byte, b *Bounds, now int64) (*Error, error) {
	if inlineKeyGroup(key) == nil {
		return nil, nil
	}
	return a.refuseInlineKeys(tx, 1, b, now)
}

// refuseInlineKeys refuses an op that would create n keys under inline
// limits while the live inline keys plus n pass b.MaxInlineKeys, opening or
// closing that budget's episode like refuseNewKeys. Called after
// refuseNewKeys and before anything of the op is written.
func (a *applier) refuseInlineKeys(tx *persist.Tx, n int, b *Bounds, now int64) (*Error, error) {
	if n == 0 {
		return nil, nil
	}
	live := uint64(tx.GroupKeys([]byte(inlineGroup)))
	if b.MaxInlineKeys > 0 && live+uint64(n) > uint64(b.MaxInlineKeys) {
		a.budget.inline.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: fmt.Sprintf("inline limits hold their maximum of %d keys (--max-inline-keys-percent) and create no new ones until keys expire; existing keys and policies are still decided", b.MaxInlineKeys)},
			a.openEpisode(tx, ReasonMaxInlineKeys, "", uint64(b.MaxInlineKeys), live, now)
	}
	if b.MaxInlineKeys <= 0 || live < lowWater(b.MaxInlineKeys) {
		return nil, a.closeEpisode(tx, ReasonMaxInlineKeys, "")
	}
	return nil, nil
}

// liveKeys is what the key budget counts: every live state record but the
// outbox's events, which have their own bound (nodeapi.MaxOutbox), so the
// event an exhaustion produces does not itself spend the budget.
func liveKeys(tx *persist.Tx) uint64 {
	return tx.Meta().Keys - uint64(tx.GroupKeys([]byte(outboxGroup)))
}

// refuseNewRequestID is refuseNewKeys for an op recording a new request id
// while live records are stored.
func (a *applier) refuseNewRequestID(tx *persist.Tx, b *Bounds, now int64) (*Error, error) {
	live := tx.Meta().RequestIDs
	if b.MaxRequestIDs > 0 && live >= uint64(b.MaxRequestIDs) {
		a.budget.requestIDs.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "request_id", Message: fmt.Sprintf("the cluster remembers its maximum of %d request ids; retry later, or without a request_id", b.MaxRequestIDs)},
			a.openEpisode(tx, ReasonMaxRequestIDs, "", uint64(b.MaxRequestIDs), live, now)
	}
	if b.MaxRequestIDs <= 0 || live < lowWater(b.MaxRequestIDs) {
		return nil, a.closeEpisode(tx, ReasonMaxRequestIDs, "")
	}
	return nil, nil
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
func (a *applier) refusePolicyKeys(tx *persist.Tx, checks []checkRef, lims []limit, now int64) (*Error, error) {
	for j := range lims {
		lim := &lims[j]
		if !lim.policy {
			continue
		}
		var n int64
		for k := range a.tent {
			t := &a.tent[k]
			if t.changed && !t.prev.Found && t.data != nil && bytes.Equal(policyOfKey(t.key), lim.ident) {
				n++
			}
		}
		if e, err := a.refusePolicyKey(tx, lim.name, lim.ident, lim.maxKeys, n, now); e != nil || err != nil {
			return e, err
		}
	}
	return nil, nil
}

// refusePolicyKey refuses n new keys of policy name (its key group ident)
// past its budget maxKeys (0: none), opening or closing its episode.
func (a *applier) refusePolicyKey(tx *persist.Tx, name string, ident []byte, maxKeys, n int64, now int64) (*Error, error) {
	if n == 0 {
		return nil, nil
	}
	live := tx.GroupKeys(ident)
	if maxKeys > 0 && live+n > maxKeys {
		a.budget.keys.Add(1)
		return &Error{Code: CodeKeyBudgetExhausted, Field: "key", Message: fmt.Sprintf("policy %q holds its maximum of %d keys (max_keys) and creates no new ones until keys expire; existing keys are still decided", name, maxKeys)},
			a.openEpisode(tx, ReasonMaxKeys, name, uint64(maxKeys), uint64(live), now)
	}
	if maxKeys <= 0 || live < int64(lowWater(maxKeys)) {
		return nil, a.closeEpisode(tx, ReasonMaxKeys, name)
	}
	return nil, nil
}

// Exhaustion episodes: the first refusal for a budget (the cluster's keys,
// its free-disk guard, its request ids, or one policy's keys) after the
// cluster was under it opens an episode and puts one key_budget_exhausted
// event in the outbox; further refusals for that budget produce nothing;
// the episode closes when an op finds the cause gone (for a count, the
// count under lowWater of its bound, or the bound lifted; for the disk, an
// entry the leader stamped without NoNewKeys that creates keys), so the
// next exhaustion is a new event. The hysteresis keeps a flood held at the
// bound, with keys expiring under it, to one event rather than one per
// expiry.
//
// An open episode is a record in the policies bucket (episodeKeyPrefix ‖
// reason ‖ 0 ‖ policy → uvarint(seq of its event) ‖ varint(at)), so
// snapshots, restores, the digest and every replica hold the same episodes
// and a leader change neither repeats nor loses an event; the event's id is
// derived from the budget and the seq, stable across replays and
// redeliveries. episodeTable mirrors the records in memory, so an op that
// creates keys while no episode is open pays one length test.
const episodeKeyPrefix = "\x00key-budget\x00"

// lowWater is the count under which a bound's episode closes: 90% of it.
func lowWater(bound int64) uint64 { return uint64(bound - bound/10) }

// episodeTable is the open episodes (reason ‖ 0 ‖ policy → seq), including
// those of the transaction being applied; undo rolls those back if it is
// discarded.
type episodeTable struct {
	open map[string]uint64
	undo []episodeUndo
}

type episodeUndo struct {
	name string
	seq  uint64
	was  bool
}

func (t *episodeTable) set(name string, seq uint64, open bool) {
	prev, was := t.open[name]
	t.undo = append(t.undo, episodeUndo{name, prev, was})
	if open {
		if t.open == nil {
			t.open = map[string]uint64{}
		}
		t.open[name] = seq
	} else {
		delete(t.open, name)
	}
}

func (t *episodeTable) publish() { t.undo = t.undo[:0] }

func (t *episodeTable) discard() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		if u.was {
			t.open[u.name] = u.seq
		} else {
			delete(t.open, u.name)
		}
	}
	t.undo = t.undo[:0]
}

// loadEpisode takes a policies-bucket entry that is an episode record;
// false otherwise. A record that does not read as one is corrupt.
func loadEpisode(into map[string]uint64, key string, enc []byte) (bool, error) {
	name, ok := strings.CutPrefix(key, episodeKeyPrefix)
	if !ok {
		return false, nil
	}
	seq, w := binary.Uvarint(enc)
	_, m := binary.Varint(enc[max(w, 0):])
	if w <= 0 || m <= 0 || w+m != len(enc) || !strings.Contains(name, "\x00") {
		return true, fmt.Errorf("key budget episode %q: %w: malformed record", name, persist.ErrCorrupt)
	}
	into[name] = seq
	return true, nil
}

// setEpisodes installs the episodes load read.
func (t *episodeTable) setEpisodes(m map[string]uint64) { t.open, t.undo = m, t.undo[:0] }

// openEpisode opens the episode of a budget, unless it is open: its record
// and its one event.
func (a *applier) openEpisode(tx *persist.Tx, reason, policy string, budget, count uint64, now int64) error {
	t := &a.budget.episodes
	name := reason + "\x00" + policy
	if _, ok := t.open[name]; ok {
		return nil
	}
	seq := a.nextSeq()
	rec := binary.AppendVarint(binary.AppendUvarint(nil, seq), now)
	if err := tx.PutPolicy(episodeKeyPrefix+name, rec); err != nil {
		return err
	}
	t.set(name, seq, true)
	body, id := budgetEvent(reason, policy, budget, count, seq, now)
	return a.emit(tx, id, body, now)
}

// closeEpisode closes a budget's episode if it is open.
func (a *applier) closeEpisode(tx *persist.Tx, reason, policy string) error {
	t := &a.budget.episodes
	if len(t.open) == 0 {
		return nil
	}
	name := reason + "\x00" + policy
	if _, ok := t.open[name]; !ok {
		return nil
	}
	if _, err := tx.DeletePolicy(episodeKeyPrefix + name); err != nil {
		return err
	}
	t.set(name, 0, false)
	return nil
}

// budgetEvent is a key_budget_exhausted event's JSON body and its id: the
// budget (reason, policy) and the seq of the event, which only this
// episode's opening has.
func budgetEvent(reason, policy string, budget, count, seq uint64, now int64) ([]byte, string) {
	id := eventID("key_budget_exhausted", reason, policy, strconv.FormatUint(seq, 10))
	body, _ := json.Marshal(struct { // strings and numbers: cannot fail
		ID     string `json:"id"`
		Type   string `json:"type"`
		Reason string `json:"reason"`
		Policy string `json:"policy,omitempty"`
		Budget uint64 `json:"budget,omitempty"`
		Count  uint64 `json:"count"`
		At     string `json:"at"`
	}{id, "key_budget_exhausted", reason, policy, budget, count, stamp(now)})
	return body, id
}

// BudgetEpisodes are the open exhaustion episodes (reason ‖ 0 ‖ policy →
// the seq of the event that opened each), for tests and diagnostics. Only
// on the apply goroutine or between applies.
func (f *FSM) BudgetEpisodes() map[string]uint64 {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	return maps.Clone(f.ap.budget.episodes.open)
}
