// Package service owns what limitd's requests mean, independent of the
// transport that carries them: the typed operations (Check, CheckAll, Batch,
// Peek, ResetKey, policies, membership, status), the validation of every
// field with errors that name it, the limits on client input, and the
// mapping of the node's failures to one typed Error whose Code the state
// machine, HTTP and gRPC share.
//
// Front ends (api for HTTP/JSON, the gRPC server) parse their wire format into
// the request types here and render the results; they make no decisions of
// their own, so every transport answers alike. Below, a Node decides: the
// interface is defined here, by its consumer, and cluster.Node (or a future
// shard router) satisfies it without knowing this package, which imports
// only the leaf nodeapi for the values, errors and views they share. The
// lease runtime is package lease; what a lease means to a check is here.
// service/DESIGN.md says why.
package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/lease"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/rls"
)

// Node is what the service needs of the replicated node itself: checks,
// key resets, membership, its status and readiness. Every other capability
// the service builds on is an interface of its own (LeaderLocator, Refuser,
// Leaser, Policies, Plans, Domains, Lists, Bans, Inventory, Backuper,
// Digester, Alerts, Degrader, UsageHistory) and a field of Deps, so that each is passed to New explicitly
// and a fake can be read against it. cluster.Node provides Node,
// LeaderLocator and Leaser; cluster.Catalog the cluster-wide configuration;
// cluster.OverLimit the Refuser; backup.Taker the Backuper (each checked in
// cluster's consumers_test.go). A node that loses one (a renamed method, a
// changed signature) then fails to compile where Deps is built, rather than
// silently switching off the leader hint, the over-limit cache or leases.
//
// Errors: *nodeapi.Error for refusals decided by the state machine or the node
// (such as an unknown policy or member), nodeapi.ErrNoLeader (nothing was
// proposed), nodeapi.ErrOutcomeUnknown (may or may not have been applied),
// nodeapi.ErrUnavailable, nodeapi.ErrTooLarge,
// context errors, or anything else (a bug or an I/O failure: internal).
type Node interface {
	// Check decides ops through the Raft leader, results in order. A per-op
	// refusal is in Result.Err; a returned error means no op was decided.
	Check(ctx context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error)
	// ResetKey forgets c.Key's state under c's limit (c.Cost is ignored).
	ResetKey(ctx context.Context, c nodeapi.Check) error
	// Join adds (or updates) a voter; Remove takes one out. Both go through
	// the leader.
	Join(ctx context.Context, id, raftAddr, httpAddr string) error
	Remove(ctx context.Context, id string) error
	// Status is this node's view of the cluster.
	Status(ctx context.Context) (nodeapi.Status, error)
	// Ready is nil when there is a leader and this node caught up with it.
	Ready() error
}

// Policies is the replicated policies: writes through the leader, reads of
// this node's copy. Errors as Node's.
type Policies interface {
	// PutPolicy creates or replaces a policy (validated by the caller).
	PutPolicy(ctx context.Context, p nodeapi.Policy) error
	// DeletePolicy deletes a policy; *nodeapi.Error not_found when absent.
	DeletePolicy(ctx context.Context, name string) error
	// Policy and Policies read this node's replicated copy (Policies sorted
	// by name); they may lag the leader.
	Policy(name string) (nodeapi.Policy, bool)
	Policies() []nodeapi.Policy
}

// Deps is every capability the service uses, one field per interface, all
// required: New panics naming a nil one (a wiring bug of the composition
// root, internal/daemon, which then never starts serving), so that no
// capability is found by a type assertion or silently missing at run time.
type Deps struct {
	Node          Node
	LeaderLocator LeaderLocator // the Limitd-Leader hint
	Refuser       Refuser       // the over-limit cache (check.go)
	Leaser        Leaser        // quota leases and their hook (lease.go)
	Policies      Policies
	Plans         Plans        // plans.go
	Domains       Domains      // rls.go
	Lists         Lists        // lists.go
	Bans          Bans         // bans.go
	Inventory     Inventory    // inventory.go
	Backuper      Backuper     // replica.go
	Digester      Digester     // replica.go
	Alerts        Alerts       // webhooks.go
	Degrader      Degrader     // degraded.go
	Usage         UsageHistory // usage.go
}

// Everything is one value that provides every capability (a fake node,
// such as service/nodetest's).
type Everything interface {
	Node
	LeaderLocator
	Refuser
	Leaser
	Policies
	Plans
	Domains
	Lists
	Bans
	Inventory
	Backuper
	Digester
	Alerts
	Degrader
	UsageHistory
}

// DepsOf is the Deps of one value that provides every capability.
func DepsOf(n Everything) Deps {
	return Deps{Node: n, LeaderLocator: n, Refuser: n, Leaser: n, Policies: n, Plans: n,
		Domains: n, Lists: n, Bans: n, Inventory: n, Backuper: n, Digester: n, Alerts: n, Degrader: n, Usage: n}
}

