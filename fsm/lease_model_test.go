package fsm

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// The model of leases: several simulated nodes check one key under a
// fixed-window policy with a lease option, through the real state machine.
// A node spends from a lease it holds while its deadline (the grant's time +
// Valid, on the one clock of the model) has not passed, and otherwise checks
// through the log. Between checks, any of: grants, repeated grant requests,
// returns (honest and forged), late returns and repeated grant requests of
// expired leases (a holder whose returns failed through an election),
// node crashes (unspent units lost), policy changes and key resets (each
// node either drops its leases or, partitioned, keeps spending them), and
// time passing over window boundaries.
//
// Checked after every step:
//   - over-admission: the units allowed in a window since its last reset
//     never exceed the largest limit in force during that time;
//   - exact accounting: while no reset happened in the current window, the
//     state's count is exactly what was allowed + what crashed or dropped
//     holders lost + what live leases hold unspent. So under-admission in a
//     window is exactly the lost units plus what is still held;
//   - a return credits exactly the unspent units of a live lease, and
//     nothing for a forged or repeated one; a repeated grant request
//     consumes nothing;
//   - a late return (after the lease's expiry) credits exactly its unspent
//     units (moved back out of lost) while within LeaseReturnGrace of the
//     expiry, in the lease's window, and not across a reset that came
//     after the expiry; otherwise nothing. A repeated grant request then
//     answers the same units with Valid 0 and consumes nothing;
//   - a refusal says leased elsewhere only while a lease is outstanding
//     (leases in their grace are not);
//   - a policy change is acknowledged when its answer's LeaseFence.Wait
//     has passed (at once without one), and from then on, until the next
//     change, the units allowed in a window (since its last reset) never
//     exceed the changed limit, though partitioned holders go on spending
//     the leases they hold without returning them; a repeated put while a
//     stricter change is pending waits as well.
type leaseModel struct {
	t      *rapid.T
	f      *FSM
	next   uint64
	now    int64
	window int64
	policy Policy
	nodes  [3][]*modelLease
	nextID uint64
	// late are the expired leases each node still knows of (their unspent
	// units are in lost until a late return credits them); ghosts are
	// the deadlines of leases dropped while live, which the record still
	// lists as outstanding until then.
	late   [3][]*modelLease
	ghosts []int64

	epoch       int                // resets so far
	allowed     map[[2]int64]int64 // (window start, epoch) → units allowed
	maxLimit    map[[2]int64]int64 // (window start, epoch) → largest limit in force
	carried     map[[2]int64]int64 // (window start, epoch) → unspent on leases kept across the reset
	lost        map[int64]int64    // window start → units lost (crash, drop, expiry)
	resetWindow map[int64]bool     // windows in which a reset happened

	// The last policy change: acknowledged at ackAt (pending while
	// ackAt > now); once acknowledged, ackAllowed counts the units allowed
	// per (window start, epoch) after it, bound by ackLimit.
	ackAt      int64
	ackLimit   int64
	acked      bool
	ackAllowed map[[2]int64]int64
}

// putPolicy applies a policy change and notes when it is acknowledged: at
// once, or after the wait its answer names.
func (m *leaseModel) putPolicy(p Policy) {
	r := m.apply(EncodePutPolicy(p))
	var wait time.Duration
	switch v := r.(type) {
	case nil:
	case LeaseFence:
		if v.Policy != p.Name || v.Wait <= 0 {
			m.t.Fatalf("put policy answered %+v", v)
		}
		wait = v.Wait
	default:
		m.t.Fatalf("put policy: %v", r)
	}
	// A repeated put may be acknowledged at once when the leases before
	// the change have ended by the log's time: the check in admit says
	// whether that was too early.
	m.ackAt, m.ackLimit, m.acked = m.now+int64(wait), p.Spec.Limit, false
	m.ack()
}

// ack acknowledges the last change once its wait has passed.
func (m *leaseModel) ack() {
	if !m.acked && m.ackAt > 0 && m.now >= m.ackAt {
		m.acked = true
		m.ackAllowed = map[[2]int64]int64{}
	}
}

