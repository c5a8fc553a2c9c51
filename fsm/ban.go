package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Bans: a policy with an on_exceed option bans a key it refuses. The ban is
// decided here, in apply, at the entry's leader time, and stored in the
// replicated state beside the key's state: a ban record in the state bucket
// under 'B' ‖ the key's storage key, so snapshots, restores, the digest and
// the expiry sweep cover it as they cover lease records.
//
// The rules (TestBanModel checks them against a plain model):
//
//   - A check under the policy of a key whose record says banned until U,
//     decided at now < U, is refused with Reason banned and RetryAfter
//     U − now, and counts nowhere (the key's state is not read or written):
//     refusing a banned key must cost what an over-limit refusal costs, and
//     must not make it any later for the key to be let through again.
//   - A refusal by the limit itself (not shadow) is an offence. The n-th
//     offence remembered bans for the n-th step of [ban, escalate…], the
//     last step repeating; the refusal is answered banned with the ban's
//     RetryAfter. Checks refused because of a ban are not offences.
//   - Offences are forgotten forget_after after the last ban ended: the
//     record expires then (the sweep removes it), and an offence at or past
//     that time counts as the first even if the sweep has not run yet.
//   - Bans hold while the policy has an on_exceed option; a put without the
//     option stops them (the records then expire). DELETE /v1/bans (CmdUnban)
//     removes records.
//
// Records are written only by these rules and CmdUnban, all in log order,
// so every replica holds the same bans; the in-memory index (banTable) is a
// copy published after commit, for the read path and listings.

// CmdUnban removes ban records (see the list in types.go; never renumber).
const CmdUnban byte = 32 // key, policy ("": under every policy) → error (*Error not_found if none)

const banKeyPrefix = 'B'

// OnExceed is a policy's ban option (nodeapi's).
type OnExceed = nodeapi.OnExceed

// ReasonBanned is Decision.Reason for a banned key.
const ReasonBanned = nodeapi.ReasonBanned

// EncodeUnban builds a CmdUnban entry.
func EncodeUnban(key, policy string) []byte {
	return appendString(appendString([]byte{CmdUnban, cmdVersion}, key), policy)
}

func init() {
	registerCommand(CmdUnban, commandType{
		name: "unban",
		decode: func(c *command, d *decoder) {
			c.addr = string(d.bytes()) // the key
			c.name = string(d.bytes()) // the policy
		},
		validate: func(c *command) error {
			if c.addr == "" || len(c.addr) > MaxKeyBytes || len(c.name) > MaxPolicyName {
				return fmt.Errorf("%w: unban: key or policy out of bounds", ErrBadCommand)
			}
			return nil
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			e, err := a.unban(tx, c.addr, c.name)
			return errResponse(e), err
		},
	})
}

// appendOnExceed writes an on_exceed option (policyOnExceed).
func appendOnExceed(dst []byte, o *nodeapi.OnExceed) []byte {
	dst = binary.AppendUvarint(dst, uint64(o.Ban))
	dst = binary.AppendUvarint(dst, uint64(o.Steps))
	for _, s := range o.Escalate[:max(0, min(o.Steps, nodeapi.MaxBanSteps))] {
		dst = binary.AppendUvarint(dst, uint64(s))
	}
	return binary.AppendUvarint(dst, uint64(o.ForgetAfter))
}

// decodeOnExceed reads appendOnExceed's output. Well formed but invalid
// values are an answer (the error), not a decoding failure.
func decodeOnExceed(d *decoder) (nodeapi.OnExceed, error) {
	var o nodeapi.OnExceed
	ban, steps := d.uvarint(), d.uvarint()
	if steps > nodeapi.MaxBanSteps {
		d.fail(fmt.Errorf("on_exceed with %d steps", steps))
		return o, nil
	}
	var vals [nodeapi.MaxBanSteps]uint64
	for i := range int(steps) {
		vals[i] = d.uvarint()
	}
	forget := d.uvarint()
	if d.err != nil {
		return o, nil
	}
	for _, v := range append(vals[:steps:steps], ban, forget) {
		if v > uint64(nodeapi.MaxBanDuration) {
			return o, &algo.FieldError{Field: "on_exceed", Message: "a duration over " + nodeapi.MaxBanDuration.String()}
		}
	}
	o.Ban, o.Steps, o.ForgetAfter = time.Duration(ban), int(steps), time.Duration(forget)
	for i := range o.Steps {
		o.Escalate[i] = time.Duration(vals[i])
	}
	if err := ValidateOnExceed(&o); err != nil {
		return o, err
	}
	return o, nil
}

