package cluster

import "github.com/limitd/limitd/cluster/backup"

// Backups returns the node's backup taker (package backup; service.Backuper).
func (n *Node) Backups() *backup.Taker {
	t := &backup.Taker{Raft: n.raft, FSM: n.fsm, DataDir: n.cfg.DataDir, NodeID: n.cfg.NodeID,
		ApplyTimeout: n.cfg.ApplyTimeout, Logger: n.logger}
	if n.ahead != nil { // a nil *ahead in the interface would not be nil
		t.Ahead = n.ahead
	}
	return t
}
