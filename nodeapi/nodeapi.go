// Package nodeapi is the contract every layer shares about a replicated
// node, and owns nothing but its values: what a check, an op, a decision, a
// result, a policy, an RLS domain and the one typed Error (with its Codes)
// are; the input limits; the quota lease contract (requests, grants,
// returns, the hook and their bounds); the sentinel errors a caller of the
// node must tell apart; the status and member views served as GET
// /v1/cluster; the bound of one Raft entry and the default wait for one.
// It imports only algo (itself pure, importing nothing of limitd's), so
// that fsm (which decides and aliases these types), cluster (which returns
// them), service (which validates and maps them) and the front ends (which
// render them) agree on them without the front ends importing the Raft
// layer or the storage. Like etcd's rpctypes and Consul's structs.
package nodeapi

import (
	"errors"
	"io"
	"time"
)

// Errors a caller of the node must tell apart. Service maps them to codes
// (service.fromNode); none of them means a request was refused.
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
	// ErrTooLarge: the ops cannot be proposed as one entry within the entry
	// bounds (MaxEntryBytes and the op count) and cannot be split (one
	// atomic unit). Nothing was proposed. HTTP answers 413.
	ErrTooLarge = errors.New("too large for one raft entry")
)

// MaxEntryBytes bounds the encoded ops of one check entry, and so the body
// of a forwarded batch. A public request within the HTTP API's default body
// limit (1 MiB of JSON) always fits: the binary encoding of a check is
// smaller than its JSON. The HTTP API takes its MaxBodyBytes ceiling from
// here.
const MaxEntryBytes = 4 << 20

// DefaultApplyTimeout is how long an operation waits for the cluster by
// default (the node's --apply-timeout and the service's RequestTimeout):
// past it a request is answered unavailable rather than hanging without a
// quorum.
const DefaultApplyTimeout = 5 * time.Second

// Status is a node's view of the cluster, served as GET /v1/cluster.
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
	// Healthy is Health == HealthHealthy (false also when unknown): a
	// field of /v1/cluster's documented JSON (docs/API.md), for probes that
	// want a boolean, so it stays.
	Healthy bool `json:"healthy"`
	// LogWriteP99Ms and DiskStalled are the member's own Raft log writes
	// (p99 over the disk-stall window, ms) and whether they have stayed
	// above the disk-stall bound for a window: reported by a node for
	// itself only (cluster/diskwatch.go).
	LogWriteP99Ms float64 `json:"log_write_p99_ms,omitempty"`
	DiskStalled   bool    `json:"disk_stalled,omitempty"`
}

// Member health values.
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
	HealthUnknown   = "unknown"
)

// LatencyBuckets are the histogram buckets (seconds) of every limitd
// latency, the Raft layer's and the front ends': 100 µs on loopback up to
// the request deadline, past which a request has already been answered 503.
func LatencyBuckets(deadline time.Duration) []float64 {
	var b []float64
	top := deadline.Seconds()
	for d := 0.0001; d < top; d *= 10 {
		for _, m := range []float64{1, 2.5, 5} {
			if v := d * m; v < top {
				b = append(b, v)
			}
		}
	}
	return append(b, top)
}

// Backup is a consistent snapshot of a node's replicated state, opened for
// streaming in limitd's backup file format (cluster/backup.go describes it).
// Close releases it.
type Backup interface {
	// Point is the Raft index the state reflects and that entry's term.
	Point() (index, term uint64)
	// WriteTo writes the whole backup file to w.
	WriteTo(w io.Writer) (int64, error)
	Close() error
}