type modelLease struct {
	id                   uint64
	units, spent         int64
	deadline, windowFrom int64
	// void: expired before a key reset, which dropped it from the record.
	void bool
}

const modelKey = "k"

func (m *leaseModel) apply(cmd []byte) interface{} {
	rs, err := m.f.applyEntries([]*raft.Log{{Index: m.next, Term: 1, Type: raft.LogCommand, Data: cmd}})
	if err != nil {
		m.t.Fatalf("apply entry %d: %v", m.next, err)
	}
	m.next++
	return rs[0]
}

func (m *leaseModel) start(t int64) int64 { return t - t%m.window }

func (m *leaseModel) cur() [2]int64 { return [2]int64{m.start(m.now), int64(m.epoch)} }

func (m *leaseModel) admit(units int64) {
	c := m.cur()
	m.allowed[c] += units
	if m.acked {
		if m.ackAllowed[c] += units; m.ackAllowed[c] > m.ackLimit {
			m.t.Fatalf("%d allowed in window %d (epoch %d) after the change to limit %d was acknowledged at %d (now %d)",
				m.ackAllowed[c], c[0], c[1], m.ackLimit, m.ackAt, m.now)
		}
	}
	// A reset renews the budget but cannot recall what partitioned holders
	// still hold (granted under the limit before it, perhaps a higher one):
	// those units count in the new budget, unless they alone exceed it.
	if bound := max(m.maxLimit[c], m.carried[c]); m.allowed[c] > bound {
		m.t.Fatalf("over-admission: %d allowed in window %d (epoch %d), limit at most %d, %d carried across the reset",
			m.allowed[c], c[0], c[1], m.maxLimit[c], m.carried[c])
	}
}

func (m *leaseModel) noteLimit() {
	c := m.cur()
	m.maxLimit[c] = max(m.maxLimit[c], m.policy.Spec.Limit)
}

// count reads the key's stored count in the current window.
func (m *leaseModel) count() int64 {
	key := append([]byte{'p', byte(len(m.policy.Name))}, m.policy.Name+modelKey...)
	var n int64
	err := m.f.store.View(func(tx *persist.Tx) error {
		st, err := tx.State(key)
		if err != nil || !st.Found {
			return err
		}
		b := st.Data[1:]
		start, k := binary.Uvarint(b)
		c, _ := binary.Uvarint(b[k:])
		if int64(start) == m.start(m.now) {
			n = int64(c)
		}
		return nil
	})
	if err != nil {
		m.t.Fatal(err)
	}
	return n
}

func (m *leaseModel) checkAccounting() {
	w := m.start(m.now)
	if m.resetWindow[w] {
		return
	}
	var held, allowed int64
	for _, ls := range m.nodes {
		for _, l := range ls {
			if l.windowFrom == w {
				held += l.units - l.spent
			}
		}
	}
	for c, n := range m.allowed {
		if c[0] == w {
			allowed += n
		}
	}
	if got, want := m.count(), allowed+m.lost[w]+held; got != want {
		m.t.Fatalf("window %d: stored count %d, want allowed %d + lost %d + held %d", w, got, allowed, m.lost[w], held)
	}
}

// expire drops leases whose deadline has passed: what they did not spend
// is lost, unless a late return credits it within the grace.
func (m *leaseModel) expire() {
	for i, ls := range m.late {
		kept := ls[:0]
		for _, l := range ls {
			if m.now < l.deadline+int64(LeaseReturnGrace) {
				kept = append(kept, l)
			}
		}
		m.late[i] = kept
	}
	ghosts := m.ghosts[:0]
	for _, g := range m.ghosts {
		if m.now < g {
			ghosts = append(ghosts, g)
		}
	}
	m.ghosts = ghosts
	for i, ls := range m.nodes {
		kept := ls[:0]
		for _, l := range ls {
			if m.now >= l.deadline {
				m.lost[l.windowFrom] += l.units - l.spent
				m.late[i] = append(m.late[i], l)
				continue
			}
			if m.start(m.now) != l.windowFrom {
				m.t.Fatalf("lease %d outlived its window: deadline %d, now %d", l.id, l.deadline, m.now)
			}
			kept = append(kept, l)
		}
		m.nodes[i] = kept
	}
}

