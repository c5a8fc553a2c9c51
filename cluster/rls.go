package cluster

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/rls"
)

// Envoy RLS domains, replicated through the log like policies (fsm/domain.go).
// A configuration is validated completely with package rls on the node that
// receives it, and its canonical form is what the log carries, so every
// replica compiles the same rules.

// PutRLSDomain validates an envoy ratelimit configuration (YAML or JSON) and
// stores it through the leader. name, when not empty, must equal the
// configuration's domain. Errors: *rls.Error for an invalid configuration
// (nothing is proposed), *fsm.Error from the state machine, and Apply's
// errors (ErrNoLeader, ErrOutcomeUnknown, context errors).
func (n *Node) PutRLSDomain(ctx context.Context, name string, config []byte) (*rls.Domain, error) {
	d, err := rls.Parse("", config)
	if err != nil {
		return nil, err
	}
	if name != "" && d.Name() != name {
		return nil, &rls.Error{Field: "domain", Message: fmt.Sprintf("%q does not match the domain in the path, %q", d.Name(), name)}
	}
	return d, n.applyDomain(ctx, fsm.EncodePutDomain(d.Name(), d.Canonical()))
}

// DeleteRLSDomain removes a domain through the leader (*fsm.Error not_found
// when it does not exist).
func (n *Node) DeleteRLSDomain(ctx context.Context, name string) error {
	return n.applyDomain(ctx, fsm.EncodeDeleteDomain(name))
}

func (n *Node) applyDomain(ctx context.Context, cmd []byte) error {
	resp, err := n.Apply(ctx, cmd)
	if err != nil {
		return err
	}
	if e, ok := resp.(error); ok && e != nil {
		return e
	}
	return nil
}

// RLSDomainConfig returns this replica's canonical configuration of a domain.
func (n *Node) RLSDomainConfig(name string) ([]byte, bool) {
	d, ok := n.fsm.Domain(name)
	return d.Config, ok
}

// RLSDomains returns this replica's domains sorted by name.
func (n *Node) RLSDomains() []fsm.Domain { return n.fsm.Domains() }

// RLSDomainsVersion changes whenever this replica's domains change.
func (n *Node) RLSDomainsVersion() uint64 { return n.fsm.DomainsVersion() }

// LoadRLSDomains writes domains (from --rls-config, already validated by
// rls.LoadPath) through the leader, skipping those stored as given; it retries
// until a leader exists or ctx ends. Domains that are stored but not given
// are kept: the file adds and replaces, the API deletes.
func (n *Node) LoadRLSDomains(ctx context.Context, domains []*rls.Domain) error {
	for _, d := range domains {
		if cur, ok := n.RLSDomainConfig(d.Name()); ok && bytes.Equal(cur, d.Canonical()) {
			continue
		}
		for {
			err := n.applyDomain(ctx, fsm.EncodePutDomain(d.Name(), d.Canonical()))
			if err == nil {
				break
			}
			if _, ok := err.(*fsm.Error); ok {
				return fmt.Errorf("rls domain %s: %w", d.Name(), err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