// ValidateOnExceed checks an on_exceed option: every duration positive and
// at most nodeapi.MaxBanDuration, escalation strictly increasing from ban,
// at most nodeapi.MaxBanSteps steps; forget_after 0 means the longest ban.
// The error names the field under "on_exceed".
func ValidateOnExceed(o *nodeapi.OnExceed) *algo.FieldError {
	bad := func(f, m string) *algo.FieldError { return &algo.FieldError{Field: "on_exceed." + f, Message: m} }
	switch {
	case o.Ban <= 0 || o.Ban > nodeapi.MaxBanDuration:
		return bad("ban", "must be a positive duration of at most "+nodeapi.MaxBanDuration.String())
	case o.Steps < 0 || o.Steps > nodeapi.MaxBanSteps:
		return bad("escalate", "at most "+strconv.Itoa(nodeapi.MaxBanSteps)+" steps")
	case o.ForgetAfter < 0 || o.ForgetAfter > nodeapi.MaxBanDuration:
		return bad("forget_after", "must be a positive duration of at most "+nodeapi.MaxBanDuration.String())
	}
	prev := o.Ban
	for i, s := range o.Escalate[:o.Steps] {
		f := "escalate[" + strconv.Itoa(i) + "]"
		if s <= 0 || s > nodeapi.MaxBanDuration {
			return bad(f, "must be a positive duration of at most "+nodeapi.MaxBanDuration.String())
		}
		if s <= prev {
			return bad(f, "must be longer than the step before it ("+prev.String()+"): escalation is strictly increasing")
		}
		prev = s
	}
	return nil
}

// banStep is the ban for the n-th offence remembered (n ≥ 1).
func banStep(o *nodeapi.OnExceed, n uint64) time.Duration {
	if n <= 1 || o.Steps == 0 {
		return o.Ban
	}
	return o.Escalate[min(n-2, uint64(o.Steps-1))]
}

// forgetAfter is how long offences are remembered after a ban ends.
func forgetAfter(o *nodeapi.OnExceed) time.Duration {
	if o.ForgetAfter > 0 {
		return o.ForgetAfter
	}
	return banStep(o, uint64(o.Steps)+1) // the longest ban
}

// banKey is 'B' ‖ the state's storage key, in a.banKeyBuf.
func (a *applier) banKey(stateKey []byte) []byte {
	a.banKeyBuf = append(append(a.banKeyBuf[:0], banKeyPrefix), stateKey...)
	return a.banKeyBuf
}

// A ban record: uvarint(offences) ‖ varint(until).
func decodeBan(b []byte) (offences uint64, until int64, err error) {
	o, n := binary.Uvarint(b)
	u, m := binary.Varint(b[max(n, 0):])
	if n <= 0 || m <= 0 || n+m != len(b) || o == 0 {
		return 0, 0, errors.New("malformed ban record")
	}
	return o, u, nil
}

// banned answers a check of a banned key under lim, if it is banned at now.
func (a *applier) banned(tx *persist.Tx, lim *limit, key []byte, now int64) (Decision, bool, error) {
	bk := a.banKey(key)
	st, err := tx.State(bk)
	if err != nil || !st.Found {
		return Decision{}, false, err
	}
	_, until, err := decodeBan(st.Data)
	if err != nil {
		return Decision{}, false, fmt.Errorf("ban record %q: %w: %v", bk, persist.ErrCorrupt, err)
	}
	if until <= now {
		return Decision{}, false, nil
	}
	return banDecision(lim, until-now), true, nil
}

func banDecision(lim *limit, d int64) Decision {
	return Decision{Decision: algo.Decision{Limit: lim.spec.Limit, RetryAfter: time.Duration(d), ResetAfter: time.Duration(d)}, Reason: nodeapi.ReasonBanned}
}