// check panics naming the first nil capability.
func (d Deps) check() {
	for _, c := range []struct {
		name string
		nil  bool
	}{
		{"Node", d.Node == nil}, {"LeaderLocator", d.LeaderLocator == nil}, {"Refuser", d.Refuser == nil},
		{"Leaser", d.Leaser == nil}, {"Policies", d.Policies == nil}, {"Plans", d.Plans == nil},
		{"Domains", d.Domains == nil}, {"Lists", d.Lists == nil}, {"Bans", d.Bans == nil},
		{"Inventory", d.Inventory == nil}, {"Backuper", d.Backuper == nil}, {"Digester", d.Digester == nil},
		{"Alerts", d.Alerts == nil},
		{"Degrader", d.Degrader == nil},
		{"Usage", d.Usage == nil},
	} {
		if c.nil {
			panic("service.New: Deps." + c.name + " is nil: every capability is required")
		}
	}
}

// Observer is told the outcome of every check the service sends to the node,
// so that a front end can keep metrics. It is called on the request's
// goroutine and must not block. Arguments are values: a pointer passed
// through an interface would move every check's result to the heap.
type Observer interface {
	// Decided reports a fresh decision: not a replay, not a peek.
	Decided(l Limit, d nodeapi.Decision)
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
	// leases tunes the lease table; the package's tests set its clock.
	leases lease.Options
	// MaxInlineWindow bounds how long an inline limit may keep a key
	// (inline.go; 0: no bound, limitd serve defaults to
	// DefaultMaxInlineWindow); NoInlineLimits refuses inline limits.
	MaxInlineWindow time.Duration
	NoInlineLimits  bool
	// RefuseCrossSlot: the node routes keys by hash slot to several Raft
	// groups (package groups), so CheckAll refuses checks across slots
	// with cross_slot (hashslots.go); without it they are counted only.
	RefuseCrossSlot bool
	// Slots, when set, is the slot map and its groups (GET
	// /v1/cluster/slots); nil: one group 0 owning every slot (hashslots.go).
	Slots SlotsSource
}

// Defaults.
const (
	DefaultMaxBatch       = 1000
	DefaultRequestTimeout = nodeapi.DefaultApplyTimeout
)

// Limits on client input, defined once in nodeapi (fsm enforces them again on
// every log entry).
const (
	MaxKeyBytes       = nodeapi.MaxKeyBytes
	MaxRequestIDBytes = nodeapi.MaxRequestIDBytes
	MaxPolicyName     = nodeapi.MaxPolicyName
)

// InlineName names inline limits (given with the check rather than by a
// policy) in headers and metrics.
const InlineName = "inline"

// Service is the transport-neutral API of a node. It is safe for concurrent use.
type Service struct {
	node Node // deps.Node, on every check's path
	deps Deps
	cfg  Config
	obs  Observer
	// timeout is cfg.RequestTimeout as text, for error messages.
	timeout   string
	deadlines sharedDeadlines
	crossSlot atomic.Uint64               // check/all requests across hash slots (hashslots.go)
	slotEpoch atomic.Pointer[epochHeader] // Limitd-Slot-Epoch's value (hashslots.go)
	leader    leaderCache
	// specIdents interns inline limits' identities in the over-limit cache.
	specIdents Interner
	// rlsCache holds the node's RLS domains compiled (rls.go).
	rlsCache rls.Cache
	// lists holds the node's allow and deny lists compiled (lists.go).
	lists listCache
	// leases is the node's quota leases (lease.go, package lease).
	leases *lease.Table
	// degraded counts what this node decides alone (degraded.go).
	degraded degradedState
}

// New returns the service over deps; it panics when one is nil (Deps).
func New(deps Deps, cfg Config) *Service {
	deps.check()
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
	s := &Service{node: deps.Node, deps: deps, cfg: cfg, obs: obs, timeout: cfg.RequestTimeout.String()}
	s.deadlines.timeout, s.deadlines.slack = cfg.RequestTimeout, cfg.RequestTimeout/deadlineSlack
	s.leader.loc = deps.LeaderLocator
	s.leases = newLeases(deps.Leaser, cfg.leases)
	s.specIdents.Max = maxSpecIdents
	return s
}

// Config returns the configuration in effect, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

type nopObserver struct{}

func (nopObserver) Decided(Limit, nodeapi.Decision) {}
func (nopObserver) Failed(Limit)                    {}

// context bounds one operation's wait for the cluster by RequestTimeout.
// context.WithTimeout costs four allocations and a timer per request, so it
// is used only where it is needed: a caller's context that ends sooner is
// used as it is, and one that can never be cancelled (see Detach) shares a
// deadline with the other requests of the same instant.
func (s *Service) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return tracing.KeepSpan(s.deadlines.get(), ctx), nopCancel // the span only while tracing is on
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.cfg.RequestTimeout {
		return ctx, nopCancel
	}
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

