package client

import (
	"sync"
	"time"
)

// FailLocal decides alone when the cluster cannot be reached: the same
// share rule as a limitd node's degraded mode (docs/CLUSTER.md "Degraded
// mode"), on the client's side. For a policy given WithLocalLimit, each
// client admits at most ceil(limit / instances) per key and window of its
// own clock; a check under any other policy or an inline limit is refused
// as FailClosed would (the client cannot tell its limit). Every answer is
// Degraded. The units a client admits alone are not charged to the cluster
// afterwards (a client has no stable identity a charge could be made once
// under): with n clients sharing the limit, a window in which the cluster
// is unreachable to all of them admits at most limit + n·ceil(limit/n).
const FailLocal FailMode = FailClosed + 1

// LocalLimit is what a client knows of a policy for FailLocal: its limit
// and window, and Instances, the number of clients that share it (1 or
// less: this client alone).
type LocalLimit struct {
	Limit     int64
	Window    time.Duration
	Instances int
}

// WithLocalLimit gives FailLocal the policy's limit (and turns FailLocal
// on: WithFailMode(FailLocal) without any WithLocalLimit refuses every
// check it answers).
func WithLocalLimit(policy string, l LocalLimit) Option {
	return func(o *options) {
		o.failMode = FailLocal
		if o.local == nil {
			o.local = &localShare{limits: map[string]LocalLimit{}}
		}
		o.local.limits[policy] = l
	}
}

// maxLocalKeys bounds the keys FailLocal counts; past it (after forgetting
// ended windows) a check is refused.
const maxLocalKeys = 100_000

type localKey struct {
	policy, key string
	window      int64
}

type localShare struct {
	limits map[string]LocalLimit // set at New, read only after
	mu     sync.Mutex
	counts map[localKey]int64
	now    func() time.Time // tests
}

// decide answers r alone at the client's clock.
func (s *localShare) decide(r *Request) Decision {
	refuse := Decision{Allowed: false, Degraded: true, RetryAfter: time.Second}
	if s == nil {
		return refuse
	}
	l, ok := s.limits[r.Policy]
	if !ok || r.Policy == "" || l.Limit <= 0 || l.Window <= 0 {
		return refuse
	}
	n := int64(max(l.Instances, 1))
	share := (l.Limit + n - 1) / n
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	t := now().UnixNano()
	w := int64(l.Window)
	idx := t / w
	reset := time.Duration((idx+1)*w - t)
	k := localKey{r.Policy, r.Key, idx}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[localKey]int64{}
	}
	used, seen := s.counts[k]
	if !seen && len(s.counts) >= maxLocalKeys {
		for old := range s.counts {
			if old.window < idx {
				delete(s.counts, old)
			}
		}
		if len(s.counts) >= maxLocalKeys {
			return refuse
		}
	}
	d := Decision{Limit: l.Limit, ResetAfter: reset, Degraded: true}
	if used+cost > share {
		d.RetryAfter = reset
		return d
	}
	s.counts[k] = used + cost
	d.Allowed, d.Remaining = true, share-used-cost
	return d
}
