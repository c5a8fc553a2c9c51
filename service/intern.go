package service

import (
	"sync"
	"sync/atomic"
)

// Interner hands out one shared string per distinct byte sequence, for
// values that arrive on every request (policy names, inline limits'
// identities) and would otherwise cost an allocation each time. Lookups
// take no lock: the set is copied on write, and writes stop at Max strings,
// past which Get allocates per call — a client sending endless distinct
// values costs bounded memory and gains nothing. The zero value with Max
// set is ready; safe for concurrent use.
type Interner struct {
	Max int

	set atomic.Pointer[map[string]string] // copied on write
	mu  sync.Mutex
}

// Get returns string(b), the same string for equal b while the set has room.
func (in *Interner) Get(b []byte) string {
	if m := in.set.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.set.Load()
	n := 0
	if old != nil {
		n = len(*old)
	}
	if n >= in.Max {
		return s
	}
	m := make(map[string]string, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[s] = s
	in.set.Store(&m)
	return s
}

// Len is the number of strings interned.
func (in *Interner) Len() int {
	if m := in.set.Load(); m != nil {
		return len(*m)
	}
	return 0
}
