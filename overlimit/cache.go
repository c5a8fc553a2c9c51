package overlimit

import (
	"bytes"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
)

const (
	// DefaultMaxEntries bounds the number of entries when Options.MaxEntries
	// is 0. An entry costs about 120 bytes plus its limit identity and key.
	DefaultMaxEntries = 65536
	// MaxEntryBytes bounds len(LimitID.Ident)+len(key) of a cached refusal;
	// longer ones are not cached (they are decided through the log as
	// before). With MaxEntries it bounds the cache's memory: full at the
	// default, 40 MiB with keys at this bound, 11 MiB with 30-byte keys.
	MaxEntryBytes = 512
	// maxShards is the shard count of a large cache: enough that readers on
	// many cores rarely meet on one lock's cache line.
	maxShards = 16
	// minShardEntries keeps shards from being so small that CLOCK degenerates;
	// a cache below maxShards × minShardEntries entries has fewer shards.
	minShardEntries = 256
)

// LimitID identifies a limit as fsm keys its storage: a policy name
// (Policy true), or the canonical encoding of an inline spec
// (algo.AppendSpec of the validated spec, as a string). The two spaces never
// collide. Ident is a string so that the check path can pass a policy name
// and fsm a *Policy's Name without converting (and allocating); for inline
// limits both keep the string with their decoded spec.
type LimitID struct {
	Policy bool
	Ident  string
}

// Options configures New.
type Options struct {
	// MaxEntries bounds the entries held; 0 means DefaultMaxEntries. When
	// full, an insert takes the first slot the clock hand reaches whose entry
	// has expired or has not been hit since the hand last passed (CLOCK).
	MaxEntries int
}

// Observation is one check decision as the state machine applied it.
type Observation struct {
	ID       LimitID
	Key      []byte
	Spec     *algo.Spec // the limit's spec at the time of the decision
	Shadow   bool       // the limit is a policy in shadow mode
	Cost     int64      // as requested; 0 is a peek
	Now      int64      // leader time the decision was made at (after fsm's clamp)
	Decision algo.Decision
	// Uncommitted marks a decision made on tentative state that the op then
	// discarded: a check of a refused /v1/check/all op whose key an earlier
	// check of the same op had already decided. Its refusal may be due to
	// the op's own discarded consumption, so it is not cached; an allowance
	// still counts (allowed on more consumption is allowed on less).
	Uncommitted bool
}

// Cache is the over-limit cache. Lookup is safe for any number of concurrent
// goroutines; Observe, Forget, ForgetLimit and Clear may run concurrently
// with them and with each other. Observe, Forget and ForgetLimit are meant to
// be called by the one goroutine that applies log entries, in log order;
// Clear also by whatever decides the cache may no longer be trusted (the
// node's readiness loop), at any time, since dropping entries only costs
// misses.
type Cache struct {
	seedPolicy, seedSpec, seedKey maphash.Seed
	shards                        []shard
	shift                         uint // shard of a hash: h >> shift
	capacity                      int
	labels                        labels
}

type shard struct {
	mu    sync.RWMutex
	index map[uint64]int32 // hash → slot; a slot is live iff indexed
	slots []slot           // cap is the shard's capacity; allocated on first insert
	free  []int32          // released slots below len(slots)
	hand  int              // CLOCK hand

	live           atomic.Int64
	evictions      atomic.Uint64
	contradictions atomic.Uint64
	_              [64]byte // keeps the next shard's lock off this cache line
}

// slot is one entry. Fields other than ref change only under the shard's
// write lock; ref is set by readers under the read lock.
type slot struct {
	hash     uint64
	buf      []byte // ident ‖ key, reused by the next entry in this slot
	identLen int
	policy   bool
	live     bool
	ref      atomic.Bool // hit since the clock hand last passed
	label    *label

	minCost   int64 // requests of at least this (effective) cost are refused...
	expiry    int64 // ...before this leader time
	limit     int64 // from the latest decision observed for the key
	remaining int64
	resetAt   int64
}

// New returns an empty cache.
func New(opts Options) *Cache {
	n := opts.MaxEntries
	if n <= 0 {
		n = DefaultMaxEntries
	}
	shards := 1
	for shards < maxShards && n/(shards*2) >= minShardEntries {
		shards *= 2
	}
	c := &Cache{
		seedPolicy: maphash.MakeSeed(),
		seedSpec:   maphash.MakeSeed(),
		seedKey:    maphash.MakeSeed(),
		shards:     make([]shard, shards),
		shift:      uint(64 - bits.TrailingZeros(uint(shards))),
		capacity:   (n / shards) * shards,
	}
	for i := range c.shards {
		c.shards[i].index = make(map[uint64]int32)
	}
	c.labels.init(shards)
	return c
}

// Capacity is the most entries the cache holds.
func (c *Cache) Capacity() int { return c.capacity }

