package service

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/lease"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service/nodetest"
)

// replicated is one state machine shared by several nodes (fsmNode): the
// log of a cluster whose replicas all agree, driven in-process, with the
// leader's time moved by the test.
type (
	replicated = nodetest.Log
	fsmNode    = nodetest.Node
)

func newReplicated(t *testing.T) *replicated {
	return nodetest.NewLog(t, time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
}

// clock is a settable local clock for the lease tables.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func leasedServices(t *testing.T, r *replicated, n int, c *clock) []*Service {
	var ss []*Service
	for i := 0; i < n; i++ {
		// A return ends a strict wait, not StrictWait: no timing in the tests.
		s := New(DepsOf(r.Node(string(rune('a'+i)))), Config{leases: lease.Options{Now: c.now, StrictWait: 10 * time.Second}})
		t.Cleanup(func() { s.CloseLeases(context.Background()) })
		ss = append(ss, s)
	}
	return ss
}

// waitGrants sends the grants and returns the lease tables queued and waits
// for their answers (and for a flush the background flusher has in flight),
// so the next check sees them in place: the tests do not depend on timing.
func waitGrants(ss ...*Service) {
	for _, s := range ss {
		s.leases.Flush()
	}
}

func peekRemaining(t *testing.T, s *Service) int64 {
	t.Helper()
	res, e := s.Peek(context.Background(), &CheckRequest{Key: "k", Policy: "daily"})
	if e != nil {
		t.Fatal(e)
	}
	return res.Decision.Remaining
}

// TestLeasedChecksExact: three nodes check one key of a leased daily quota
// round robin. Most checks are answered from leases, far fewer entries reach
// the log than checks, the allowed total never exceeds the limit, and once
// every node gives its leases back the key's remaining is exactly the limit
// minus what was allowed.
func TestLeasedChecksExact(t *testing.T) {
	// Within the quota: checks answered from leases, few entries.
	t.Run("busy", func(t *testing.T) { leasedRoundRobin(t, 100_000, 1500, true) })
	// Past it: never more than the limit, and exact at the end.
	t.Run("exhausted", func(t *testing.T) { leasedRoundRobin(t, 300, 1000, false) })
}

func leasedRoundRobin(t *testing.T, limit, checks int, busy bool) {
	r := newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	ss := leasedServices(t, r, 3, c)
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: int64(limit), Calendar: "day"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	pol := fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 100_000, MaxTTL: time.Minute}}
	if err := ss[0].deps.Policies.PutPolicy(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	entries := r.Entries()
	allowed := 0
	for i := 0; i < checks; i++ {
		s := ss[i%3]
		res, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1})
		if e != nil {
			t.Fatal(e)
		}
		if Allowed(&res.Decision) {
			allowed++
		}
		if allowed > limit {
			t.Fatalf("check %d: %d allowed, limit %d", i, allowed, limit)
		}
		waitGrants(s) // deterministic: a grant asked for is in place before the next check
	}
	var answered uint64
	for _, s := range ss {
		answered += s.LeaseStats().Answered
	}
	if busy && answered < uint64(checks)*9/10 {
		t.Fatalf("only %d of %d checks answered from leases", answered, checks)
	}
	if n := r.Entries() - entries; busy && n > checks/20 {
		t.Fatalf("%d log entries for %d checks", n, checks)
	}
	if !busy && allowed != limit {
		// Under steady round robin every node spends what it leased:
		// nothing stays stuck in a lease while the others refuse.
		t.Fatalf("%d of %d allowed with more checks than the limit", allowed, limit)
	}
	for _, s := range ss {
		s.CloseLeases(context.Background())
	}
	if got := peekRemaining(t, ss[0]); got != int64(limit-allowed) {
		t.Fatalf("after every lease went back: remaining %d, want %d - %d allowed", got, limit, allowed)
	}
	t.Logf("%d checks, %d allowed, %d from leases, %d log entries", checks, allowed, answered, r.Entries()-entries)
}

