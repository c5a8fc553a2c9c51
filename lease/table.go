package lease

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Tuning of the node's lease table (one place).
const (
	// leaseAfterChecks is how many checks of a key through the log, within
	// leaseIdle of each other, make this node take a lease on it: a key
	// checked once a minute gains nothing from one. 2 leases the most
	// checks at no more leader CPU than 5 or 20 (measured: DESIGN.md).
	leaseAfterChecks = 2
	// leaseIdle: a key not checked for this long gives its leases back.
	leaseIdle = time.Second
	// leaseSweep is how often the table looks for idle and expired leases.
	leaseSweep = 250 * time.Millisecond
	// leaseRequestTimeout bounds a grant or return round.
	leaseRequestTimeout = 2 * time.Second
	// leaseBackoff is the wait after a failed grant request.
	leaseBackoff = time.Second
	// leaseFlushLinger is how long the flusher lets grant and return
	// requests gather before it sends them as one entry of each kind: 50 ms
	// writes a third of the entries of no linger, at less CPU per check
	// (measured: DESIGN.md).
	leaseFlushLinger = 50 * time.Millisecond
	// leaseReturnRetry is the wait before a failed return is sent again.
	leaseReturnRetry = 200 * time.Millisecond
	// maxLeaseSlots bounds the keys with leases on one node.
	maxLeaseSlots = 100_000
	// leaseReturnLead: a lease stops being spent this long (at most a
	// quarter of its validity) before its deadline and is given back then,
	// so that the return usually reaches the leader before the lease
	// expires there (its units are free again for other nodes at once; a
	// later return is credited only within nodeapi.LeaseReturnGrace): two
	// sweeps and a round to spare.
	leaseReturnLead = 2 * leaseSweep
	// StrictTries and DefaultStrictWait bound the strict retry (the
	// service's): a refusal while leases elsewhere are outstanding is tried
	// again after each return on the key (WatchReturns), at most this many
	// tries in all, and not after the table's StrictWait without a return.
	StrictTries       = 4
	DefaultStrictWait = 100 * time.Millisecond
)

// Stats counts the node's leases, for metrics.
type Stats struct {
	Taken    uint64 // grants received with units
	Returned uint64 // leases given back with units unspent (a return entry was applied)
	Lost     uint64 // leases whose unspent units were not given back (a failed return or grant, an expiry unreturned)
	Revoked  uint64 // leases dropped because the policy changed
	Recalled uint64 // leases given back because a strict refusal recalled them
	Answered uint64 // checks answered from a lease
	Held     int    // keys with a lease table entry now
}

type leaseKey struct{ policy, key string }

type heldLease struct {
	id    uint64
	units int64
	spent int64
	// end is when the lease stops being spent and goes back: its deadline
	// (local, monotonic: when the grant request was sent + Valid) less
	// leaseReturnLead, at most a quarter of Valid.
	end      time.Time
	deadline time.Time
	halfway  time.Time // between the grant request and end: refill from here
	resetAt  int64     // wall clock (ns): nodeapi.LeaseGrant.ResetAt
	// windowEnd is when (leader time, ns) the window the units are counted
	// in ends (0: token bucket, no window). Once this node's replica has
	// applied a later time, the log decides in the next window, and a unit
	// of this lease spent then would come on top of that window's budget
	// (a leader whose clock stepped forward rolls the window before the
	// local deadline): the lease is not spent any more.
	windowEnd int64
}

// spentLease is a lease spent to the last unit and not given back (nothing
// to credit, so no return was worth an entry): the leader's record still
// counts it as outstanding until its expiry, so a recall gives it back
// (empty) to take it out of the record.
type spentLease struct {
	id       uint64
	deadline time.Time // after it, the record no longer counts it as outstanding
}

// maxSpentLeases bounds the spent leases a slot remembers (the record holds
// at most nodeapi.MaxLeasesPerKey on a key).
const maxSpentLeases = nodeapi.MaxLeasesPerKey

func (h *heldLease) left() int64 { return h.units - h.spent }

