package cluster

import "github.com/hashicorp/raft"

// SetWrapSnapshots makes a node opened with cfg wrap the Raft snapshot store
// it gives Raft (slowing or watching installs from the leader).
func SetWrapSnapshots(cfg *Config, wrap func(raft.SnapshotStore) raft.SnapshotStore) {
	cfg.wrapSnapshots = wrap
}