// TestLeaseDeadline: a lease is not spent once its local deadline (sent +
// valid) has passed, and what it did not spend goes back.
func TestLeaseDeadline(t *testing.T) {
	r := newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	s := leasedServices(t, r, 1, c)[0]
	spec, _ := algo.Config{Algorithm: "token_bucket", Limit: 100, Window: "1s"}.Spec()
	if err := s.deps.Policies.PutPolicy(context.Background(), fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	check := func() {
		if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil {
			t.Fatal(e)
		}
		waitGrants(s)
	}
	check()
	check() // the second exact check takes a lease
	if st := s.LeaseStats(); st.Taken != 1 {
		t.Fatalf("stats %+v, want one lease", st)
	}
	check()
	if st := s.LeaseStats(); st.Answered != 1 {
		t.Fatalf("stats %+v, want one check from the lease", st)
	}
	c.add(time.Second) // the lease's deadline
	before := r.Entries()
	if res, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil || !res.Decision.Allowed {
		t.Fatal(e)
	}
	waitGrants(s)
	if st := s.LeaseStats(); st.Answered != 1 || st.Returned != 1 {
		t.Fatalf("stats %+v: a check was answered from an expired lease, or it was not returned", st)
	}
	if r.Entries() == before {
		t.Fatal("the check after the deadline did not go through the log")
	}
}

// TestLeaseRevokedOnPolicyChange: a node drops its leases when it sees the
// policy change, and the exact paths never touch them.
func TestLeaseRevokedOnPolicyChange(t *testing.T) {
	r := newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	s := leasedServices(t, r, 1, c)[0]
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}.Spec()
	pol := fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: time.Minute}}
	if err := s.deps.Policies.PutPolicy(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil {
			t.Fatal(e)
		}
		waitGrants(s)
	}
	if st := s.LeaseStats(); st.Answered != 1 {
		t.Fatalf("stats %+v", st)
	}
	// request_id, peeks and check/all go through the log.
	if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1, RequestID: "r1"}); e != nil {
		t.Fatal(e)
	}
	if _, e := s.CheckAll(context.Background(), []CheckRequest{{Key: "k", Policy: "daily", Cost: 1}}, ""); e != nil {
		t.Fatal(e)
	}
	// 2 exact + 1 leased + 1 request_id + 1 all = 5 allowed; the lease of 49 holds 48 more.
	if got := peekRemaining(t, s); got != 100-2-49-2 { // 10% of 98 leased
		t.Fatalf("remaining %d with a lease of 50 outstanding", got)
	}
	if st := s.LeaseStats(); st.Answered != 1 {
		t.Fatalf("an exact path used the lease: %+v", st)
	}
	pol.Spec.Limit = 200
	if err := s.deps.Policies.PutPolicy(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil {
		t.Fatal(e)
	}
	waitGrants(s)
	if st := s.LeaseStats(); st.Revoked != 1 || st.Returned != 1 {
		t.Fatalf("after a policy change: %+v", st)
	}
	if got := peekRemaining(t, s); got != 200-6 {
		t.Fatalf("remaining %d after the lease went back, want %d", got, 200-6)
	}
}

// TestLeaseReturnedBeforeReset: a reset through this node gives the key's
// lease back first, so the renewed budget is whole.
func TestLeaseReturnedBeforeReset(t *testing.T) {
	r := newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	s := leasedServices(t, r, 1, c)[0]
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}.Spec()
	if err := s.deps.Policies.PutPolicy(context.Background(), fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil {
			t.Fatal(e)
		}
		waitGrants(s)
	}
	if st := s.LeaseStats(); st.Answered != 1 || st.Held != 1 {
		t.Fatalf("stats %+v", st)
	}
	if e := s.ResetKey(context.Background(), &CheckRequest{Key: "k", Policy: "daily"}); e != nil {
		t.Fatal(e)
	}
	if st := s.LeaseStats(); st.Returned != 1 || st.Held != 0 {
		t.Fatalf("after the reset: %+v", st)
	}
	if got := peekRemaining(t, s); got != 100 {
		t.Fatalf("remaining %d after the reset, want the whole 100", got)
	}
}

