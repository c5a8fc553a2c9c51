package rls

import "sync"

// Cache holds compiled domains for a replicated set of configurations, so
// each configuration is parsed once per change instead of once per request.
// Its source reports a version that changes whenever any configuration
// changes; the cache empties itself when the version moves.
type Cache struct {
	mu      sync.RWMutex
	version uint64
	domains map[string]*Domain
}

// Get returns the compiled domain name at version, loading its canonical
// configuration with load on a miss. nil, nil when load reports no such
// domain; an error when the stored configuration does not compile (it was
// validated before it was stored, so this is a bug or a newer format).
func (c *Cache) Get(version uint64, name string, load func(name string) ([]byte, bool)) (*Domain, error) {
	c.mu.RLock()
	d, ok := c.domains[name]
	hit := ok && c.version == version
	c.mu.RUnlock()
	if hit {
		return d, nil
	}
	cfg, ok := load(name)
	if ok {
		var err error
		if d, err = Parse("", cfg); err != nil {
			return nil, err
		}
	} else {
		d = nil
	}
	c.mu.Lock()
	if c.version != version || c.domains == nil {
		c.version, c.domains = version, map[string]*Domain{}
	}
	if len(c.domains) < maxCached {
		c.domains[name] = d // unknown names too, so a flood of them stays cheap
	}
	c.mu.Unlock()
	return d, nil
}

// maxCached bounds the entries (request domains are client input).
const maxCached = 4096
