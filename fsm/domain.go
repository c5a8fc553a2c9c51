package fsm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Envoy RLS domains: a domain's configuration (envoy ratelimit's format, in
// the canonical form package rls produces) replicated through the log like a
// policy, so every node matches descriptors against the same rules. The
// state machine keeps the bytes opaque: the node validates a configuration
// with package rls before proposing it, and the readers compile it.
//
// Domains live in the policies bucket under keys that start with a byte no
// policy name may start with (domainKeyPrefix), so they are in snapshots and
// digests with no change to the storage layout.

// Command types for domains (see the list in types.go; never renumber).
const (
	CmdPutDomain    byte = 8 // domain name, configuration → error
	CmdDeleteDomain byte = 9 // domain name → error (*Error not_found if absent)
)

// Bounds on a domain; they match package rls's (MaxDomainLen, MaxConfigBytes).
const (
	MaxDomainName   = 256
	MaxDomainConfig = 1 << 20
)

// domainKeyPrefix starts the storage key of a domain. Policy names may not
// start with it (putPolicy refuses them).
const domainKeyPrefix = "\x00rls-domain\x00"

// Domain is an RLS domain's replicated configuration (nodeapi's).
type Domain = nodeapi.Domain

// EncodePutDomain builds a CmdPutDomain entry.
func EncodePutDomain(name string, config []byte) []byte {
	dst := append([]byte{CmdPutDomain, cmdVersion}, nil...)
	dst = appendString(dst, name)
	return appendString(dst, string(config))
}

// EncodeDeleteDomain builds a CmdDeleteDomain entry.
func EncodeDeleteDomain(name string) []byte {
	return appendString([]byte{CmdDeleteDomain, cmdVersion}, name)
}

func init() {
	for _, typ := range []byte{CmdPutDomain, CmdDeleteDomain} {
		registerCommand(typ, commandType{
			name:     map[byte]string{CmdPutDomain: "put domain", CmdDeleteDomain: "delete domain"}[typ],
			decode:   decodeDomain,
			validate: validateDomain,
			apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
				e, err := a.applyDomain(tx, c)
				return errResponse(e), err
			},
		})
	}
}

// decodeDomain reads a domain command's body.
func decodeDomain(c *command, d *decoder) {
	c.name = string(d.bytes())
	c.domain = nil
	if c.typ == CmdPutDomain {
		c.domain = d.bytes()
	}
}

// validateDomain checks a domain command's bounds (ValidateCommand).
func validateDomain(c *command) error {
	if e := domainError(c); e != nil {
		return fmt.Errorf("%w: domain %q: %v", ErrBadCommand, c.name, e)
	}
	return nil
}

func domainError(c *command) *Error {
	switch {
	case c.name == "" || len(c.name) > MaxDomainName:
		return &Error{Code: CodeInvalidArgument, Field: "domain", Message: fmt.Sprintf("must be 1 to %d bytes", MaxDomainName)}
	case c.typ == CmdPutDomain && (len(c.domain) == 0 || len(c.domain) > MaxDomainConfig):
		return &Error{Code: CodeInvalidArgument, Field: "config", Message: fmt.Sprintf("must be 1 to %d bytes", MaxDomainConfig)}
	}
	return nil
}

// applyDomain applies CmdPutDomain or CmdDeleteDomain.
func (a *applier) applyDomain(tx *persist.Tx, c *command) (*Error, error) {
	if e := domainError(c); e != nil {
		return e, nil
	}
	t := &a.f.domains
	key := domainKeyPrefix + c.name
	if c.typ == CmdDeleteDomain {
		if _, ok := t.lookup(c.name); !ok {
			return &Error{Code: CodeNotFound, Field: "domain", Message: fmt.Sprintf("domain %q does not exist", c.name)}, nil
		}
		if _, err := tx.DeletePolicy(key); err != nil {
			return nil, err
		}
		t.stage(c.name, nil)
		return nil, nil
	}
	cfg := bytes.Clone(c.domain) // the entry's bytes are reused
	if err := tx.PutPolicy(key, cfg); err != nil {
		return nil, err
	}
	t.stage(c.name, cfg)
	return nil, nil
}

// reservedPolicyName reports a name that would collide with a domain's key.
func reservedPolicyName(name string) bool { return strings.HasPrefix(name, "\x00") }

// domainTable is the in-memory copy of the domains. The apply goroutine
// stages changes and publishes them after commit, like policies.
type domainTable struct {
	mu      sync.RWMutex
	m       map[string][]byte
	pending map[string][]byte // nil value: deleted; apply goroutine only
	version atomic.Uint64
}

func (t *domainTable) lookup(name string) ([]byte, bool) {
	if cfg, ok := t.pending[name]; ok {
		return cfg, cfg != nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	cfg, ok := t.m[name]
	return cfg, ok
}

func (t *domainTable) stage(name string, cfg []byte) {
	if t.pending == nil {
		t.pending = map[string][]byte{}
	}
	t.pending[name] = cfg
}

func (t *domainTable) publish() {
	if len(t.pending) == 0 {
		return
	}
	t.mu.Lock()
	if t.m == nil {
		t.m = map[string][]byte{}
	}
	for name, cfg := range t.pending {
		if cfg == nil {
			delete(t.m, name)
		} else {
			t.m[name] = cfg
		}
	}
	t.mu.Unlock()
	t.version.Add(1)
	clear(t.pending)
}

func (t *domainTable) discard() { clear(t.pending) }

// loadEntry takes a policies-bucket entry that is a domain; false for a policy.
func (t *domainTable) loadEntry(into map[string][]byte, key string, enc []byte) bool {
	name, ok := strings.CutPrefix(key, domainKeyPrefix)
	if ok {
		into[name] = bytes.Clone(enc)
	}
	return ok
}

func (t *domainTable) set(m map[string][]byte) {
	t.mu.Lock()
	t.m = m
	t.mu.Unlock()
	t.version.Add(1)
}

// Domain returns this replica's copy of an RLS domain's configuration.
func (f *FSM) Domain(name string) (Domain, bool) {
	f.domains.mu.RLock()
	defer f.domains.mu.RUnlock()
	cfg, ok := f.domains.m[name]
	return Domain{Name: name, Config: cfg}, ok
}

// Domains returns every RLS domain sorted by name.
func (f *FSM) Domains() []Domain {
	f.domains.mu.RLock()
	ds := make([]Domain, 0, len(f.domains.m))
	for name, cfg := range f.domains.m {
		ds = append(ds, Domain{Name: name, Config: cfg})
	}
	f.domains.mu.RUnlock()
	sort.Slice(ds, func(i, j int) bool { return ds[i].Name < ds[j].Name })
	return ds
}

// DomainsVersion changes whenever this replica's domains change (it is
// local, not replicated): readers that compile configurations cache by it.
func (f *FSM) DomainsVersion() uint64 { return f.domains.version.Load() }
