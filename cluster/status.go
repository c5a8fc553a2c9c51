package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"
)

// Errors a caller of Node must tell apart. The HTTP layer maps both to 503.
var (
	// ErrNoLeader: no leader could be reached within the wait. Nothing was
	// proposed, so the request may be retried freely.
	ErrNoLeader = errors.New("no raft leader available")
	// ErrOutcomeUnknown: the request reached a leader that lost leadership (or
	// shut down) before it could confirm the commit. It may or may not have been
	// applied; retry with the same request_id to find out without double counting.
	ErrOutcomeUnknown = errors.New("outcome unknown: leadership was lost while the request was in flight")
	// ErrUnavailable: this node cannot serve at all (its state machine
	// stopped, for example on a full disk); the error's text names the cause.
	// Nothing was proposed. Errors matching it also match ErrNoLeader, so a
	// caller that only knows ErrNoLeader still answers 503 unavailable.
	ErrUnavailable = errors.New("node unavailable")
)

// unavailableError carries the cause of an ErrUnavailable.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string { return "node unavailable: " + e.cause.Error() }
func (e *unavailableError) Unwrap() error { return e.cause }
func (e *unavailableError) Is(target error) bool {
	return target == ErrUnavailable || target == ErrNoLeader
}

// Status is this node's view of the cluster, served as GET /v1/cluster.
type Status struct {
	NodeID       string   `json:"node_id"`
	State        string   `json:"state"` // Leader, Follower, Candidate, Shutdown
	LeaderID     string   `json:"leader_id"`
	LeaderHTTP   string   `json:"leader_http_addr"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Members      []Member `json:"members"`
	// Unavailable, when set, is why this node does not serve at all (its
	// state machine stopped, its log could not be written, its history
	// diverged from the cluster's, it was removed), with the recovery step.
	Unavailable string `json:"unavailable,omitempty"`
}

// Member is one server in the Raft configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"` // Voter, Nonvoter
	Leader   bool   `json:"leader"`
	// Health is this node's knowledge of the member: HealthHealthy or
	// HealthUnhealthy where it can know (the leader: whether each member
	// answered replication within the last few heartbeats; a follower:
	// itself and the leader, by its recent contact with the leader), and
	// HealthUnknown where it cannot (a follower about the other followers,
	// a node without a leader about its peers).
	Health string `json:"health"`
	// Healthy is Health == HealthHealthy (kept for existing clients:
	// false also when unknown).
	Healthy bool `json:"healthy"`
}

// Member health values.
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
	HealthUnknown   = "unknown"
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
	if err := n.unavailable(); err != nil {
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
			m.Health = health(inContact && n.unavailable() == nil)
		case s.ID == leader && inContact:
			m.Health = HealthHealthy
		default:
			m.Health = HealthUnknown
		}
		m.Healthy = m.Health == HealthHealthy
		st.Members = append(st.Members, m)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].ID < st.Members[j].ID })
	return st, nil
}

// Digest fingerprints this node's replicated state together with the index
// it reflects. Two replicas with the same applied index must have the same
// digest. Applies wait while it is computed.
func (n *Node) Digest() (string, uint64, error) { return n.fsm.DigestAt() }