// hash combines two independent hashes: no buffer to build, and a collision
// (at the identity/key boundary or otherwise) only costs a miss, because
// slots compare the full identity and key. keyHash is maphash.Bytes or
// maphash.String of the key under seedKey (the two agree).
func (c *Cache) hash(id LimitID, keyHash uint64) uint64 {
	seed := c.seedSpec
	if id.Policy {
		seed = c.seedPolicy
	}
	return maphash.String(seed, id.Ident) ^ bits.RotateLeft64(keyHash, 17)
}

func (c *Cache) hashBytes(id LimitID, key []byte) uint64 {
	return c.hash(id, maphash.Bytes(c.seedKey, key))
}

func (c *Cache) shardOf(h uint64) (*shard, int) {
	if c.shift >= 64 {
		return &c.shards[0], 0
	}
	i := int(h >> c.shift)
	return &c.shards[i], i
}

func (e *slot) matchesID(id LimitID) bool {
	return e.policy == id.Policy && e.identLen == len(id.Ident) && string(e.buf[:e.identLen]) == id.Ident
}

func (e *slot) matches(id LimitID, key []byte) bool {
	return e.matchesID(id) && bytes.Equal(e.buf[e.identLen:], key)
}

// Lookup answers a check of cost under limit id for key at time now (ns,
// this node's best estimate of leader time: see DESIGN.md) from the cache.
// ok is true only when the state machine is certain to refuse it: an entry
// for (id, key) refuses requests of cost ≥ its smallest refused cost
// (a peek counts as cost 1, as in algo) and now is before its expiry. The
// decision is then a refusal with RetryAfter = expiry − now (for a cost above
// the cached one a lower bound of the true retry time) and Limit, Remaining
// and ResetAfter as of the latest decision observed for the key. A negative
// cost is never answered. Lookup does not allocate.
func (c *Cache) Lookup(id LimitID, key []byte, cost, now int64) (algo.Decision, bool) {
	return c.lookup(id, c.hashBytes(id, key), key, "", false, cost, now)
}

// LookupString is Lookup for a key held as a string (the check path's).
func (c *Cache) LookupString(id LimitID, key string, cost, now int64) (algo.Decision, bool) {
	return c.lookup(id, c.hash(id, maphash.String(c.seedKey, key)), nil, key, true, cost, now)
}

// lookup finds the entry of hash h for id and the key, given as kb or (str)
// ks: one body for both key types, without converting either.
func (c *Cache) lookup(id LimitID, h uint64, kb []byte, ks string, str bool, cost, now int64) (algo.Decision, bool) {
	if cost < 0 {
		return algo.Decision{}, false
	}
	s, si := c.shardOf(h)
	s.mu.RLock()
	i, ok := s.index[h]
	if !ok {
		s.mu.RUnlock()
		return algo.Decision{}, false
	}
	e := &s.slots[i]
	match := e.matchesID(id)
	if str {
		match = match && string(e.buf[e.identLen:]) == ks
	} else {
		match = match && bytes.Equal(e.buf[e.identLen:], kb)
	}
	if !match || now >= e.expiry || effectiveCost(cost) < e.minCost {
		s.mu.RUnlock()
		return algo.Decision{}, false
	}
	if !e.ref.Load() { // a load first: no cache-line write on every hit
		e.ref.Store(true)
	}
	d := algo.Decision{
		Limit:      e.limit,
		Remaining:  e.remaining,
		RetryAfter: time.Duration(e.expiry - now),
		ResetAfter: time.Duration(max(e.resetAt-now, 0)),
	}
	l := e.label
	s.mu.RUnlock()
	l.hits[si].n.Add(1)
	return d, true
}

// Observe records an applied decision: a cacheable refusal (see Cacheable)
// inserts or tightens the entry for (ID, Key); an allowance of effective cost
// c drops an unexpired entry whose smallest refused cost is ≤ c, which can
// only happen if an invalidation was missed (counted as a contradiction),
// and otherwise refreshes the entry's Remaining and ResetAfter.
//
// When two refusals of the key disagree (one covers smaller costs, the other
// lasts longer), the entry keeps the one with the smaller cost: it answers
// more requests, and the larger-cost requests that miss after its expiry
// bring their own refusal back through the log.
func (c *Cache) Observe(o Observation) {
	d := &o.Decision
	if !d.Allowed && (o.Uncommitted || !Cacheable(o.Spec, o.Shadow, *d)) {
		return
	}
	h := c.hashBytes(o.ID, o.Key)
	s, _ := c.shardOf(h)
	eff := effectiveCost(o.Cost)
	s.mu.Lock()
	defer s.mu.Unlock()
	// e is the key's entry, if any; another key under the same hash (a
	// collision) leaves e nil, and a refusal then takes its slot.
	i, indexed := s.index[h]
	var e *slot
	if indexed && s.slots[i].matches(o.ID, o.Key) {
		e = &s.slots[i]
	}
	if d.Allowed {
		switch {
		case e == nil:
		case e.expiry <= o.Now:
			s.remove(i)
		case eff >= e.minCost:
			s.contradictions.Add(1)
			s.remove(i)
		default:
			e.refresh(o.Now, d)
		}
		return
	}
	if len(o.ID.Ident)+len(o.Key) > MaxEntryBytes || o.Now > math.MaxInt64-int64(d.RetryAfter) {
		return
	}
	expiry := o.Now + int64(d.RetryAfter)
	if e != nil {
		if e.expiry <= o.Now || eff < e.minCost || eff == e.minCost && expiry > e.expiry {
			e.minCost, e.expiry = eff, expiry
		}
		e.refresh(o.Now, d)
		return
	}
	if indexed {
		s.remove(i) // the colliding entry yields to the newer refusal
	}
	i = s.alloc(o.Now, c.capacity/len(c.shards))
	e = &s.slots[i]
	e.hash = h
	e.buf = append(append(e.buf[:0], o.ID.Ident...), o.Key...)
	e.identLen = len(o.ID.Ident)
	e.policy = o.ID.Policy
	e.live = true
	e.ref.Store(false)
	e.label = c.labels.of(o.ID)
	e.minCost, e.expiry = eff, expiry
	e.refresh(o.Now, d)
	s.index[h] = i
	s.live.Add(1)
}

