package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/limitd/limitd/cluster/forward"

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

// clusterRecordPrefix is the node table's prefix for the data groups'
// placement records (package groups: each group's leader and replicas, the
// placement plan): no node id has a slash, so they never read as members.
const clusterRecordPrefix = "cluster/"

// ClusterRecord is this replica's copy of the record under key (a key
// under "cluster/"); "" and false when none was written.
func (c *Catalog) ClusterRecord(key string) (string, bool) {
	if !strings.HasPrefix(key, clusterRecordPrefix) {
		return "", false
	}
	return c.fsm.NodeAddr(key)
}

// NodeHTTPAddr is the HTTP address node id registered in the node table.
func (c *Catalog) NodeHTTPAddr(id string) (string, bool) {
	if strings.Contains(id, "/") {
		return "", false
	}
	return c.fsm.NodeAddr(id)
}

// PutClusterRecord writes a placement record through group 0's leader
// (from any node: a data group's leader records itself where every node
// reads it). Node-to-node only (pathClusterRecord): the record is not a
// client's command. The groups record is not one of them: it is written
// once, at bootstrap, by PutGroupsRecord.
func (c *Catalog) PutClusterRecord(ctx context.Context, key, v string) error {
	if err := clusterRecordKey(key); err != nil {
		return err
	}
	return c.putRecord(ctx, key, v)
}

func clusterRecordKey(key string) error {
	if !strings.HasPrefix(key, clusterRecordPrefix) || key == groupsRecordKey || len(key) > 128 {
		return fmt.Errorf("cluster record %q: not a placement record", key)
	}
	return nil
}

// pathClusterRecord is group 0's leader's endpoint for a forwarded
// PutClusterRecord.
const pathClusterRecord = "/internal/v1/cluster-record"

type clusterRecordRequest struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// putClusterRecord is Catalog.putRecord: applied on the leader, posted to
// it from a follower, retried while nothing was proposed.
func putClusterRecord(n *Node) func(ctx context.Context, key, v string) error {
	return func(ctx context.Context, key, v string) error {
		return n.onLeader(ctx,
			func() error {
				_, err := n.await(ctx, n.raft.Apply(fsm.EncodeSetNode(key, v), n.cfg.ApplyTimeout))
				return err
			},
			func(addr string) error {
				return n.fwd.PostJSON(ctx, addr, pathClusterRecord, clusterRecordRequest{Key: key, Value: v})
			})
	}
}

// clusterRecordHandler serves pathClusterRecord on the leader (behind the
// node-to-node authentication): only keys under "cluster/", never the
// groups record, and values of one line of the node table's size.
func clusterRecordHandler(n *Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := forward.ReadBody(w, r, 64<<10)
		if !ok {
			return
		}
		var req clusterRecordRequest
		if err := json.Unmarshal(body, &req); err != nil {
			forward.WriteBadRequest(w, "decode cluster record: "+err.Error())
			return
		}
		if err := clusterRecordKey(req.Key); err != nil {
			forward.WriteBadRequest(w, err.Error())
			return
		}
		if !n.IsLeader() {
			forward.WriteError(w, errRetry)
			return
		}
		if _, err := n.await(r.Context(), n.raft.Apply(fsm.EncodeSetNode(req.Key, req.Value), n.cfg.ApplyTimeout)); err != nil {
			forward.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}\n"))
	}
}