func nopCancel() {}

// Detach returns ctx without its cancellation (its values are kept), for a
// front end whose callers' cancellation means little: a check already on
// its way to the log is decided whether or not anyone still waits for it,
// and the wait stays bounded by RequestTimeout. A detached context costs
// the service no timer of its own (see Service.context).
func Detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// sharedDeadlines hands out contexts that end RequestTimeout (plus at most
// a slack) from now, one per slack interval shared by every request that
// starts in it: one timer where there would be one per request.
type sharedDeadlines struct {
	timeout, slack time.Duration
	cur            atomic.Pointer[sharedDeadline]
	mu             sync.Mutex
}

type sharedDeadline struct {
	ctx      context.Context
	cancel   context.CancelFunc // never called: the deadline ends it
	deadline time.Time
}

// deadlineSlack is how much later than RequestTimeout a shared deadline
// may end, as a fraction of it (1/50: 100 ms of the default 5 s).
const deadlineSlack = 50

func (d *sharedDeadlines) get() context.Context {
	now := time.Now()
	earliest := now.Add(d.timeout)
	if c := d.cur.Load(); c != nil && !c.deadline.Before(earliest) {
		return c.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.cur.Load(); c != nil && !c.deadline.Before(earliest) {
		return c.ctx
	}
	c := &sharedDeadline{deadline: earliest.Add(d.slack)}
	c.ctx, c.cancel = context.WithDeadline(context.Background(), c.deadline)
	d.cur.Store(c)
	return c.ctx
}

// nodeError maps an error from the node.
func (s *Service) nodeError(err error) *Error { return fromNode(err, s.timeout) }

// Limit describes the limit a check is decided under, for RateLimit headers
// and metrics.
type Limit struct {
	Name  string     // the policy name, or InlineName
	Spec  algo.Spec  // valid when Known
	Known bool       // false when the policy is not (yet) known on this node
	lease algo.Lease // the policy's lease option (lease.go)
	bans  bool       // the policy has an on_exceed option (bans.go)
	// degraded: the policy may be decided alone without a quorum (degraded.go)
	degraded bool
}

// limitOf describes policy from this node's replicated copy; the state
// machine decides whether it exists.
func (s *Service) limitOf(policy string) Limit {
	p, ok := s.deps.Policies.Policy(policy)
	return Limit{Name: policy, Spec: p.Spec, Known: ok, lease: p.Lease, bans: p.OnExceed.Ban > 0, degraded: p.Options.Degraded != nodeapi.DegradedNone}
}

// LeaderLocator is the Node's word on where the Raft leader is; front ends
// pass it on to clients as a hint.
type LeaderLocator interface {
	// LeaderID is the leader's id ("" when unknown) and whether it is this
	// node; it must be cheap enough to call on every request.
	LeaderID() (id string, self bool)
	// LeaderHTTPAddr is the leader's id and HTTP address (addr "" when
	// unknown); it may cost more, and is called when LeaderID changes or the
	// cache is old.
	LeaderHTTPAddr() (id, addr string)
}

// Leader returns the HTTP address of the leader when this node is not it,
// as a one-element slice ready for an http.Header (shared: never modify it),
// and nil when this node is the leader, no leader is known, or the Node
// cannot tell. Front ends call it on every check response: it allocates
// nothing while the leader stays the same.
func (s *Service) Leader() []string { return s.leader.get(time.Now()) }

// LeaderAt is Leader for a caller that has just read the clock: now
// dates the cached address, and saves Leader its own clock read.
func (s *Service) LeaderAt(now time.Time) []string { return s.leader.get(now) }

// leaderRefresh bounds how long a cached leader address is trusted for an
// unchanged leader id (a node may re-register another address).
const leaderRefresh = time.Second

type leaderCache struct {
	loc LeaderLocator
	cur atomic.Pointer[leaderEntry]
}

type leaderEntry struct {
	id   string
	addr []string // nil: unknown, or this node
	at   time.Time
}

func (c *leaderCache) get(now time.Time) []string {
	if c.loc == nil {
		return nil
	}
	id, self := c.loc.LeaderID()
	if self || id == "" {
		return nil
	}
	if e := c.cur.Load(); e != nil && e.id == id && now.Sub(e.at) < leaderRefresh {
		return e.addr
	}
	// The leader may have changed since LeaderID: keep the pair read together.
	id, addr := c.loc.LeaderHTTPAddr()
	e := &leaderEntry{id: id, at: now}
	if addr != "" && id != "" {
		e.addr = []string{addr}
	}
	c.cur.Store(e)
	if _, self := c.loc.LeaderID(); self {
		return nil
	}
	return e.addr
}
