package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd/fsm"
)

// A policy change that binds leased budget (fsm/leasefence.go) is
// acknowledged only after the leases granted under the policy's earlier
// versions have ended. The state machine answers such a change with
// fsm.LeaseFence; the node that receives the answer — the leader for its own
// proposal, a follower for a forwarded one — waits fence.Wait on its own
// monotonic clock before answering. The invariant: every such lease was
// granted (stamped by a leader) before the change was applied, its holder
// spends it at most Valid ≤ Wait after sending its request, and the answer
// arrives after the apply; so when the wait is over no holder — partitioned
// or not — spends budget counted under the old spec, whatever the nodes'
// wall clocks say.

// awaitLeaseFence waits out resp's fence, if it is one. A wait that cannot
// end before ctx's deadline answers at once with an unavailable error that
// says so: the change is applied, and repeating the request (it is
// idempotent) after the wait acknowledges it.
func awaitLeaseFence(ctx context.Context, resp interface{}) error {
	f, ok := resp.(fsm.LeaseFence)
	if !ok || f.Wait <= 0 {
		return nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < f.Wait {
		return leaseFenceError(f)
	}
	t := time.NewTimer(f.Wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return leaseFenceError(f)
	}
}

func leaseFenceError(f fsm.LeaseFence) error {
	return &fsm.Error{Code: fsm.CodeUnavailable, Field: "policy", Message: fmt.Sprintf(
		"policy %q: the change is applied but binds every node only once the leases granted under its earlier version have ended, %v after it was applied; the request's deadline ends sooner: repeat it after %v to have it acknowledged",
		f.Policy, f.Wait, f.Wait)}
}