type leaseSlot struct {
	spec      algo.Spec  // the leases were taken under this limit ...
	lease     algo.Lease // ... and this option
	cur, next *heldLease
	granting  bool
	notBefore time.Time // no grant request before
	// recalledAt is the last recall: a grant sent before it and answered
	// after it goes straight back.
	recalledAt time.Time
	lastUse    time.Time
	unleased   int64 // Remaining at the last grant
	exact      int   // checks that went through the log
	spent      []spentLease
}

// Table is one node's quota leases: the keys it holds leases on, the
// grants and returns waiting for the flusher, and the strict retries
// waiting for returns. Safe for concurrent use; its goroutines (the
// flusher and the sweeper) start with the first lease-option check and
// stop at Close.
type Table struct {
	node Node
	now  func() time.Time

	mu     sync.Mutex
	slots  map[leaseKey]*leaseSlot
	closed bool
	// Grants and returns wait here for the flusher, which sends all of
	// them in one grant entry and one return entry: the log carries a
	// few entries per flush, not two per key.
	grants  []pendingGrant
	returns []pendingReturn
	kick    chan struct{}
	flushMu sync.Mutex // one flush at a time
	start   sync.Once
	stop    chan struct{}
	done    chan struct{} // the flusher has stopped

	// waiters are the strict retries watching for a return on a key
	// (WatchReturns); Returned wakes them.
	waiters    map[leaseKey][]chan struct{}
	strictWait time.Duration // Options.StrictWait
	linger     time.Duration // Options.Linger

	taken, returned, lost, revoked, recalled, answered atomic.Uint64
	urgent                                             atomic.Bool // flush without lingering (a recall)
}

// Node is what the table needs of the node: grants and returns through
// the Raft leader, answered in order (nodeapi.LeaseRequest, LeaseGrant and
// LeaseReturn are the contract). The node tells the table of recalls and
// applied returns through its Recall and Returned (a nodeapi.LeaseHook).
type Node interface {
	GrantLeases(ctx context.Context, reqs []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error)
	ReturnLeases(ctx context.Context, rets []nodeapi.LeaseReturn) ([]int64, error)
	// LastTime is the leader time (ns) this node's replica has applied
	// (heldLease.windowEnd); 0 when unknown.
	LastTime() int64
}

// Options tunes a table; the zero value of every field selects its default.
type Options struct {
	// Now is the table's monotonic clock (default time.Now).
	Now func() time.Time
	// StrictWait is how long a strict retry waits for a return
	// (DefaultStrictWait).
	StrictWait time.Duration
	// Linger is how long the flusher lets requests gather (50 ms).
	Linger time.Duration
}

// New returns an empty table taking leases through n. Install it as the
// node's nodeapi.LeaseHook, or recalls never reach it.
func New(n Node, o Options) *Table {
	t := &Table{node: n, now: time.Now, slots: make(map[leaseKey]*leaseSlot),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		waiters: make(map[leaseKey][]chan struct{}), strictWait: DefaultStrictWait, linger: leaseFlushLinger}
	if o.Now != nil {
		t.now = o.Now
	}
	if o.StrictWait > 0 {
		t.strictWait = o.StrictWait
	}
	if o.Linger > 0 {
		t.linger = o.Linger
	}
	return t
}

// StrictWait is how long a strict retry waits for a return on its key.
func (t *Table) StrictWait() time.Duration { return t.strictWait }

type pendingGrant struct {
	k  leaseKey
	sl *leaseSlot
	id uint64
}

type pendingReturn struct {
	ret nodeapi.LeaseReturn
	// until is the lease's deadline + nodeapi.LeaseReturnGrace: after it the
	// leader has dropped the lease, and a return credits nothing, so none
	// is sent again. Within the grace a late return is still credited
	// (this node stopped spending before the deadline, so what it reports
	// unspent is final), which is what keeps a leader's election from
	// costing the units leased at the time.
	until time.Time
}

