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
// Bounds: topK entries per sketch, 2 sketches (allowed, refused) per
// bucket, 5 one-minute and 12 five-minute buckets per policy, and at most
// maxTopPolicies policies (the first seen; a deleted policy's sketch goes
// with it). A key's count is exact while it stays in a bucket's sketch, and
// an over-estimate by at most the reported Error otherwise.
const (
	topK           = 32
	maxTopPolicies = 256
	topMinute      = int64(time.Minute)
	topFive        = 5 * int64(time.Minute)
)

type topEntry struct {
	key      string
	n, error int64
}

// sketch is Space-Saving over at most topK keys.
type sketch struct {
	idx map[string]int
	e   []topEntry
}

func (s *sketch) add(key []byte, n int64) {
	if i, ok := s.idx[string(key)]; ok {
		s.e[i].n += n
		return
	}
	if s.idx == nil {
		s.idx = make(map[string]int, topK)
	}
	if len(s.e) < topK {
		s.idx[string(key)] = len(s.e)
		s.e = append(s.e, topEntry{key: string(key), n: n})
		return
	}
	// Evict the least (ties: the greatest key, so the choice is the same on
	// every replica); the newcomer inherits its count as its error.
	m := 0
	for i := 1; i < len(s.e); i++ {
		if s.e[i].n < s.e[m].n || s.e[i].n == s.e[m].n && s.e[i].key > s.e[m].key {
			m = i
		}
	}
	old := s.e[m]
	delete(s.idx, old.key)
	s.idx[string(key)] = m
	s.e[m] = topEntry{key: string(key), n: old.n + n, error: old.n}
}

func (s *sketch) reset() {
	clear(s.idx)
	s.e = s.e[:0]
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

// topKeys is the node's sketches, guarded for readers on other goroutines.
type topKeys struct {
	mu       sync.Mutex
	now      int64 // the last leader time applied
	policies map[string]*policyTop
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
	m, f := now/topMinute, now/topFive
	p.minute[m%5].at(m).s[kind].add(key, n)
	p.five[f%12].at(f).s[kind].add(key, n)
}

func (t *topKeys) clear() {
	t.mu.Lock()
	clear(t.policies)
	t.now = 0
	t.mu.Unlock()
}

func (t *topKeys) forget(policy string) {
	t.mu.Lock()
	delete(t.policies, policy)
	t.mu.Unlock()
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

// TopKeys answers the top keys of a policy: window 5 minutes or an hour
// ending at the last leader time applied, by allowed cost or refusals,
// at most limit (≤ topK) keys, greatest first (ties by key).
func (f *FSM) TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys {
	last := f.LastTime()
	t := &f.top
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = max(t.now, last) // time passes for the views without checks too
	out := nodeapi.TopKeys{Policy: q.Policy, Window: q.Window, By: q.By, Now: t.now}
	p := t.policies[q.Policy]
	if p == nil {
		return out
	}
	kind := topAllowed
	if q.By == nodeapi.TopByRefused {
		kind = topRefused
	}
	sum := map[string]*nodeapi.TopKey{}
	merge := func(b *topBucket) {
		for _, e := range b.s[kind].e {
			k := sum[e.key]
			if k == nil {
				k = &nodeapi.TopKey{Key: e.key}
				sum[e.key] = k
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