// checkRefusal: a refusal while a live lease is outstanding says so, and its
// retry_after is no later than the first live lease's deadline (when its
// units come back or are lost), not the window's end.
func (m *leaseModel) checkRefusal(d Decision) {
	first := int64(-1)
	for _, ls := range m.nodes {
		for _, l := range ls {
			if first < 0 || l.deadline < first {
				first = l.deadline
			}
		}
	}
	if d.RetryAfter == algo.Never {
		return
	}
	if first < 0 {
		// No live lease the model holds; the record may still list
		// dropped ones (ghosts), but none in their grace counts.
		if d.LeasedElsewhere && len(m.ghosts) == 0 {
			m.t.Fatalf("refused as leased elsewhere with no lease outstanding (now %d, retry after %v)", m.now, d.RetryAfter)
		}
		return
	}
	if !d.LeasedElsewhere || int64(d.RetryAfter) > first-m.now {
		m.t.Fatalf("refused with a lease outstanding until %d (now %d): leased elsewhere %v, retry after %v",
			first, m.now, d.LeasedElsewhere, d.RetryAfter)
	}
}

func (m *leaseModel) drop(i int) {
	for _, l := range m.nodes[i] {
		m.lost[l.windowFrom] += l.units - l.spent
		m.ghosts = append(m.ghosts, l.deadline)
	}
	m.nodes[i] = nil
	m.late[i] = nil // what a crashed node knew of its expired leases is gone too
}

// lateAction is a late return or repeated grant request, by node i, of a
// lease of its that expired (its returns failed, say, through a leader's
// election): credited within the grace, in the lease's window, unless a
// reset dropped it.
func (m *leaseModel) lateAction(i int) {
	if len(m.late[i]) == 0 {
		return
	}
	k := rapid.IntRange(0, len(m.late[i])-1).Draw(m.t, "late lease")
	l := m.late[i][k]
	// Still in the record: in its grace, not dropped by a reset, and in
	// its window (after it no return could credit it: pruned).
	inGrace := !l.void && m.now < l.deadline+int64(LeaseReturnGrace) && m.start(m.now) == l.windowFrom
	unspent := l.units - l.spent
	if rapid.Bool().Draw(m.t, "late repeat") {
		if !inGrace {
			return // the record has forgotten it: a fresh grant (not modelled)
		}
		before := m.count()
		if g := m.grant(i, l.id); g.Units != l.units || g.Valid != 0 || m.count() != before {
			m.t.Fatalf("repeated grant of an expired lease in its grace: %d units valid %v (had %d), count %d → %d",
				g.Units, g.Valid, l.units, before, m.count())
		}
		return
	}
	want := int64(0)
	if inGrace {
		want = unspent
	}
	got := m.ret(i, l.id, unspent)
	if got != want {
		m.t.Fatalf("late return of %d unspent (deadline %d, now %d, grace %v, void %v, window %d → %d) credited %d, want %d",
			unspent, l.deadline, m.now, LeaseReturnGrace, l.void, l.windowFrom, m.start(m.now), got, want)
	}
	m.lost[l.windowFrom] -= got
	m.late[i] = append(m.late[i][:k], m.late[i][k+1:]...)
	if got := m.ret(rapid.IntRange(0, len(m.nodes)-1).Draw(m.t, "late again"), l.id, l.units); got != 0 {
		m.t.Fatalf("a second late return credited %d", got)
	}
}

func (m *leaseModel) grant(i int, id uint64) LeaseGrant {
	r := m.apply(EncodeGrantLease(nil, m.now, nodeName(i), []LeaseRequest{{ID: id, Check: Check{Key: modelKey, Policy: m.policy.Name}}}))
	gs, ok := r.([]LeaseGrant)
	if !ok || len(gs) != 1 {
		m.t.Fatalf("grant response %T %v", r, r)
	}
	return gs[0]
}