// leaseAll sets up two nodes and a key of limit 100 per hour whose whole
// remaining budget node b then holds in a lease (share 1, max_ttl 1m), with
// strict as given.
func leaseAll(t *testing.T, strict bool) (r *replicated, a, b *Service) {
	r = newReplicated(t)
	c := &clock{t: time.Unix(1000, 0)}
	ss := leasedServices(t, r, 2, c)
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"}.Spec()
	pol := fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 1_000_000, MaxTTL: time.Minute, NoStrict: !strict}}
	if err := ss[0].deps.Policies.PutPolicy(context.Background(), pol); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // two exact checks, the lease of 98, one check from it
		if res, e := ss[1].Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil || !res.Decision.Allowed {
			t.Fatalf("check %d on b: %+v %v", i, res, e)
		}
		waitGrants(ss[1])
	}
	if st := ss[1].LeaseStats(); st.Taken != 1 || st.Answered != 1 {
		t.Fatalf("b: %+v", st)
	}
	return r, ss[0], ss[1]
}

// TestLeasedRefusalRetryAfter: without strict, a node with no lease is
// refused while another holds everything left, and its retry_after is when
// that lease ends at the latest (its holder gives back by then), not the
// window's end an hour away.
func TestLeasedRefusalRetryAfter(t *testing.T) {
	_, a, _ := leaseAll(t, false)
	res, e := a.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1})
	if e != nil {
		t.Fatal(e)
	}
	d := res.Decision
	if d.Allowed || !d.LeasedElsewhere || d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
		t.Fatalf("refusal with 97 units leased on b: %+v, want retry_after within the lease's minute", d)
	}
}

// TestLeaseStrictRecall: with strict (the default), the same refusal makes b
// give its lease back and is tried again: a is allowed. b then takes no new
// lease for a while, and once the key is truly spent a refusal says no lease
// is outstanding.
func TestLeaseStrictRecall(t *testing.T) {
	_, a, b := leaseAll(t, true)
	res, e := a.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1})
	if e != nil || !res.Decision.Allowed {
		t.Fatalf("strict check on a while b holds 97 unspent: %+v %v", res.Decision, e)
	}
	if st := b.LeaseStats(); st.Recalled != 1 || st.Held != 1 {
		t.Fatalf("b after the recall: %+v", st)
	}
	if got := peekRemaining(t, a); got != 100-3-1 {
		t.Fatalf("remaining %d after b gave back, want %d", got, 100-4)
	}
	spent := 4
	for ; spent < 100; spent++ {
		s := []*Service{a, b}[spent%2]
		if res, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil || !res.Decision.Allowed {
			t.Fatalf("check %d: %+v %v", spent, res.Decision, e)
		}
		waitGrants(s)
	}
	for _, s := range []*Service{a, b} {
		res, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1})
		if e != nil || res.Decision.Allowed || res.Decision.LeasedElsewhere {
			t.Fatalf("past the limit: %+v %v", res.Decision, e)
		}
	}
}

