package fsm

import "github.com/limitd/limitd/persist"

// Usage reports what the data occupies inside the database file (which never
// shrinks: freed pages are reused). It walks every page: O(data), for
// diagnostics and metrics scrapes, not the hot path.
func (f *FSM) Usage() (persist.Usage, error) { return f.store.Usage() }
