package service

import "time"

// The status page's read of the lease table (lease.go owns the table and
// its rules; this file only reads it, under its lock).

// LeaseView is one key's quota leases on this node, as the status page
// shows them.
type LeaseView struct {
	Policy string
	Key    string
	Left   int64 // units this node may still allow from its leases on the key
	Spent  int64 // units it allowed from them (the order of LeaseSnapshot)
	// ExpiresIn is the time until the last of the key's leases on this node
	// ends: after it, without a refill, the key's checks go through the log.
	ExpiresIn time.Duration
}

// LeaseSnapshot lists up to limit of the keys this node holds unexpired
// leases with units left on, the most spent first (then by policy and
// key), and how many more such keys it holds. It reads the table under its
// lock without changing it, keeping at most limit views (work linear in
// the table times limit, memory in limit).
func (s *Service) LeaseSnapshot(limit int) (views []LeaseView, more int) {
	if limit < 0 {
		return nil, 0
	}
	t := s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	before := func(a, b LeaseView) bool {
		if a.Spent != b.Spent {
			return a.Spent > b.Spent
		}
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		return a.Key < b.Key
	}
	for k, sl := range t.slots {
		v := LeaseView{Policy: k.policy, Key: k.key}
		for _, h := range [2]*heldLease{sl.cur, sl.next} {
			if h != nil && now.Before(h.end) {
				v.Left += h.left()
				v.Spent += h.spent
				v.ExpiresIn = max(v.ExpiresIn, h.end.Sub(now))
			}
		}
		if v.Left <= 0 {
			continue
		}
		// Insert v in order; what falls off the end is counted in more.
		i := len(views)
		for i > 0 && before(v, views[i-1]) {
			i--
		}
		if i == limit {
			more++
			continue
		}
		if len(views) == limit {
			more++
			views = views[:limit-1]
		}
		views = append(views, LeaseView{})
		copy(views[i+1:], views[i:])
		views[i] = v
	}
	return views, more
}
