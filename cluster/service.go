package cluster

import (
	"context"

	"github.com/limitd/limitd/fsm"
)

// Typed admin operations: what the service layer calls instead of proposing
// encoded commands and inspecting interface{} responses. Each goes through
// the leader (forwarded when this node follows) and returns the state
// machine's refusal as *fsm.Error, or ErrNoLeader, ErrOutcomeUnknown or a
// context error like Check.

// PutPolicy creates or replaces a policy. A change that binds leased budget
// returns once the leases under the earlier version have ended (leasefence.go).
func (c *Catalog) PutPolicy(ctx context.Context, p fsm.Policy) error {
	return c.applyPolicy(ctx, fsm.EncodePutPolicy(p))
}

// DeletePolicy deletes a policy; *fsm.Error not_found when it does not exist.
// It returns as PutPolicy does.
func (c *Catalog) DeletePolicy(ctx context.Context, name string) error {
	return c.applyPolicy(ctx, fsm.EncodeDeletePolicy(name))
}

func (c *Catalog) applyPolicy(ctx context.Context, cmd []byte) error {
	resp, err := c.propose(ctx, cmd)
	if err != nil {
		return err
	}
	if err := responseError(resp); err != nil {
		return err
	}
	return awaitLeaseFence(ctx, resp)
}

// ResetKey forgets c.Key's state under c's limit (c.Cost is ignored).
func (n *Node) ResetKey(ctx context.Context, c fsm.Check) error {
	return applyAdmin(ctx, n.Apply, fsm.EncodeResetKey(c))
}

// applyAdmin proposes cmd through propose (Node.Apply) and returns the
// refusal its response carries.
func applyAdmin(ctx context.Context, propose proposer, cmd []byte) error {
	resp, err := propose(ctx, cmd)
	if err != nil {
		return err
	}
	return responseError(resp)
}

// responseError extracts the error an admin command's response carries: nil,
// or an error such as *fsm.Error (a typed nil pointer counts as no error).
func responseError(resp interface{}) error {
	switch r := resp.(type) {
	case *fsm.Error:
		if r == nil {
			return nil
		}
		return r
	case error:
		return r
	}
	return nil
}
