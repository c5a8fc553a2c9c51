// Package service owns what limitd's requests mean, independent of the
// transport that carries them: the typed operations (Check, CheckAll, Batch,
// Peek, ResetKey, policies, membership, status), the validation of every
// field with errors that name it, the limits on client input, and the
// mapping of the node's failures to one typed Error whose Code the state
// machine, HTTP and gRPC share.
//
// Front ends (api for HTTP/JSON, the gRPC server) parse their wire format into
// the request types here and render the results; they make no decisions of
// their own, so every transport answers alike. Below, a Node (cluster.Node,
// or a future shard router) decides. service/DESIGN.md says why.
package service

import (
	"context"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/fsm"
)

// Node is what the service needs from the replicated node. cluster.Node
// implements it; so can anything that routes to several clusters.
//
// Errors: *fsm.Error for refusals decided by the state machine or the node
// (such as an unknown policy or member), cluster.ErrNoLeader (nothing was
// proposed), cluster.ErrOutcomeUnknown (may or may not have been applied),
// context errors, or anything else (a bug or an I/O failure: internal).
type Node interface {
	// Check decides ops through the Raft leader, results in order. A per-op
	// refusal is in Result.Err; a returned error means no op was decided.
	Check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error)
	// PutPolicy creates or replaces a policy (validated by the caller).
	PutPolicy(ctx context.Context, p fsm.Policy) error
	// DeletePolicy deletes a policy; *fsm.Error not_found when absent.
	DeletePolicy(ctx context.Context, name string) error
	// ResetKey forgets c.Key's state under c's limit (c.Cost is ignored).
	ResetKey(ctx context.Context, c fsm.Check) error
	// Policy and Policies read this node's replicated copy (Policies sorted
	// by name); they may lag the leader.
	Policy(name string) (fsm.Policy, bool)
	Policies() []fsm.Policy
	// Join adds (or updates) a voter; Remove takes one out. Both go through
	// the leader.
	Join(ctx context.Context, id, raftAddr, httpAddr string) error
	Remove(ctx context.Context, id string) error
	// Status is this node's view of the cluster.
	Status(ctx context.Context) (cluster.Status, error)
	// Ready is nil when there is a leader and this node caught up with it.
	Ready() error
}

// Observer is told the outcome of every check the service sends to the node,
// so that a front end can keep metrics. It is called on the request's
// goroutine and must not block. Arguments are values: a pointer passed
// through an interface would move every check's result to the heap.
type Observer interface {
	// Decided reports a fresh decision: not a replay, not a peek.
	Decided(l Limit, d fsm.Decision)
	// Failed reports a check that got no decision.
	Failed(l Limit)
}

// Config tunes the service. The zero value of every field selects its default.
type Config struct {
	// MaxBatch bounds the checks of one CheckAll or Batch (default 1000).
	MaxBatch int
	// RequestTimeout bounds how long an operation waits for the cluster
	// (default 5s), so that nothing hangs when there is no quorum.
	RequestTimeout time.Duration
	// Observer, when set, is told every check's outcome.
	Observer Observer
}

// Defaults.
const (
	DefaultMaxBatch       = 1000
	DefaultRequestTimeout = cluster.DefaultApplyTimeout
)

// Limits on client input, defined once in fsm (which enforces them again on
// every log entry).
const (
	MaxKeyBytes       = fsm.MaxKeyBytes
	MaxRequestIDBytes = fsm.MaxRequestIDBytes
	MaxPolicyName     = fsm.MaxPolicyName
)

// InlineName names inline limits (given with the check rather than by a
// policy) in headers and metrics.
const InlineName = "inline"

// Service is the transport-neutral API of a node. It is safe for concurrent use.
type Service struct {
	node Node
	cfg  Config
	obs  Observer
	// timeout is cfg.RequestTimeout as text, for error messages.
	timeout string
}

// New returns the service for node.
func New(node Node, cfg Config) *Service {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	return &Service{node: node, cfg: cfg, obs: obs, timeout: cfg.RequestTimeout.String()}
}

// Config returns the configuration in effect, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

type nopObserver struct{}

func (nopObserver) Decided(Limit, fsm.Decision) {}
func (nopObserver) Failed(Limit)                {}

// context bounds one operation's wait for the cluster.
func (s *Service) context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// nodeError maps an error from the node.
func (s *Service) nodeError(err error) *Error { return fromNode(err, s.timeout) }

// Limit describes the limit a check is decided under, for RateLimit headers
// and metrics.
type Limit struct {
	Name  string    // the policy name, or InlineName
	Spec  algo.Spec // valid when Known
	Known bool      // false when the policy is not (yet) known on this node
}

// limitOf describes policy from this node's replicated copy; the state
// machine decides whether it exists.
func (s *Service) limitOf(policy string) Limit {
	p, ok := s.node.Policy(policy)
	return Limit{Name: policy, Spec: p.Spec, Known: ok}
}

// cluster.Node is the Node every binary uses.
var _ Node = (*cluster.Node)(nil)