// Spend answers a check of cost under policy's lease option opt (and its
// limit spec) for key from this node's lease on the key, if it holds one
// that covers the cost; otherwise it may start taking one in the
// background and reports a miss (the caller decides through the log). A
// lease is spent only before its local deadline and never beyond its
// units; a changed spec or option drops the key's leases first.
func (t *Table) Spend(policy, key string, spec algo.Spec, opt algo.Lease, cost int64) (nodeapi.Decision, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nodeapi.Decision{}, false
	}
	k := leaseKey{policy, key}
	now := t.now()
	sl := t.slots[k]
	if sl != nil && (sl.spec != spec || sl.lease != opt) {
		t.revoked.Add(t.dropLocked(k, sl))
		sl = nil
	}
	if sl == nil {
		if len(t.slots) >= maxLeaseSlots {
			return nodeapi.Decision{}, false
		}
		sl = &leaseSlot{spec: spec, lease: opt, lastUse: now}
		t.slots[k] = sl
		t.start.Do(func() { go t.sweeper(); go t.flusher() })
	}
	if now.Sub(sl.lastUse) > leaseIdle {
		sl.exact = 0
	}
	sl.lastUse = now
	t.rotateLocked(k, sl, now)
	for _, h := range [2]*heldLease{sl.cur, sl.next} {
		if h != nil && h.left() >= cost && now.Before(h.end) && !t.rolled(h) {
			h.spent += cost
			t.answered.Add(1)
			t.refillLocked(k, sl, now)
			d := nodeapi.Decision{Decision: algo.Decision{
				Allowed:    true,
				Limit:      spec.Limit,
				Remaining:  t.heldLocked(sl) + sl.unleased,
				ResetAfter: time.Duration(max(h.resetAt-now.UnixNano(), 0)),
			}}
			return d, true
		}
	}
	sl.exact++
	if sl.exact >= leaseAfterChecks {
		t.refillLocked(k, sl, now)
	}
	return nodeapi.Decision{}, false
}

func (t *Table) heldLocked(sl *leaseSlot) int64 {
	var n int64
	if sl.cur != nil {
		n += sl.cur.left()
	}
	if sl.next != nil {
		n += sl.next.left()
	}
	return n
}

// rotateLocked gives back a current lease that expired (whatever is left)
// or is spent, and promotes the next one.
func (t *Table) rotateLocked(k leaseKey, sl *leaseSlot, now time.Time) {
	for i := 0; i < 2 && sl.cur != nil && (sl.cur.left() == 0 || !now.Before(sl.cur.end) || t.rolled(sl.cur)); i++ {
		t.retireLocked(k, sl, sl.cur, now)
		sl.cur, sl.next = sl.next, nil
	}
	if sl.next != nil && !now.Before(sl.next.end) {
		t.retireLocked(k, sl, sl.next, now)
		sl.next = nil
	}
}

// retireLocked gives back h, a lease of sl leaving the table, and
// remembers it if it was spent to the last unit (see spentLease); it also
// forgets spent leases past their deadline.
func (t *Table) retireLocked(k leaseKey, sl *leaseSlot, h *heldLease, now time.Time) {
	kept := sl.spent[:0]
	for _, sp := range sl.spent {
		if now.Before(sp.deadline) {
			kept = append(kept, sp)
		}
	}
	sl.spent = kept
	if h.left() == 0 && now.Before(h.deadline) && len(sl.spent) < maxSpentLeases {
		sl.spent = append(sl.spent, spentLease{id: h.id, deadline: h.deadline})
	}
	t.giveBackLocked(k, h, false)
}

// refillLocked starts a grant request when the key has no spare lease and
// its current one is half spent or half way to its end.
func (t *Table) refillLocked(k leaseKey, sl *leaseSlot, now time.Time) {
	if sl.granting || sl.next != nil || now.Before(sl.notBefore) {
		return
	}
	if c := sl.cur; c != nil && c.left()*2 > c.units && now.Before(c.halfway) {
		return
	}
	sl.granting = true
	t.grants = append(t.grants, pendingGrant{k: k, sl: sl, id: newLeaseID()})
	t.kickLocked()
}

