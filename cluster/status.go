package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/nodeapi"
)

// Errors a caller of Node must tell apart, defined in the leaf package
// nodeapi so that the layers above match them without importing this one.
var (
	ErrNoLeader       = nodeapi.ErrNoLeader
	ErrOutcomeUnknown = nodeapi.ErrOutcomeUnknown
	ErrUnavailable    = nodeapi.ErrUnavailable
)

// Status and Member are the views of GET /v1/cluster (nodeapi).
type (
	Status = nodeapi.Status
	Member = nodeapi.Member
)

// Member health values.
const (
	HealthHealthy   = nodeapi.HealthHealthy
	HealthUnhealthy = nodeapi.HealthUnhealthy
	HealthUnknown   = nodeapi.HealthUnknown
)

func health(ok bool) string {
	if ok {
		return HealthHealthy
	}
	return HealthUnhealthy
}

// Status reports this node's view of the cluster.
func (n *Node) Status(ctx context.Context) (Status, error) {
	_, leader := n.raft.LeaderWithID()
	st := Status{
		NodeID:       n.cfg.NodeID,
		State:        n.raft.State().String(),
		LeaderID:     string(leader),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.fsm.AppliedIndex(),
	}
	if err := n.vit.unavailable(); err != nil {
		st.Unavailable = err.Error()
	}
	nodes := n.fsm.Nodes()
	st.LeaderHTTP = nodes[string(leader)]
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return st, fmt.Errorf("read raft configuration: %w", err)
	}
	isLeader := n.IsLeader()
	self := raft.ServerID(n.cfg.NodeID)
	// A follower knows its own contact with the leader, nothing about the
	// other followers; a node without a leader knows nothing of its peers.
	inContact := leader != "" && time.Since(n.raft.LastContact()) < 5*n.cfg.HeartbeatTimeout
	for _, s := range f.Configuration().Servers {
		m := Member{
			ID:       string(s.ID),
			RaftAddr: string(s.Address),
			HTTPAddr: nodes[string(s.ID)],
			Suffrage: s.Suffrage.String(),
			Leader:   s.ID == leader,
		}
		switch {
		case isLeader && s.ID == self:
			m.Health = HealthHealthy
		case isLeader:
			m.Health = health(n.metrics.peerHealthy(string(s.ID)))
		case s.ID == self:
			m.Health = health(inContact && n.vit.unavailable() == nil)
		case s.ID == leader && inContact:
			m.Health = HealthHealthy
		default:
			m.Health = HealthUnknown
		}
		m.Healthy = m.Health == HealthHealthy
		if s.ID == self && n.disk != nil { // diskwatch.go
			m.LogWriteP99Ms = float64(n.disk.lastP99().Microseconds()) / 1000
			m.DiskStalled = n.disk.stalled.Load()
		}
		st.Members = append(st.Members, m)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st, nil
}

// AppliedIndex is the last log index the state machine applied (still
// readable after Close, for the final log line of a clean stop).
func (n *Node) AppliedIndex() uint64 { return n.fsm.AppliedIndex() }

// Digest fingerprints this node's replicated state together with the index
// it reflects. Two replicas with the same applied index must have the same
// digest. Applies wait while it is computed.
func (c *Catalog) Digest() (string, uint64, error) { return c.fsm.DigestAt() }