// offence records a refusal by lim's limit for key at now and turns dec
// into the ban it earns.
func (a *applier) offence(tx *persist.Tx, lim *limit, ck *checkRef, key []byte, now int64, dec *Decision) error {
	o := lim.onExceed
	bk := a.banKey(key)
	st, err := tx.State(bk)
	if err != nil {
		return err
	}
	var n uint64
	if st.Found {
		prev, until, err := decodeBan(st.Data)
		if err != nil {
			return fmt.Errorf("ban record %q: %w: %v", bk, persist.ErrCorrupt, err)
		}
		if now < until+int64(forgetAfter(o)) {
			n = prev // remembered; the sweep may not have run yet otherwise
		}
	}
	n++
	ban := int64(banStep(o, n))
	until := now + ban
	b := binary.AppendUvarint(tx.Alloc(2 * binary.MaxVarintLen64)[:0], n)
	b = binary.AppendVarint(b, until)
	if err := tx.PutState(bk, st, b, until+int64(forgetAfter(o))); err != nil {
		return err
	}
	a.f.bans.stage(lim.name, string(ck.key), banEntry{until: until, offences: n})
	a.f.bans.issued.Add(1)
	if err := a.banEvent(tx, lim.name, string(ck.key), until, n, now); err != nil { // notify.go
		return err
	}
	*dec = banDecision(lim, ban)
	return nil
}

// unban removes key's ban records under policy, or under every policy
// when policy is "".
func (a *applier) unban(tx *persist.Tx, key, policy string) (*Error, error) {
	if key == "" || len(key) > MaxKeyBytes || len(policy) > MaxPolicyName {
		return &Error{Code: CodeInvalidArgument, Field: "key", Message: "key or policy out of bounds"}, nil
	}
	var names []string
	if policy != "" {
		names = []string{policy}
	} else {
		for name := range a.f.policies {
			names = append(names, name)
		}
		for name, p := range a.pendingPolicies {
			if p != nil {
				names = append(names, name)
			}
		}
		sort.Strings(names) // deletions commute, but keep the work in one order
	}
	removed := false
	ck := checkRef{kind: limitPolicy, key: []byte(key)}
	for _, name := range names {
		ck.policy = []byte(name)
		bk := a.banKey(a.storageKey(&ck, &limit{policy: true, ident: ck.policy}))
		st, err := tx.State(bk)
		if err != nil {
			return nil, err
		}
		if !st.Found {
			continue
		}
		if err := tx.DeleteState(bk, st); err != nil {
			return nil, err
		}
		a.f.bans.stage(name, key, banEntry{})
		removed = true
	}
	if !removed {
		return &Error{Code: CodeNotFound, Field: "key", Message: fmt.Sprintf("key %q is not banned", key)}, nil
	}
	return nil, nil
}

// banSwept drops a ban record the expiry sweep removes from the index.
func (a *applier) banSwept(bk []byte) {
	if policy, key, ok := splitBanKey(bk); ok {
		a.f.bans.stage(policy, key, banEntry{})
	}
}

// splitBanKey reads 'B' 'p' ‖ uvarint(len) ‖ policy ‖ key.
func splitBanKey(bk []byte) (policy, key string, ok bool) {
	if len(bk) < 3 || bk[0] != banKeyPrefix || bk[1] != 'p' {
		return "", "", false
	}
	n, w := binary.Uvarint(bk[2:])
	if w <= 0 || uint64(len(bk)-2-w) < n {
		return "", "", false
	}
	return string(bk[2+w : 2+w+int(n)]), string(bk[2+w+int(n):]), true
}

// banTable is the in-memory copy of the ban records, published after
// commit like the domains; keyed by policy ‖ 0 ‖ key.
type banTable struct {
	mu      sync.RWMutex
	m       map[string]banEntry
	pending map[string]banEntry // zero until: removed; apply goroutine only
	issued  atomic.Uint64       // bans issued by this replica's applies
	// max bounds m (nodeapi.MaxBanIndex; tests lower it). A ban it leaves
	// out is still in the state and enforced by apply; unindexed says one
	// was left out since the index was last rebuilt.
	max       int
	unindexed atomic.Bool
	// next is the earliest end among the indexed bans still in the index
	// (0: none), for NextExpiry: the sweep at a ban's end moves the
	// replicated time past it, which is what ends it on the read path.
	// pruneAt is the leader time of a sweep applied since the last publish
	// (apply goroutine only): publish drops the bans ended by then.
	next    atomic.Int64
	pruneAt int64
}

func (t *banTable) nextEnd() int64 { return t.next.Load() }

// sweptAt records a sweep at leader time now; publish prunes the index.
func (t *banTable) sweptAt(now int64) {
	if n := t.next.Load(); n != 0 && n <= now {
		t.pruneAt = max(t.pruneAt, now)
	}
}

func (t *banTable) limit() int {
	if t.max > 0 {
		return t.max
	}
	return nodeapi.MaxBanIndex
}