// BenchmarkLeasedCheck: a check answered from a lease, through Service.Check
// (validation, the lease table, the observer), the node-side share of a
// leased check's CPU.
func BenchmarkLeasedCheck(b *testing.B) {
	r := newReplicated(&testing.T{})
	s := New(DepsOf(r.Node("a")), Config{})
	defer s.CloseLeases(context.Background())
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000_000, Window: "24h"}.Spec()
	if err := s.deps.Policies.PutPolicy(context.Background(), fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: 10 * time.Minute}}); err != nil {
		b.Fatal(err)
	}
	req := &CheckRequest{Key: "k", Policy: "daily", Cost: 1}
	for i := 0; i < 3; i++ {
		if _, e := s.Check(context.Background(), req); e != nil {
			b.Fatal(e)
		}
		waitGrants(s)
	}
	before := s.LeaseStats().Answered
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, e := s.Check(context.Background(), req); e != nil {
			b.Fatal(e)
		}
	}
	b.StopTimer()
	if got := s.LeaseStats().Answered - before; got != uint64(b.N) {
		b.Fatalf("%d of %d checks from the lease", got, b.N)
	}
}

// TestLeaseGivenBackBeforeExpiry: a lease stops being spent leaseReturnLead
// before its deadline and goes back then, while the leader still has it:
// its unspent units are credited (a return after the expiry credits
// nothing, which lost a slow key's leases whole).
func TestLeaseGivenBackBeforeExpiry(t *testing.T) {
	r, s, c, check := dailyLeased(t, 100)
	check()
	check() // takes a lease of 49 (half of 98), valid 2 s
	check() // from it
	if st := s.LeaseStats(); st.Answered != 1 || st.Taken != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Both clocks move 1.6 s: past the lease's end (2 s - 500 ms), before
	// its expiry on the leader.
	c.add(1600 * time.Millisecond)
	r.Advance(1600 * time.Millisecond)
	check() // through the log; the lease goes back (and a new one is asked for)
	if st := s.LeaseStats(); st.Answered != 1 || st.Returned != 1 {
		t.Fatalf("stats %+v: the lease was spent past its end, or not given back", st)
	}
	s.CloseLeases(context.Background())
	if got := peekRemaining(t, s); got != 100-4 {
		t.Fatalf("remaining %d after every lease went back, want %d: the return was not credited", got, 100-4)
	}
}

// TestLeaseRefillHalfway: a lease barely spent is refilled once half of the
// time it may be spent has passed, not before (each early refill is a grant
// entry and a return of the lease it replaces).
func TestLeaseRefillHalfway(t *testing.T) {
	_, s, c, check := dailyLeased(t, 1000)
	check()
	check() // a lease of 499, spent until 1.5 s (2 s less the return lead), refilled from 0.75 s
	c.add(700 * time.Millisecond)
	check()
	if st := s.LeaseStats(); st.Taken != 1 || st.Answered != 1 {
		t.Fatalf("at 0.7 s: %+v, want no refill yet", st)
	}
	c.add(100 * time.Millisecond)
	check()
	if st := s.LeaseStats(); st.Taken != 2 || st.Answered != 2 {
		t.Fatalf("at 0.8 s: %+v, want the refill", st)
	}
}

// dailyLeased is one service on replicated node r with a hand-set clock and
// policy "daily" (fixed window of limit per hour, leases of half of what
// remains for 2 s); check makes one allowed check of key "k" and waits for
// the grants it set off.
func dailyLeased(t *testing.T, limit int64) (r *replicated, s *Service, c *clock, check func()) {
	t.Helper()
	return dailyLeasedOver(t, limit, nil)
}

// dailyLeasedOver is dailyLeased with the node wrapped by wrap (nil: as is).
func dailyLeasedOver(t *testing.T, limit int64, wrap func(*fsmNode) Everything) (r *replicated, s *Service, c *clock, check func()) {
	t.Helper()
	return dailyLeasedWith(t, limit, wrap, lease.Options{})
}

