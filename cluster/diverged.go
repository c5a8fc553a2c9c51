package cluster

import (
	"fmt"
	"io"

	"github.com/limitd/limitd/cluster/logstore"
	"github.com/limitd/limitd/fsm"
)

// historyDiverged stops the node for good: its applied state is ahead of the
// log its leader gives it. Health, /readyz, /v1/cluster and the log say so,
// and limitd serve exits with the recovery step.
func (v *vitals) historyDiverged(err error) { v.fail(err, true) }

// restoreGuard is the state machine as Raft sees it. It refuses a snapshot
// that would take this replica back behind what it already applied: in one
// history a leader sends a snapshot only when it no longer holds the entries a
// follower needs, and those lie above every index the follower applied (a
// replica applies only committed entries, and every leader holds them). A
// snapshot behind the applied index therefore comes from a history that
// diverged from this node's (or its state was damaged), so the node stops as
// it does when a leader replaces applied log entries (logstore.Guarded). Restore of
// a state machine set aside after an unclean stop starts from index 0 and is
// never behind.
type restoreGuard struct {
	*fsm.FSM
	diverged func(error)
}

// Restore installs the snapshot and stops the node if it went back in the log.
func (g restoreGuard) Restore(rc io.ReadCloser) error {
	before := g.FSM.AppliedIndex()
	if err := g.FSM.Restore(rc); err != nil {
		return err
	}
	if after := g.FSM.AppliedIndex(); after < before {
		err := fmt.Errorf("history diverged: a snapshot up to index %d was installed, but this node's state machine had already applied up to %d, so its earlier answers reflect entries that snapshot's history does not have; to recover, %s", after, before, logstore.RecoveryStep)
		g.diverged(err)
		return err
	}
	return nil
}
