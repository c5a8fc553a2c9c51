package cluster

import (
	"context"

	"github.com/limitd/limitd/cluster/backup"
	"github.com/limitd/limitd/nodeapi"
)

// Backups returns the node's backup taker (package backup).
func (n *Node) Backups() *backup.Taker {
	t := &backup.Taker{Raft: n.raft, FSM: n.fsm, DataDir: n.cfg.DataDir, NodeID: n.cfg.NodeID,
		ApplyTimeout: n.cfg.ApplyTimeout, Logger: n.logger}
	if n.ahead != nil { // a nil *ahead in the interface would not be nil
		t.Ahead = n.ahead
	}
	return t
}

// OpenBackup is Backups().Open for consumers that know only nodeapi (the
// HTTP API's GET /v1/cluster/snapshot).
func (n *Node) OpenBackup(ctx context.Context) (nodeapi.Backup, error) {
	b, err := n.Backups().Open(ctx)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return b, nil
}