// dailyLeasedWith is dailyLeasedOver with the lease table tuned by o (its
// clock and strict wait are the test's).
func dailyLeasedWith(t *testing.T, limit int64, wrap func(*fsmNode) Everything, o lease.Options) (r *replicated, s *Service, c *clock, check func()) {
	t.Helper()
	r = newReplicated(t)
	c = &clock{t: time.Unix(1000, 0)}
	var n Everything = r.Node("a")
	if wrap != nil {
		n = wrap(n.(*fsmNode))
	}
	o.Now, o.StrictWait = c.now, 10*time.Second
	s = New(DepsOf(n), Config{leases: o})
	t.Cleanup(func() { s.CloseLeases(context.Background()) })
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: limit, Window: "1h"}.Spec()
	if err := s.deps.Policies.PutPolicy(context.Background(), fsm.Policy{Name: "daily", Spec: spec, Lease: algo.Lease{Share: 500_000, MaxTTL: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	check = func() {
		t.Helper()
		if res, e := s.Check(context.Background(), &CheckRequest{Key: "k", Policy: "daily", Cost: 1}); e != nil || !res.Decision.Allowed {
			t.Fatalf("%+v %v", res.Decision, e)
		}
		waitGrants(s)
	}
	return r, s, c, check
}

// failingReturns fails its first fail return rounds with an unknown outcome,
// after applying them when applied is set (an answer lost after the commit).
type failingReturns struct {
	*fsmNode
	mu      sync.Mutex
	fail    int
	applied bool
	calls   [][]fsm.LeaseReturn
}

func (n *failingReturns) ReturnLeases(ctx context.Context, rets []fsm.LeaseReturn) ([]int64, error) {
	n.mu.Lock()
	n.calls = append(n.calls, slices.Clone(rets))
	fail := n.fail > 0
	if fail {
		n.fail--
	}
	n.mu.Unlock()
	if fail {
		if n.applied {
			n.fsmNode.ReturnLeases(ctx, rets)
		}
		return nil, nodeapi.ErrOutcomeUnknown
	}
	return n.fsmNode.ReturnLeases(ctx, rets)
}

// TestLeaseReturnRetried: a return whose round failed is sent again, and
// credited once whether or not the failed round was applied (a return is
// idempotent by lease id); nothing is lost. Before, every return in flight
// when a leader died was lost.
func TestLeaseReturnRetried(t *testing.T) {
	for _, applied := range []bool{false, true} {
		var node *failingReturns
		r, s, c, check := dailyLeasedOver(t, 100, func(n *fsmNode) Everything {
			node = &failingReturns{fsmNode: n, fail: 1, applied: applied}
			return node
		})
		check()
		check()                        // takes a lease
		check()                        // from it
		c.add(1600 * time.Millisecond) // past the lease's end, before its deadline
		r.Advance(1600 * time.Millisecond)
		check()       // through the log; the lease goes back, and that round fails
		waitGrants(s) // the retry
		st := s.LeaseStats()
		node.mu.Lock()
		calls := node.calls
		node.mu.Unlock()
		if st.Returned != 1 || st.Lost != 0 || len(calls) < 2 || calls[0][0].ID != calls[1][0].ID {
			t.Fatalf("applied %v: stats %+v, return rounds %v: want the failed return sent again and returned, none lost", applied, st, calls)
		}
		s.CloseLeases(context.Background())
		if got := peekRemaining(t, s); got != 100-4 {
			t.Fatalf("applied %v: remaining %d after every lease went back, want %d (each return credited once)", applied, got, 100-4)
		}
	}
}

// failingGrants applies its first fail grant rounds and then loses their
// answers (an unknown outcome).
type failingGrants struct {
	*fsmNode
	mu   sync.Mutex
	fail int
}

func (n *failingGrants) GrantLeases(ctx context.Context, reqs []fsm.LeaseRequest) ([]fsm.LeaseGrant, error) {
	n.mu.Lock()
	fail := n.fail > 0
	if fail {
		n.fail--
	}
	n.mu.Unlock()
	gs, err := n.fsmNode.GrantLeases(ctx, reqs)
	if fail {
		return nil, nodeapi.ErrOutcomeUnknown
	}
	return gs, err
}

// TestLeaseUnknownGrantAskedBack: a grant whose answer was lost is never
// spent, and its units are asked back whole (a return credits at most the
// lease's units): the key's budget is whole again. Before, they were lost
// until the lease expired.
func TestLeaseUnknownGrantAskedBack(t *testing.T) {
	_, s, _, check := dailyLeasedOver(t, 100, func(n *fsmNode) Everything { return &failingGrants{fsmNode: n, fail: 1} })
	check()
	check()       // sets off a grant of 49: made, its answer lost
	waitGrants(s) // the return asking it back
	if st := s.LeaseStats(); st.Lost != 1 || st.Answered != 0 {
		t.Fatalf("stats %+v: want the unknown grant counted lost and never spent", st)
	}
	if got := peekRemaining(t, s); got != 100-2 {
		t.Fatalf("remaining %d, want %d: the unknown grant's units were not asked back", got, 100-2)
	}
}

// TestLeaseFlusherLingersButNotForRecall: the background flusher lets the
// grant requests of several keys gather into one entry (here it would
// linger an hour), and a recall, which a strict check elsewhere waits for,
// sends what waits at once.
func TestLeaseFlusherLingersButNotForRecall(t *testing.T) {
	r, s, _, _ := dailyLeasedWith(t, 1000, nil, lease.Options{Linger: time.Hour})
	entries := r.Entries
	start := entries()
	for _, key := range []string{"a", "b", "c"} {
		for i := 0; i < 2; i++ { // each through the log; the second sets off a grant request
			if res, e := s.Check(context.Background(), &CheckRequest{Key: key, Policy: "daily", Cost: 1}); e != nil || !res.Decision.Allowed {
				t.Fatalf("%+v %v", res.Decision, e)
			}
		}
	}
	// A key checked once has a slot and no grant: its recall only sets off
	// the flush.
	if _, e := s.Check(context.Background(), &CheckRequest{Key: "d", Policy: "daily", Cost: 1}); e != nil {
		t.Fatal(e)
	}
	s.leases.Recall("daily", "d")
	for deadline := time.Now().Add(10 * time.Second); s.LeaseStats().Taken < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a recall did not set off a flush (stats %+v): the flusher still lingers", s.LeaseStats())
		}
	}
	// Seven checks and one grant entry for the three keys (without the
	// linger: three grant entries).
	if got := entries() - start; got != 8 {
		t.Fatalf("%d entries for seven checks and three keys' grants (stats %+v), want 8: one grant entry", got, s.LeaseStats())
	}
}

