package fsm

import (
	"sort"
	"sync"
	"time"

	"github.com/limitd/limitd/nodeapi"
)

// Top keys per policy (GET /v1/keys/top): the keys with the most allowed
// cost, or the most refusals, over the last 5 minutes or hour, from a
// Space-Saving sketch of topK entries per bucket of time, updated in apply
// from the entry's leader time. Every replica applies every entry in one
// order and the sketch breaks ties by key, so every replica at one index
// holds the same view, for the whole cluster, on any node.
//
// The sketch is memory only: a node that restarts, or restores a snapshot,
// starts empty and is whole again once a window's time has passed since.
// Like usage history it counts refusals decided through the log (a
// refusal a node's over-limit cache answers from memory is not seen), and
// allowed cost decided by checks (not a lease's spending from memory).
//
// A check decided under the key's plan is counted under the plan (planTop):
// the plan's checks' allowed cost and refusals, and per limit of the plan
// the refusals that limit made.
//
// A count goes into its one-minute bucket only; a minute's counts are
// folded into its five-minute bucket when the minute's bucket is reused,
// and the hour's view reads the minutes not folded yet beside the
// five-minute buckets (policyTop.add): one sketch update per count.
//
// Bounds: topK entries per sketch, 2 sketches (allowed, refused) per
// bucket, 5 one-minute and 12 five-minute buckets per policy, and at most
// maxTopPolicies policies (the first seen; a deleted policy's sketch goes
// with it); as many sets again for plans and their limits (maxTopPlanSets).
// A key's count is exact while it stays in a bucket's sketch, and an
// over-estimate by at most the reported Error otherwise.
const (
	topK           = 32
	maxTopPolicies = 256
	maxTopPlanSets = 256
	topMinute      = int64(time.Minute)
	topFive        = 5 * int64(time.Minute)
)

// sketch is Space-Saving over at most topK keys. A key is found through a
// small open-addressing index by its hash, and the entry to evict is the
// root of a min-heap in the eviction order (least count; ties: the greatest
// hash, then key — a strict order, so every replica evicts the same entry),
// so an add costs a probe or two and O(log topK) compares rather than
// scans of every entry: many keys churning through a bucket's sketch make
// every add of a new key an eviction. The heap holds each entry's count and
// hash beside its number, so a compare reads one heap slot rather than
// three arrays, and a sift moves a hole rather than swapping (the apply
// path's cost of top keys is mostly this sift). Allocated at its first add
// (a set of buckets holds 34 sketches, most of them often empty).
type sketch struct {
	d *sketchData
}

const topIndexMask = 2*topK - 1 // the index has 2·topK slots: at most half full

// heapSlot is one heap place: an entry's count and hash (the eviction
// order's first two keys) and its number.
type heapSlot struct {
	cnt int64
	h   uint64
	e   uint8
}

type sketchData struct {
	n    int            // entries in use: 0..n-1 (an entry never moves)
	h    [topK]uint64   // keyHash(key)
	err  [topK]int64    // the over-estimate a late admission inherited
	keys [topK][]byte   // reused when the entry is evicted, so that a sketch in its steady state allocates nothing on the apply path
	heap [topK]heapSlot // a min-heap by less; entry i's count is heap[pos[i]].cnt
	pos  [topK]uint8    // entry i's place in heap
	idx  [2 * topK]uint8
}

// cnt is entry i's count.
func (d *sketchData) cnt(i int) int64 { return d.heap[d.pos[i]].cnt }

// less is the eviction order: a is evicted before b.
func (d *sketchData) less(a, b *heapSlot) bool {
	if a.cnt != b.cnt {
		return a.cnt < b.cnt
	}
	if a.h != b.h {
		return a.h > b.h
	}
	return string(d.keys[a.e]) > string(d.keys[b.e])
}

// place puts x at heap place p.
func (d *sketchData) place(p int, x heapSlot) {
	d.heap[p] = x
	d.pos[x.e] = uint8(p)
}