func (m *leaseModel) ret(i int, id uint64, unspent int64) int64 {
	r := m.apply(EncodeReturnLease(nil, m.now, nodeName(i), []LeaseReturn{{ID: id, Check: Check{Key: modelKey, Policy: m.policy.Name}, Unspent: unspent}}))
	ns, ok := r.([]int64)
	if !ok || len(ns) != 1 {
		m.t.Fatalf("return response %T %v", r, r)
	}
	return ns[0]
}

func nodeName(i int) string { return string(rune('a' + i)) }

func genLeasePolicy(t *rapid.T, a algo.Algorithm, window int64) Policy {
	return Policy{
		Name: "q",
		Spec: algo.Spec{Algorithm: a, Limit: rapid.Int64Range(1, 40).Draw(t, "limit"), Window: time.Duration(window)},
		Lease: algo.Lease{
			Share:  rapid.SampledFrom([]int64{1, 100_000, 250_000, 500_000, 1_000_000}).Draw(t, "share"),
			MaxTTL: time.Duration(rapid.Int64Range(1, 3*window).Draw(t, "max_ttl")),
		},
	}
}

// TestLeaseModel runs the model for fixed windows and for sliding window
// counters, whose state's current count is accounted the same way (the
// previous window's weight only refuses more).
func TestLeaseModel(t *testing.T) {
	t.Run("fixed_window", func(t *testing.T) { runLeaseModel(t, algo.FixedWindow) })
	t.Run("sliding_window", func(t *testing.T) { runLeaseModel(t, algo.SlidingWindow) })
}

