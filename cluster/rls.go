package cluster

import (
	"bytes"
	"context"
	"errors"
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
// configuration's domain. Every error is an *fsm.Error with a code:
// invalid_argument naming "config.<YAML path>" (nothing is proposed) or
// "domain", unavailable (no leader or no answer in time: repeating a put is
// safe), outcome_unknown, internal.
func (n *Node) PutRLSDomain(ctx context.Context, name string, config []byte) (*rls.Domain, *fsm.Error) {
	d, err := rls.Parse("", config)
	if err != nil {
		return nil, domainOpError(err)
	}
	if name != "" && d.Name() != name {
		return nil, &fsm.Error{Code: fsm.CodeInvalidArgument, Field: "domain",
			Message: fmt.Sprintf("the configuration's domain %q does not match %q", d.Name(), name)}
	}
	if e := n.applyDomain(ctx, fsm.EncodePutDomain(d.Name(), d.Canonical())); e != nil {
		return nil, e
	}
	return d, nil
}

// DeleteRLSDomain removes a domain through the leader. Errors as
// PutRLSDomain's, and not_found when the domain does not exist.
func (n *Node) DeleteRLSDomain(ctx context.Context, name string) *fsm.Error {
	return n.applyDomain(ctx, fsm.EncodeDeleteDomain(name))
}

func (n *Node) applyDomain(ctx context.Context, cmd []byte) *fsm.Error {
	resp, err := n.Apply(ctx, cmd)
	if err != nil {
		return domainOpError(err)
	}
	if e, ok := resp.(error); ok && e != nil {
		return domainOpError(e)
	}
	return nil
}

// domainOpError types an error of a domain operation.
func domainOpError(err error) *fsm.Error {
	var fe *fsm.Error
	var re *rls.Error
	switch {
	case errors.As(err, &fe) && fe.Code != "":
		return fe
	case errors.As(err, &re):
		field := "config"
		if re.Field != "" {
			field += "." + re.Field
		}
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Field: field, Message: re.Error()}
	case errors.Is(err, ErrTooLarge):
		// An admin command over MaxCommandBytes: 413, not 500 (issue 22).
		return &fsm.Error{Code: fsm.CodePayloadTooLarge, Field: "config", Message: err.Error() + "; split the domain's descriptors into several domains"}
	case errors.Is(err, ErrOutcomeUnknown):
		return &fsm.Error{Code: fsm.CodeOutcomeUnknown, Message: "leadership changed while the change was in flight, so it may or may not have been applied; repeating it is safe"}
	case errors.Is(err, ErrNoLeader), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &fsm.Error{Code: fsm.CodeUnavailable, Message: "the cluster did not apply the change: " + err.Error() + "; repeating it is safe"}
	}
	return &fsm.Error{Code: fsm.CodeInternal, Message: err.Error()}
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
			e := n.applyDomain(ctx, fsm.EncodePutDomain(d.Name(), d.Canonical()))
			if e == nil {
				break
			}
			if e.Code != fsm.CodeUnavailable && e.Code != fsm.CodeOutcomeUnknown {
				return fmt.Errorf("rls domain %s: %w", d.Name(), e)
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