func (t *Table) kickLocked() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// flusher sends what waits: the linger after the first request of a flush
// (while one flush is in flight or lingers, new requests gather for it), at
// once for a recall.
func (t *Table) flusher() {
	defer close(t.done)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		}
		// Let the requests of other keys join this one's entries: grants
		// and returns run ahead of need (a refill starts halfway through
		// a lease), so no check waits for this — except the returns of a
		// recall, which a strict check on another node waits for.
		if !t.urgent.Swap(false) {
			linger.Reset(t.linger) // go 1.23+ timers: no stale tick after Stop
		wait:
			for {
				select {
				case <-t.stop:
					return
				case <-linger.C:
					break wait
				case <-t.kick:
					if t.urgent.Swap(false) {
						linger.Stop()
						break wait
					}
				}
			}
		}
		t.Flush()
	}
}

// Flush sends the waiting returns, then the waiting grants, each kind as
// one entry per nodeapi.MaxLeaseOps.
func (t *Table) Flush() {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	grants, returns := t.grants, t.returns
	t.grants, t.returns = nil, nil
	if t.closed {
		for _, g := range grants {
			g.sl.granting = false
		}
		grants = nil // closing: take nothing more
	}
	t.mu.Unlock()
	for len(returns) > 0 {
		n := min(len(returns), nodeapi.MaxLeaseOps)
		t.sendReturns(returns[:n])
		returns = returns[n:]
	}
	for len(grants) > 0 {
		n := min(len(grants), nodeapi.MaxLeaseOps)
		t.sendGrants(grants[:n])
		grants = grants[n:]
	}
}

func (t *Table) sendReturns(rs []pendingReturn) {
	rets := make([]nodeapi.LeaseReturn, len(rs))
	for i := range rs {
		rets[i] = rs[i].ret
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseRequestTimeout)
	defer cancel()
	if _, err := t.node.ReturnLeases(ctx, rets); err != nil {
		t.retryReturns(rs)
		return
	}
	t.returned.Add(uint64(len(rets)))
}

// retryReturns queues returns whose round failed for another one after
// leaseReturnRetry. A return may be sent again whatever became of the first:
// the state machine credits a lease id once and a lease it no longer has
// not at all (fsm returnLease). Returns are lost (under-admission for the
// rest of the window) only when the lease would be gone before the next
// round — past its deadline + nodeapi.LeaseReturnGrace — or the table is
// closing. A leader's election used to cost every node's returns in flight
// this way, and with the grace it no longer costs those of leases that
// expired meanwhile.
func (t *Table) retryReturns(rs []pendingReturn) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	again := 0
	for _, r := range rs {
		if t.closed || !now.Add(leaseReturnRetry).Before(r.until) {
			t.lost.Add(1)
			continue
		}
		t.returns = append(t.returns, r)
		again++
	}
	if again > 0 {
		time.AfterFunc(leaseReturnRetry, func() {
			t.mu.Lock()
			t.kickLocked()
			t.mu.Unlock()
		})
	}
}