type banEntry struct {
	until    int64
	offences uint64
}

func banIndex(policy, key string) string { return policy + "\x00" + key }

func (t *banTable) stage(policy, key string, e banEntry) {
	if t.pending == nil {
		t.pending = map[string]banEntry{}
	}
	t.pending[banIndex(policy, key)] = e
}

func (t *banTable) publish() {
	if len(t.pending) == 0 && t.pruneAt == 0 {
		return
	}
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string]banEntry{}
	}
	next := t.next.Load()
	for k, e := range t.pending {
		_, had := t.m[k]
		switch {
		case e.until == 0:
			delete(t.m, k)
		case had || len(t.m) < t.limit():
			t.m[k] = e
			if next == 0 || e.until < next {
				next = e.until
			}
		default:
			t.unindexed.Store(true)
		}
	}
	if t.pruneAt != 0 {
		// A ban ended at the sweep's leader time is over on every replica
		// that applied the sweep; its record stays (offences are
		// remembered until forget_after), the index keeps bans in force.
		next = 0
		for k, e := range t.m {
			if e.until <= t.pruneAt {
				delete(t.m, k)
			} else if next == 0 || e.until < next {
				next = e.until
			}
		}
		t.pruneAt = 0
	}
	t.next.Store(next)
	t.mu.Unlock()
	clear(t.pending)
}

func (t *banTable) discard() { clear(t.pending); t.pruneAt = 0 }

// loadBans reads the ban records into the index (FSM.load), at most its
// bound; every record is read, so a damaged one is found here as anywhere.
func (t *banTable) load(tx *persist.Tx) error {
	m := map[string]banEntry{}
	full := false
	err := tx.ForEachState([]byte{banKeyPrefix}, func(k, v []byte) error {
		policy, key, ok := splitBanKey(k)
		n, until, err := decodeBan(v)
		if !ok || err != nil {
			return fmt.Errorf("ban record %q: %w", k, persist.ErrCorrupt)
		}
		if len(m) >= t.limit() {
			full = true
			return nil
		}
		m[banIndex(policy, key)] = banEntry{until: until, offences: n}
		return nil
	})
	if err != nil {
		return err
	}
	var next int64
	for _, e := range m {
		if next == 0 || e.until < next {
			next = e.until
		}
	}
	t.mu.Lock()
	t.m = m
	t.next.Store(next)
	t.mu.Unlock()
	t.unindexed.Store(full)
	return nil
}

// BansUnindexed reports that the index of bans is full: some bans in the
// state are not listed (and are answered through the log).
func (f *FSM) BansUnindexed() bool { return f.bans.unindexed.Load() }

// Banned reports whether this replica's applied state bans key under
// policy at now (leader time), and until when.
func (f *FSM) Banned(policy, key string, now int64) (int64, bool) {
	f.bans.mu.RLock()
	e, ok := f.bans.m[banIndex(policy, key)]
	f.bans.mu.RUnlock()
	return e.until, ok && e.until > now
}

// Bans lists this replica's bans in force at now, ordered by policy then
// key, the first limit after the cursor (policy ‖ 0 ‖ key of the last one
// listed; "" from the start); next is "" after the last.
func (f *FSM) Bans(cursor string, limit int, now int64) (bans []nodeapi.Ban, next string) {
	f.bans.mu.RLock()
	ks := make([]string, 0, len(f.bans.m))
	for k, e := range f.bans.m {
		if e.until > now && k > cursor {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	if len(ks) > limit {
		ks, next = ks[:limit], ks[limit-1]
	}
	for _, k := range ks {
		e := f.bans.m[k]
		policy, key, _ := strings.Cut(k, "\x00")
		bans = append(bans, nodeapi.Ban{Key: key, Policy: policy, Until: e.until, Offences: int(e.offences)})
	}
	f.bans.mu.RUnlock()
	return bans, next
}

// BanCounts is the number of bans in force at now and the bans this
// replica has issued since it started (for metrics).
func (f *FSM) BanCounts(now int64) (active int, issued uint64) {
	f.bans.mu.RLock()
	for _, e := range f.bans.m {
		if e.until > now {
			active++
		}
	}
	f.bans.mu.RUnlock()
	return active, f.bans.issued.Load()
}

// onExceedOf is a policy's on_exceed option for its limit, nil without one.
func onExceedOf(p *Policy) *nodeapi.OnExceed {
	if p.OnExceed.Ban <= 0 {
		return nil
	}
	return &p.OnExceed
}