func (d *sketchData) up(p int) {
	x := d.heap[p]
	for p > 0 {
		q := (p - 1) / 2
		if !d.less(&x, &d.heap[q]) {
			break
		}
		d.place(p, d.heap[q])
		p = q
	}
	d.place(p, x)
}

func (d *sketchData) down(p int) {
	x := d.heap[p]
	for {
		c := 2*p + 1
		if c >= d.n {
			break
		}
		if c+1 < d.n && d.less(&d.heap[c+1], &d.heap[c]) {
			c++
		}
		if !d.less(&d.heap[c], &x) {
			break
		}
		d.place(p, d.heap[c])
		p = c
	}
	d.place(p, x)
}

func (d *sketchData) find(key []byte, h uint64) int {
	for s := h & topIndexMask; d.idx[s] != 0; s = (s + 1) & topIndexMask {
		if i := d.idx[s] - 1; d.h[i] == h && string(d.keys[i]) == string(key) {
			return int(i)
		}
	}
	return -1
}

func (d *sketchData) index(i int) {
	s := d.h[i] & topIndexMask
	for d.idx[s] != 0 {
		s = (s + 1) & topIndexMask
	}
	d.idx[s] = uint8(i + 1)
}

// unindex removes entry i from the index by backward-shift deletion, so
// that no probe sequence is broken and no tombstone is left.
func (d *sketchData) unindex(i int) {
	s := d.h[i] & topIndexMask
	for int(d.idx[s]) != i+1 {
		s = (s + 1) & topIndexMask
	}
	d.idx[s] = 0
	for j := (s + 1) & topIndexMask; d.idx[j] != 0; j = (j + 1) & topIndexMask {
		home := d.h[d.idx[j]-1] & topIndexMask
		// The entry at j stays unless the hole s lies between its home slot
		// and j (cyclically): then it moves into the hole.
		if (j-home)&topIndexMask >= (j-s)&topIndexMask {
			d.idx[s], d.idx[j] = d.idx[j], 0
			s = j
		}
	}
}

// add counts n for key (hash h), whose count may already over-estimate by
// e (a folded minute's error; 0 for a check).
func (s *sketch) add(key []byte, h uint64, n, e int64) {
	d := s.d
	if d == nil {
		d = &sketchData{}
		s.d = d
	}
	if i := d.find(key, h); i >= 0 {
		p := int(d.pos[i])
		d.heap[p].cnt += n // n > 0: the entry only moves away from the root
		d.err[i] += e
		d.down(p)
		return
	}
	if d.n < topK {
		i := d.n
		d.n++
		d.keys[i] = append(d.keys[i][:0], key...) // the buffer a reset left, if any
		d.h[i], d.err[i] = h, e
		d.index(i)
		d.place(i, heapSlot{cnt: n, h: h, e: uint8(i)})
		d.up(i)
		return
	}
	// Evict the least (the root); the newcomer inherits its count as its
	// error.
	r := &d.heap[0]
	m := int(r.e)
	d.unindex(m)
	d.keys[m] = append(d.keys[m][:0], key...)
	d.h[m], d.err[m] = h, r.cnt+e
	r.cnt += n
	r.h = h
	d.index(m)
	d.down(0)
}

// len is the entries in use.
func (s *sketch) len() int {
	if s.d == nil {
		return 0
	}
	return s.d.n
}

// keyHash is FNV-1a: fixed, so that every replica breaks an eviction's tie
// alike.
func keyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

func (s *sketch) reset() { // the entries' key buffers stay for reuse
	if s.d != nil {
		s.d.n = 0
		clear(s.d.idx[:])
	}
}

type topBucket struct {
	epoch int64 // the bucket's period number (time / its width); -1: empty
	s     [2]sketch
}

func (b *topBucket) at(epoch int64) *topBucket {
	if b.epoch != epoch {
		b.epoch = epoch
		b.s[0].reset()
		b.s[1].reset()
	}
	return b
}