func (t *Table) sendGrants(ps []pendingGrant) {
	reqs := make([]nodeapi.LeaseRequest, len(ps))
	for i, p := range ps {
		reqs[i] = nodeapi.LeaseRequest{ID: p.id, Check: nodeapi.Check{Key: p.k.key, Policy: p.k.policy}}
	}
	sent := t.now() // the deadlines count from here, before the leader stamps the grants
	ctx, cancel := context.WithTimeout(context.Background(), leaseRequestTimeout)
	gs, err := t.node.GrantLeases(ctx, reqs)
	cancel()
	if err == nil && len(gs) != len(reqs) {
		err = errShortGrant
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, p := range ps {
		var g nodeapi.LeaseGrant
		if err == nil {
			g = gs[i]
		}
		t.installLocked(p, g, err, sent)
	}
}

var errShortGrant = errors.New("the node answered a different number of grants")

func (t *Table) installLocked(p pendingGrant, g nodeapi.LeaseGrant, err error, sent time.Time) {
	k, sl, id := p.k, p.sl, p.id
	sl.granting = false
	now := t.now()
	switch {
	case err != nil:
		// Nothing known: the grant may have been made. Its units are not
		// spent on a guess; they are asked back whole instead: a return
		// credits at most the lease's units, and nothing for a lease the
		// state machine does not have (fsm returnLease), and this node
		// spent none of them. (A grant committed after that return stays
		// lost until it expires.)
		t.lost.Add(1)
		sl.notBefore = now.Add(leaseBackoff)
		t.returns = append(t.returns, pendingReturn{ret: nodeapi.LeaseReturn{ID: id, Check: nodeapi.Check{Key: k.key, Policy: k.policy}, Unspent: math.MaxInt64},
			until: sent.Add(sl.lease.MaxTTL + nodeapi.LeaseReturnGrace)})
		t.kickLocked()
		return
	case g.Err != nil:
		sl.notBefore = now.Add(leaseIdle) // the policy lost its option, say: the log answers
		return
	case g.Units == 0:
		sl.unleased = 0
		sl.notBefore = now.Add(min(max(g.RetryAfter, 0), leaseIdle))
		return
	}
	t.taken.Add(1)
	spendable := g.Valid - min(g.Valid/4, leaseReturnLead)
	h := &heldLease{id: id, units: g.Units, end: sent.Add(spendable), deadline: sent.Add(g.Valid),
		halfway: sent.Add(spendable / 2), resetAt: g.ResetAt, windowEnd: leaseWindowEnd(sl.spec, g)}
	if t.closed || t.slots[k] != sl || !now.Before(h.end) {
		t.giveBackLocked(k, h, false) // dropped or closed meanwhile, or already over
		return
	}
	if !sl.recalledAt.Before(sent) {
		// Recalled while the grant was on its way: a strict check on
		// another node is waiting for this key's units.
		t.urgent.Store(true)
		t.giveBackLocked(k, h, false)
		return
	}
	sl.unleased = g.Remaining
	if sl.cur == nil {
		sl.cur = h
	} else {
		sl.next = h
	}
}

// giveBackLocked queues what h did not spend for the flusher. h is no
// longer spendable once here (the caller has taken it out of the table). A
// spent lease is given back only when always is set (a recall): the return
// then takes it out of the key's lease record, so the strict retry no longer
// counts it as outstanding.
func (t *Table) giveBackLocked(k leaseKey, h *heldLease, always bool) {
	left := h.left()
	h.spent = h.units
	if left <= 0 && !always {
		return
	}
	t.returns = append(t.returns, pendingReturn{ret: nodeapi.LeaseReturn{ID: h.id, Check: nodeapi.Check{Key: k.key, Policy: k.policy}, Unspent: left}, until: h.deadline.Add(nodeapi.LeaseReturnGrace)})
	t.kickLocked()
}

// dropLocked takes a key's leases out of the table and gives them back; it
// returns how many leases it dropped.
func (t *Table) dropLocked(k leaseKey, sl *leaseSlot) uint64 {
	var n uint64
	for _, h := range [2]*heldLease{sl.cur, sl.next} {
		if h != nil {
			t.giveBackLocked(k, h, false)
			n++
		}
	}
	sl.cur, sl.next = nil, nil
	t.returnSpentLocked(k, sl)
	delete(t.slots, k)
	return n
}

// returnSpentLocked gives back (empty) the spent leases sl remembers, so
// that the key's lease record no longer counts them: a refusal then reports
// leases outstanding only where units may really come back.
func (t *Table) returnSpentLocked(k leaseKey, sl *leaseSlot) {
	now := t.now()
	for _, sp := range sl.spent {
		if now.Before(sp.deadline) {
			t.giveBackLocked(k, &heldLease{id: sp.id}, true)
		}
	}
	sl.spent = nil
}

// Recall is the state machine's word (nodeapi.LeaseHook) that a check on the
// key was refused under a strict lease option while leases on it were
// outstanding: this node gives back every lease it holds on the key, spent
// ones included, and takes no new one for leaseIdle (the key is near its
// limit: checks are decided exactly).
func (t *Table) Recall(policy, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := leaseKey{policy, key}
	sl := t.slots[k]
	if sl == nil || t.closed {
		return
	}
	for _, h := range [2]*heldLease{sl.cur, sl.next} {
		if h != nil {
			t.giveBackLocked(k, h, true)
			t.recalled.Add(1)
		}
	}
	sl.cur, sl.next = nil, nil
	t.returnSpentLocked(k, sl)
	sl.exact = 0
	sl.recalledAt = t.now()
	sl.notBefore = sl.recalledAt.Add(leaseIdle)
	t.urgent.Store(true) // a strict check elsewhere waits for these returns
	t.kickLocked()
}

// Returned is the state machine's word (nodeapi.LeaseHook) that a return on the
// key was applied: strict retries waiting on the key try again.
func (t *Table) Returned(policy, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := leaseKey{policy, key}
	if ws := t.waiters[k]; ws != nil {
		for _, w := range ws {
			close(w)
		}
		delete(t.waiters, k)
	}
}

// WatchReturns registers a wait for the next return on the key applied on
// this node (Returned closes the channel); Unwatch undoes it.
func (t *Table) WatchReturns(policy, key string) <-chan struct{} {
	k := leaseKey{policy, key}
	w := make(chan struct{})
	t.mu.Lock()
	t.waiters[k] = append(t.waiters[k], w)
	t.mu.Unlock()
	return w
}

// Unwatch drops a wait WatchReturns registered (closed or not).
func (t *Table) Unwatch(policy, key string, w <-chan struct{}) {
	k := leaseKey{policy, key}
	t.mu.Lock()
	defer t.mu.Unlock()
	ws := t.waiters[k]
	for i := range ws {
		if ws[i] == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(t.waiters, k)
	} else {
		t.waiters[k] = ws
	}
}

// Forget drops a key's leases (giving back what they did not spend) and
// sends the returns before it answers.
func (t *Table) Forget(policy, key string) {
	t.mu.Lock()
	k := leaseKey{policy, key}
	if sl := t.slots[k]; sl != nil {
		t.dropLocked(k, sl)
	}
	t.mu.Unlock()
	t.Flush()
}

// sweep gives back expired leases and those of keys idle for leaseIdle.
func (t *Table) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for k, sl := range t.slots {
		if now.Sub(sl.lastUse) > leaseIdle && !sl.granting {
			t.dropLocked(k, sl)
			continue
		}
		t.rotateLocked(k, sl, now)
	}
}

