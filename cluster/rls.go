package cluster

import (
	"context"

	"github.com/limitd/limitd/fsm"
)

// Envoy RLS domains, replicated through the log like policies
// (fsm/domain.go). The Raft layer only replicates them: a configuration is
// parsed and validated by the service layer (service/rls.go) on the node
// that receives it, and its canonical form is what the log carries, so
// every replica compiles the same rules.

// PutRLSDomain stores a domain's canonical configuration (validated by the
// caller) through the leader. Errors as PutPolicy's.
func (c *Catalog) PutRLSDomain(ctx context.Context, name string, canonical []byte) error {
	return c.applyAdmin(ctx, fsm.EncodePutDomain(name, canonical))
}

// DeleteRLSDomain removes a domain through the leader; *fsm.Error not_found
// when it does not exist.
func (c *Catalog) DeleteRLSDomain(ctx context.Context, name string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeleteDomain(name))
}

// RLSDomainConfig returns this replica's canonical configuration of a domain.
func (c *Catalog) RLSDomainConfig(name string) ([]byte, bool) {
	d, ok := c.fsm.Domain(name)
	return d.Config, ok
}

// RLSDomains returns this replica's domains sorted by name.
func (c *Catalog) RLSDomains() []fsm.Domain { return c.fsm.Domains() }

// RLSDomainsVersion changes whenever this replica's domains change.
func (c *Catalog) RLSDomainsVersion() uint64 { return c.fsm.DomainsVersion() }