type policyTop struct {
	minute [5]topBucket
	five   [12]topBucket
}

func newPolicyTop() *policyTop {
	p := &policyTop{}
	for i := range p.minute {
		p.minute[i].epoch = -1
	}
	for i := range p.five {
		p.five[i].epoch = -1
	}
	return p
}

// planTop is a plan's sketches: its checks' allowed cost and refusals (a
// plan decides a check as one group), and per limit the refusals that limit
// made (only s[topRefused] of those is filled). A limit keeps no allowed
// sketch of its own because it would equal the plan's: a plan check is
// allowed only when every limit of the plan allows it, and then spends the
// same cost in each.
type planTop struct {
	policyTop
	limits map[string]*policyTop
}

// topKeys is the node's sketches, guarded for readers on other goroutines.
type topKeys struct {
	mu       sync.Mutex
	now      int64 // the last leader time applied
	policies map[string]*policyTop
	plans    map[string]*planTop
	planSets int // plans and plan limits with a sketch set: ≤ maxTopPlanSets
	// Plan checks' counts of the batch being applied (apply goroutine
	// only), added under one lock when the batch commits (flush) rather
	// than one lock per check. The sketches must not depend on how a
	// replica's log was cut into batches: the queue is added in log order,
	// and every other change of the plan sketches (forgetPlan, prunePlan,
	// clear) flushes it first, so the sketches see the same sequence of
	// operations as adding each count at once would give them. Readers
	// never see a batch's counts before its commit.
	queue    []topQueued
	queueKey []byte // the queued keys, end to end: the entry's bytes are not kept past apply
}

// A plan's limits fit topQueued.refused: this fails to compile otherwise.
var _ [16 - nodeapi.MaxPlanLimits]struct{}

// topQueued is one plan check's counts (addPlan's arguments).
type topQueued struct {
	plan    *Plan // the version that decided the check; plan changes flush the queue first
	key     int32 // queueKey[key:key+klen]
	klen    int32
	cost    int64
	now     int64
	allowed bool
	refused uint16 // bit i: p.Limits[i] refused (nodeapi.MaxPlanLimits ≤ 16)
}

// kinds of count
const (
	topAllowed = 0
	topRefused = 1
)

func (t *topKeys) add(policy string, key []byte, kind int, n, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = max(t.now, now)
	p := t.policies[policy]
	if p == nil {
		if t.policies == nil {
			t.policies = make(map[string]*policyTop)
		}
		if len(t.policies) >= maxTopPolicies {
			return
		}
		p = newPolicyTop()
		t.policies[policy] = p
	}
	p.add(key, keyHash(key), kind, n, now)
}

// add counts into the one-minute bucket only: a minute's counts reach its
// five-minute bucket when the minute's bucket is reused (fold), and the
// hour's view reads the minutes not folded yet beside the five-minute
// buckets. One sketch update per count instead of two; every minute is in
// exactly one of the two places, so the views count it once.
func (p *policyTop) add(key []byte, h uint64, kind int, n, now int64) {
	m := now / topMinute
	b := &p.minute[m%5]
	if b.epoch != m {
		p.fold(b)
	}
	b.at(m).s[kind].add(key, h, n, 0)
}

// fold moves a minute bucket's counts, with their errors, into its
// five-minute bucket, unless that bucket already holds a later period (the
// minute is then past the hour the buckets keep).
func (p *policyTop) fold(b *topBucket) {
	if b.epoch < 0 {
		return
	}
	f := b.epoch * topMinute / topFive
	fb := &p.five[f%12]
	if fb.epoch > f {
		return
	}
	fb.at(f)
	for kind := range b.s {
		if d := b.s[kind].d; d != nil {
			for i := 0; i < d.n; i++ {
				fb.s[kind].add(d.keys[i], d.h[i], d.cnt(i), d.err[i])
			}
		}
	}
}