func (t *Table) sweeper() {
	tk := time.NewTicker(leaseSweep)
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.sweep()
		}
	}
}

// Close gives every lease back and waits (at most until ctx ends) for the
// returns and the grants in flight; grants answered after the close are
// given back too.
func (t *Table) Close(ctx context.Context) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	close(t.stop)
	for k, sl := range t.slots {
		t.dropLocked(k, sl)
	}
	t.mu.Unlock()
	done := make(chan struct{})
	go func() {
		t.start.Do(func() { close(t.done) }) // never started: no flusher to wait for
		<-t.done
		t.Flush() // the returns; no flush is in flight once the flusher stopped
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Stats reports the table's counters.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	held := len(t.slots)
	t.mu.Unlock()
	return Stats{
		Taken: t.taken.Load(), Returned: t.returned.Load(), Lost: t.lost.Load(),
		Revoked: t.revoked.Load(), Recalled: t.recalled.Load(), Answered: t.answered.Load(), Held: held,
	}
}

// newLeaseID is a random lease id: unique among a node's leases, so a late
// return can never be taken for another lease's.
func newLeaseID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return binary.LittleEndian.Uint64(b[:])
}

// rolled reports a lease whose window the log has left (heldLease.windowEnd).
func (t *Table) rolled(h *heldLease) bool {
	return h.windowEnd > 0 && t.node.LastTime() >= h.windowEnd
}

// leaseWindowEnd is the end (leader time) of the window a grant's units are
// counted in: a fixed window's is its ResetAt, a sliding window's the start
// it names plus the window; a token bucket has none (0).
func leaseWindowEnd(spec algo.Spec, g nodeapi.LeaseGrant) int64 {
	switch spec.Algorithm {
	case algo.FixedWindow:
		return g.ResetAt
	case algo.SlidingWindow:
		return g.Window + int64(spec.Window)
	}
	return 0
}
