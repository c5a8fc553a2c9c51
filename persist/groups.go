package persist

import (
	bolt "go.etcd.io/bbolt"
)

// Key groups: Options.KeyGroup names the group of a state key (the state
// machine's policy name of a policy key), and the store keeps the number of
// live states of each group, exactly, as it keeps Meta.Keys: every put that
// creates a state, every delete and every expiry changes it in the same
// Update, so the count is a function of the applied log like the states
// themselves (what a per-policy key budget is decided from on every replica).
// It is not stored: Open and Restore count the file's states (the start-up
// scrub reads each of them already), and a rollback goes back to the count
// of the generation it falls back to, exactly as the meta record does.
//
// The invariant: groups[g] is the number of states whose key is in group g,
// in the state as the writer sees it (current ⊕ frozen ⊕ file).
type groupCounts map[string]*int64

func (g groupCounts) clone() groupCounts {
	c := make(groupCounts, len(g))
	for k, v := range g {
		n := *v
		c[k] = &n
	}
	return c
}

func (g groupCounts) add(name []byte, d int64) {
	if p := g[string(name)]; p != nil {
		*p += d
		if *p == 0 {
			delete(g, string(name))
		}
		return
	}
	n := d
	g[string(name)] = &n
}

// grouped notes a state created (d = 1) or removed (d = -1) under key.
func (t *Tx) grouped(key []byte, d int64) {
	s := t.store
	if s.opts.KeyGroup == nil {
		return
	}
	if g := s.opts.KeyGroup(key); g != nil {
		s.groups.add(g, d)
	}
}

// GroupKeys is the number of live states in group name (Options.KeyGroup),
// as of this transaction's writes. Only the writer's transaction knows it;
// elsewhere it is 0.
func (t *Tx) GroupKeys(name []byte) int64 {
	if t.cache == nil || t.store.groups == nil {
		return 0
	}
	if p := t.store.groups[string(name)]; p != nil {
		return *p
	}
	return 0
}

// countGroups counts the file's states by group.
func (s *Store) countGroups(db *bolt.DB) (groupCounts, error) {
	g := groupCounts{}
	if s.opts.KeyGroup == nil {
		return g, nil
	}
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketState)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			if name := s.opts.KeyGroup(k); name != nil {
				g.add(name, 1)
			}
			return nil
		})
	})
	return g, err
}