func runLeaseModel(t *testing.T, alg algo.Algorithm) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		f, err := Open(filepath.Join(dir, "fsm"+time.Duration(run).String()+".db"), Options{})
		if err != nil {
			rt.Fatal(err)
		}
		defer f.Close()
		m := &leaseModel{
			t: rt, f: f, next: 1, now: t0,
			// A window shorter and one longer than the grace, so late
			// returns are tried in their window after the grace too.
			window:  rapid.SampledFrom([]int64{10 * sec, 100 * sec}).Draw(rt, "window"),
			allowed: map[[2]int64]int64{}, maxLimit: map[[2]int64]int64{}, carried: map[[2]int64]int64{},
			lost: map[int64]int64{}, resetWindow: map[int64]bool{},
		}
		m.policy = genLeasePolicy(rt, alg, m.window)
		if r := m.apply(EncodePutPolicy(m.policy)); r != nil {
			rt.Fatalf("put policy: %v", r)
		}
		m.noteLimit()
		steps := rapid.IntRange(1, 120).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			i := rapid.IntRange(0, len(m.nodes)-1).Draw(rt, "node")
			switch rapid.IntRange(0, 10).Draw(rt, "action") {
			case 0, 1, 2: // a check
				cost := rapid.Int64Range(1, 3).Draw(rt, "cost")
				spent := false
				for _, l := range m.nodes[i] {
					if l.units-l.spent >= cost {
						l.spent += cost
						m.admit(cost)
						spent = true
						break
					}
				}
				if !spent {
					r := m.apply(EncodeCheck(nil, m.now, 0, []Op{single(modelKey, m.policy.Name, cost)}))
					if res := r.([]Result)[0]; res.Err != nil {
						rt.Fatal(res.Err)
					} else if res.Allowed {
						m.admit(cost)
					} else {
						m.checkRefusal(res.Decisions[0])
					}
				}
			case 3, 4: // a grant
				m.nextID++
				before := m.count()
				g := m.grant(i, m.nextID)
				if g.Err != nil {
					rt.Fatalf("grant: %v", g.Err)
				}
				// For a sliding window the previous window's weight
				// takes its part too: remaining is then an upper bound.
				remaining := max(m.policy.Spec.Limit-before, 0)
				sliding := alg == algo.SlidingWindow
				if g.Units == 0 {
					if remaining > 0 && !sliding || g.RetryAfter <= 0 {
						rt.Fatalf("no grant with %d remaining (retry after %v)", remaining, g.RetryAfter)
					}
					break
				}
				if want := max(1, remaining*m.policy.Lease.Share/algo.LeaseShareScale); g.Units != want && !sliding || g.Units > remaining {
					rt.Fatalf("granted %d of %d remaining at share %d, want %d", g.Units, remaining, m.policy.Lease.Share, want)
				}
				end := m.start(m.now) + m.window
				if g.Valid <= 0 || g.Valid > m.policy.Lease.MaxTTL || m.now+int64(g.Valid) > end || g.Window != m.start(m.now) {
					rt.Fatalf("grant valid %v window %d at %d (window end %d, max_ttl %v)", g.Valid, g.Window, m.now, end, m.policy.Lease.MaxTTL)
				}
				m.nodes[i] = append(m.nodes[i], &modelLease{id: m.nextID, units: g.Units, deadline: m.now + int64(g.Valid), windowFrom: g.Window})
			case 5: // a repeated grant request, or a return
				if len(m.nodes[i]) == 0 {
					break
				}
				k := rapid.IntRange(0, len(m.nodes[i])-1).Draw(rt, "lease")
				l := m.nodes[i][k]
				if rapid.Bool().Draw(rt, "repeat") {
					before := m.count()
					if g := m.grant(i, l.id); g.Units != l.units || m.count() != before {
						rt.Fatalf("repeated grant: %d units (had %d), count %d → %d", g.Units, l.units, before, m.count())
					}
					break
				}
				if got := m.ret(i, l.id, l.units-l.spent); got != l.units-l.spent {
					rt.Fatalf("return of %d unspent credited %d", l.units-l.spent, got)
				}
				m.nodes[i] = append(m.nodes[i][:k], m.nodes[i][k+1:]...)
				// Returned again (a retry), or by another node: nothing.
				if got := m.ret(rapid.IntRange(0, len(m.nodes)-1).Draw(rt, "again"), l.id, l.units); got != 0 {
					rt.Fatalf("a second return credited %d", got)
				}
			case 6: // a forged return of a lease never granted
				if got := m.ret(i, m.nextID+1+uint64(rapid.IntRange(0, 5).Draw(rt, "forged")), 1000); got != 0 {
					rt.Fatalf("a forged return credited %d", got)
				}
			case 7: // a crash, a policy change or a reset
				switch rapid.IntRange(0, 2).Draw(rt, "event") {
				case 0:
					m.drop(i)
				case 1:
					p := genLeasePolicy(rt, alg, m.window)
					m.policy = p
					m.putPolicy(p)
					if rapid.Bool().Draw(rt, "repeated put") {
						m.putPolicy(p) // a retry, say after an outcome_unknown
					}
					m.noteLimit()
					for n := range m.nodes {
						if !rapid.Bool().Draw(rt, "partitioned") {
							m.drop(n)
						}
					}
				case 2:
					if r := m.apply(EncodeResetKey(Check{Key: modelKey, Policy: m.policy.Name})); r != nil {
						rt.Fatalf("reset: %v", r)
					}
					m.epoch++
					m.noteLimit()
					// The reset drops the leases in their grace as of
					// the last time applied (the reset carries none).
					for _, ls := range m.late {
						for _, l := range ls {
							if l.deadline <= m.f.LastTime() {
								l.void = true
							}
						}
					}
					m.resetWindow[m.start(m.now)] = true
					for n := range m.nodes {
						if !rapid.Bool().Draw(rt, "partitioned") {
							m.drop(n)
						}
						for _, l := range m.nodes[n] {
							m.carried[m.cur()] += l.units - l.spent
						}
					}
				}
			case 10: // a late return or repeated grant request
				m.lateAction(i)
			default: // time passes
				m.now += rapid.SampledFrom([]int64{1, sec, 3 * sec, int64(LeaseReturnGrace), m.window, 2*m.window + 7}).Draw(rt, "dt")
				m.noteLimit()
			}
			m.expire()
			m.ack()
			m.checkAccounting()
		}
	})
}
