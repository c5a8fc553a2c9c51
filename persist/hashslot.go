package persist

import "bytes"

// Reads for moving a hash slot's records between groups (fsm/hashslot.go).
// The state machine finds a slot's records by the user key inside each
// storage key, which persist does not interpret, so these scans visit the
// whole bucket; they run only when a slot is frozen, exported or dropped,
// never on the check path.

// ScanLiveStates calls fn for every key state under prefix (nil: all) whose
// key match accepts (nil: every key; asked before the value is read) as
// the writer's transaction sees it: the state cache over the layers over
// the file, so states written since the last commit are included and
// states deleted since are not. The order is unspecified (the cache's
// newly created keys come last, in map order): callers that need one sort.
// fn must not write; its slices are valid only during the call.
func (t *Tx) ScanLiveStates(prefix []byte, match func(key []byte) bool, fn func(key []byte, st State) error) error {
	var c lcursor
	c.init(t.state)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if match != nil && !match(k) {
			continue
		}
		var st State
		if e, ok := t.cached(k); ok {
			st = e.state()
		} else {
			var err error
			if st, err = t.decodeState(k, v); err != nil {
				return err
			}
		}
		if !st.Found {
			continue
		}
		if err := fn(k, st); err != nil {
			return err
		}
	}
	if t.cache == nil {
		return nil
	}
	// Keys created since the last flush are in the cache only: the layers
	// and the file hold a key exactly when its entry says storedFound.
	for key, slot := range t.cache.m {
		e := t.cache.at(slot)
		if !e.found || e.storedFound || !bytes.HasPrefix([]byte(key), prefix) || match != nil && !match([]byte(key)) {
			continue
		}
		if err := fn([]byte(key), e.state()); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) cached(k []byte) (*entry, bool) {
	if t.cache == nil {
		return nil, false
	}
	slot, ok := t.cache.m[string(k)]
	if !ok {
		return nil, false
	}
	return t.cache.at(slot), true
}

// MaxRequestExpiry is the latest expiry of a stored request id (0 with
// none), as the writer's transaction sees them. It reads every request
// record: the state machine calls it once, when a group starts tracking
// which hash slot each request id belongs to.
func (t *Tx) MaxRequestExpiry() (int64, error) {
	var latest int64
	var c lcursor
	c.init(t.requests)
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		r, err := t.Request(k)
		if err != nil {
			return 0, err
		}
		if r.Found && r.Expiry > latest {
			latest = r.Expiry
		}
	}
	return latest, nil
}