// recallingGrants applies each grant and then has its key recalled, as if
// a strict refusal on another node were applied while the grant's answer
// was on its way.
type recallingGrants struct {
	*fsmNode
	s *Service
}

func (n *recallingGrants) GrantLeases(ctx context.Context, reqs []fsm.LeaseRequest) ([]fsm.LeaseGrant, error) {
	gs, err := n.fsmNode.GrantLeases(ctx, reqs)
	for _, r := range reqs {
		n.s.leases.Recall(r.Check.Policy, r.Check.Key)
	}
	return gs, err
}

// TestLeaseRecalledInFlightGoesBack: a grant answered after a recall of its
// key is given back at once, never spent: the strict check that recalled
// it waits for those units.
func TestLeaseRecalledInFlightGoesBack(t *testing.T) {
	var node *recallingGrants
	_, s, _, check := dailyLeasedOver(t, 100, func(n *fsmNode) Everything {
		node = &recallingGrants{fsmNode: n}
		return node
	})
	node.s = s
	check()
	check()       // sets off a grant of 49, recalled on its way
	waitGrants(s) // its return
	if st := s.LeaseStats(); st.Taken != 1 || st.Returned != 1 || st.Answered != 0 {
		t.Fatalf("stats %+v: want the grant taken and given straight back", st)
	}
	if got := peekRemaining(t, s); got != 100-2 {
		t.Fatalf("remaining %d, want %d: the recalled grant was kept", got, 100-2)
	}
}
