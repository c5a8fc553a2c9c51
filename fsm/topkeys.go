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

type topEntry struct {
	// key's bytes are reused when the entry is evicted, so that a sketch in
	// its steady state allocates nothing on the apply path.
	key      []byte
	h        uint64 // keyHash(key): the scans compare it before the bytes
	n, error int64
}

// sketch is Space-Saving over at most topK keys. A linear scan of topK
// entries' hashes finds a key: cheaper on the apply path than a map, whose
// string keys cost an allocation for every new key.
type sketch struct {
	e []topEntry
}

func (s *sketch) add(key []byte, h uint64, n int64) {
	for i := range s.e {
		if e := &s.e[i]; e.h == h && string(e.key) == string(key) {
			e.n += n
			return
		}
	}
	if len(s.e) < topK {
		if len(s.e) < cap(s.e) {
			s.e = s.e[:len(s.e)+1] // the slot, and its key buffer, a reset left
		} else {
			s.e = append(s.e, topEntry{})
		}
		e := &s.e[len(s.e)-1]
		*e = topEntry{key: append(e.key[:0], key...), h: h, n: n}
		return
	}
	// Evict the least (ties: the greatest hash, then key, so the choice is
	// the same on every replica); the newcomer inherits its count as its
	// error.
	m := 0
	for i := 1; i < len(s.e); i++ {
		a, b := &s.e[i], &s.e[m]
		if a.n < b.n || a.n == b.n && (a.h > b.h || a.h == b.h && string(a.key) > string(b.key)) {
			m = i
		}
	}
	e := &s.e[m]
	*e = topEntry{key: append(e.key[:0], key...), h: h, n: e.n + n, error: e.n}
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

func (s *sketch) reset() { s.e = s.e[:0] } // the entries' key buffers stay for reuse

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

func (p *policyTop) add(key []byte, h uint64, kind int, n, now int64) {
	m, f := now/topMinute, now/topFive
	p.minute[m%5].at(m).s[kind].add(key, h, n)
	p.five[f%12].at(f).s[kind].add(key, h, n)
}

// addPlan counts one check of key decided under plan p, cost > 0: its cost
// when allowed, else one refusal of the plan and one of each limit that
// refused (decs: the plan's limits' decisions, in p.Limits' order).
func (t *topKeys) addPlan(p *Plan, key []byte, cost int64, allowed bool, decs []Decision, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
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

func (t *topKeys) clear() {
	t.mu.Lock()
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
		a.f.top.addPlan(p, ck.key, ck.cost, allowed, decs, now)
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
		for _, e := range b.s[kind].e {
			k := sum[string(e.key)]
			if k == nil {
				k = &nodeapi.TopKey{Key: string(e.key)}
				sum[k.Key] = k
			}
			k.Count += e.n
			k.Error += e.error
		}
	}
	if q.Window == time.Hour {
		e := t.now / topFive
		for i := range p.five {
			if b := &p.five[i]; b.epoch > e-12 && b.epoch <= e {
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