// addPlan counts one check of key decided under plan p, cost > 0: its cost
// when allowed, else one refusal of the plan and one of each limit that
// refused (decs: the plan's limits' decisions, in p.Limits' order).
func (t *topKeys) addPlan(p *Plan, key []byte, cost int64, allowed bool, decs []Decision, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addPlanLocked(p, key, cost, allowed, decs, now)
}

func (t *topKeys) addPlanLocked(p *Plan, key []byte, cost int64, allowed bool, decs []Decision, now int64) {
	t.now = max(t.now, now)
	pt := t.plans[p.Name]
	if pt == nil {
		if t.plans == nil {
			t.plans = make(map[string]*planTop)
		}
		if t.planSets >= maxTopPlanSets {
			return
		}
		pt = &planTop{policyTop: *newPolicyTop()}
		t.plans[p.Name] = pt
		t.planSets++
	}
	h := keyHash(key)
	if allowed {
		pt.add(key, h, topAllowed, cost, now)
		return
	}
	pt.add(key, h, topRefused, 1, now)
	for i := range decs {
		if decs[i].Allowed || i >= len(p.Limits) {
			continue
		}
		name := p.Limits[i].Name
		lt := pt.limits[name]
		if lt == nil {
			if t.planSets >= maxTopPlanSets {
				continue
			}
			if pt.limits == nil {
				pt.limits = make(map[string]*policyTop)
			}
			lt = newPolicyTop()
			pt.limits[name] = lt
			t.planSets++
		}
		lt.add(key, h, topRefused, 1, now)
	}
}

// queuePlan is addPlan deferred to the batch's commit (flush).
func (t *topKeys) queuePlan(p *Plan, key []byte, cost int64, allowed bool, decs []Decision, now int64) {
	q := topQueued{plan: p, key: int32(len(t.queueKey)), klen: int32(len(key)), cost: cost, now: now, allowed: allowed}
	for i := range decs {
		if !decs[i].Allowed && i < 16 {
			q.refused |= 1 << i
		}
	}
	t.queueKey = append(t.queueKey, key...)
	t.queue = append(t.queue, q)
}

// flush adds the queued plan counts, in the order they were queued, under
// one lock.
func (t *topKeys) flush() {
	if len(t.queue) == 0 {
		return
	}
	t.mu.Lock()
	t.flushLocked()
	t.mu.Unlock()
}

func (t *topKeys) flushLocked() {
	var decs [16]Decision
	for i := range t.queue {
		q := &t.queue[i]
		n := min(len(q.plan.Limits), 16)
		for j := 0; j < n; j++ {
			decs[j].Allowed = q.refused&(1<<j) == 0
		}
		t.addPlanLocked(q.plan, t.queueKey[q.key:q.key+q.klen], q.cost, q.allowed, decs[:n], q.now)
	}
	t.queue, t.queueKey = t.queue[:0], t.queueKey[:0]
}

// drop forgets the queued counts of a batch that was not committed.
func (t *topKeys) drop() { t.queue, t.queueKey = t.queue[:0], t.queueKey[:0] }

func (t *topKeys) clear() {
	t.mu.Lock()
	t.drop()
	clear(t.policies)
	clear(t.plans)
	t.planSets = 0
	t.now = 0
	t.mu.Unlock()
}

func (t *topKeys) forget(policy string) {
	t.mu.Lock()
	delete(t.policies, policy)
	t.mu.Unlock()
}

// forgetPlan drops a deleted plan's sketches.
func (t *topKeys) forgetPlan(name string) {
	t.mu.Lock()
	t.flushLocked() // the plan's counts queued before its deletion go with it
	if pt, ok := t.plans[name]; ok {
		t.planSets -= 1 + len(pt.limits)
		delete(t.plans, name)
	}
	t.mu.Unlock()
}