func (e *slot) refresh(now int64, d *algo.Decision) {
	e.limit, e.remaining = d.Limit, d.Remaining
	e.resetAt = 0
	if d.ResetAfter > 0 && now <= math.MaxInt64-int64(d.ResetAfter) {
		e.resetAt = now + int64(d.ResetAfter)
	}
}

// alloc returns a slot to fill: a released one, a new one while below
// capacity, else the CLOCK victim: the first expired entry or entry not hit
// since the hand last passed it. Called with the write lock held.
func (s *shard) alloc(now int64, capacity int) int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if s.slots == nil {
		s.slots = make([]slot, 0, max(capacity, 1))
	}
	if n := len(s.slots); n < cap(s.slots) {
		s.slots = s.slots[:n+1]
		return int32(n)
	}
	// Every slot is live (released ones are on the free list). Two turns
	// of the hand clear every ref bit, so this ends within 2n steps.
	n := len(s.slots)
	for {
		j := s.hand
		s.hand = (s.hand + 1) % n
		e := &s.slots[j]
		switch {
		case e.expiry <= now:
		case e.ref.Load():
			e.ref.Store(false)
			continue
		default:
			s.evictions.Add(1)
		}
		s.remove(int32(j))
		s.free = s.free[:len(s.free)-1] // remove put it there; it is ours
		return int32(j)
	}
}

// remove releases live slot i. Called with the write lock held.
func (s *shard) remove(i int32) {
	e := &s.slots[i]
	delete(s.index, e.hash)
	e.live = false
	e.label = nil
	s.free = append(s.free, i)
	s.live.Add(-1)
}

// Forget drops the entry for (id, key): call it when a reset of that key is
// applied.
func (c *Cache) Forget(id LimitID, key []byte) {
	h := c.hashBytes(id, key)
	s, _ := c.shardOf(h)
	s.mu.Lock()
	if i, ok := s.index[h]; ok && s.slots[i].matches(id, key) {
		s.remove(i)
	}
	s.mu.Unlock()
}

// ForgetLimit drops every entry under limit id: call it when a policy is
// put (created, changed, or re-put unchanged) or deleted. It scans the whole
// cache, one shard at a time (about a millisecond at DefaultMaxEntries):
// policy changes are rare, and a per-limit index would cost every insert.
func (c *Cache) ForgetLimit(id LimitID) {
	for si := range c.shards {
		s := &c.shards[si]
		s.mu.Lock()
		for i := range s.slots {
			e := &s.slots[i]
			if e.live && e.matchesID(id) {
				s.remove(int32(i))
			}
		}
		s.mu.Unlock()
	}
}

// Clear drops every entry: call it when a snapshot is restored and when the
// node leaves the cluster or stops applying.
func (c *Cache) Clear() {
	for si := range c.shards {
		s := &c.shards[si]
		s.mu.Lock()
		clear(s.index)
		for i := range s.slots {
			s.slots[i].live = false
			s.slots[i].label = nil
		}
		s.slots = s.slots[:0]
		s.free = s.free[:0]
		s.hand = 0
		s.live.Store(0)
		s.mu.Unlock()
	}
}

// Stats are the cache's counters.
type Stats struct {
	Entries        int    // live entries, including expired ones not yet reclaimed
	Hits           uint64 // refusals answered by Lookup
	Evictions      uint64 // unexpired entries dropped to make room
	Contradictions uint64 // entries an applied allowance proved wrong (should stay 0)
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	var st Stats
	for i := range c.shards {
		s := &c.shards[i]
		st.Entries += int(s.live.Load())
		st.Evictions += s.evictions.Load()
		st.Contradictions += s.contradictions.Load()
	}
	for _, l := range c.labels.all() {
		st.Hits += l.total()
	}
	return st
}
