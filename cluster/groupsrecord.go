package cluster

import (
	"context"

	"github.com/limitd/limitd/fsm"
)

// groupsRecordKey is the node table entry under which group 0 records the
// cluster's data groups (package groups: their count and the slot map), the
// bootstrap-time decision every node compares its --data-groups with. Like
// the incarnation records (vote.go), a prefix no node id has keeps it apart
// from the HTTP addresses without a new command; status and membership read
// the table by node id only.
const groupsRecordKey = "cluster/groups"

// GroupsRecord is this replica's copy of the groups record ("" and false
// before one was written: a one-group cluster).
func (c *Catalog) GroupsRecord() (string, bool) {
	v, ok := c.fsm.Nodes()[groupsRecordKey]
	return v, ok
}

// PutGroupsRecord writes the groups record through this node's Raft, on the
// leader only (raft.ErrNotLeader elsewhere): the record is written once, at
// bootstrap, by whichever node leads group 0 then, and never forwarded, so
// that no client request can rewrite it.
func (c *Catalog) PutGroupsRecord(ctx context.Context, v string) error {
	_, err := c.leaderApply(ctx, fsm.EncodeSetNode(groupsRecordKey, v))
	return err
}