// prunePlan drops the sketches of limits a changed plan p no longer has, so
// a view never names a limit the plan lacks and the bound counts live sets.
func (t *topKeys) prunePlan(p *Plan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flushLocked() // counts queued under the plan's old limits are pruned as they would have been
	pt := t.plans[p.Name]
	if pt == nil {
		return
	}
	for name := range pt.limits {
		if _, ok := p.Limit(name); !ok {
			delete(pt.limits, name)
			t.planSets--
		}
	}
}

// recordPlanTop is decidePlan's hook for the sketches, after the group was
// decided: allowed means every limit consumed the cost (decideOp commits an
// all-or-nothing group only when allowed).
func (a *applier) recordPlanTop(p *Plan, ck *checkRef, decs []Decision, allowed bool, now int64) {
	if ck.cost > 0 {
		a.f.top.queuePlan(p, ck.key, ck.cost, allowed, decs, now)
	}
}

// recordTop is decideOp's hook for the sketches: policies' checks with a
// cost, allowed ones by their cost once committed, refused ones as one.
func (a *applier) recordTop(checks []checkRef, lims []limit, decs []Decision, now int64, committed bool) {
	for j := range checks {
		ck, lim, d := &checks[j], &lims[j], &decs[j]
		if ck.cost <= 0 || !lim.policy {
			continue
		}
		switch {
		case !d.Allowed:
			a.f.top.add(lim.name, ck.key, topRefused, 1, now)
		case committed && !d.ShadowRefused:
			a.f.top.add(lim.name, ck.key, topAllowed, ck.cost, now)
		}
	}
}

// TopKeys answers the top keys of a policy, or of a plan or one of its
// limits: window 5 minutes or an hour
// ending at the last leader time applied, by allowed cost or refusals,
// at most limit (≤ topK) keys, greatest first (ties by key).
func (f *FSM) TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys {
	last := f.LastTime()
	t := &f.top
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = max(t.now, last) // time passes for the views without checks too
	out := nodeapi.TopKeys{Policy: q.Policy, Plan: q.Plan, PlanLimit: q.PlanLimit, Window: q.Window, By: q.By, Now: t.now}
	kind := topAllowed
	if q.By == nodeapi.TopByRefused {
		kind = topRefused
	}
	var p *policyTop
	switch {
	case q.Plan == "":
		p = t.policies[q.Policy]
	case t.plans[q.Plan] == nil:
	case q.PlanLimit != "" && kind == topRefused:
		p = t.plans[q.Plan].limits[q.PlanLimit]
	default:
		p = &t.plans[q.Plan].policyTop // a limit's allowed cost is its plan's (planTop)
	}
	if p == nil {
		return out
	}
	sum := map[string]*nodeapi.TopKey{}
	merge := func(b *topBucket) {
		d := b.s[kind].d
		for i := 0; i < b.s[kind].len(); i++ {
			k := sum[string(d.keys[i])]
			if k == nil {
				k = &nodeapi.TopKey{Key: string(d.keys[i])}
				sum[k.Key] = k
			}
			k.Count += d.cnt(i)
			k.Error += d.err[i]
		}
	}
	if q.Window == time.Hour {
		e := t.now / topFive
		for i := range p.five {
			if b := &p.five[i]; b.epoch > e-12 && b.epoch <= e {
				merge(b)
			}
		}
		for i := range p.minute { // the minutes not folded yet (policyTop.add)
			if b := &p.minute[i]; b.epoch >= 0 && b.epoch/5 > e-12 && b.epoch/5 <= e {
				merge(b)
			}
		}
	} else {
		e := t.now / topMinute
		for i := range p.minute {
			if b := &p.minute[i]; b.epoch > e-5 && b.epoch <= e {
				merge(b)
			}
		}
	}
	for _, k := range sum {
		out.Keys = append(out.Keys, *k)
	}
	sort.Slice(out.Keys, func(i, j int) bool {
		a, b := out.Keys[i], out.Keys[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Key < b.Key
	})
	if q.Limit > 0 && len(out.Keys) > q.Limit {
		out.Keys = out.Keys[:q.Limit]
	}
	return out
}
