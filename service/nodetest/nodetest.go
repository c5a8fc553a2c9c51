// Package nodetest is the one fake of service.Node for tests of the service
// and the front ends: NoCapabilities, the capabilities a node without them
// would answer, and Log/Node, nodes over a real state machine (fsm.FSM on a
// temporary directory) without Raft, so that the decisions, request-id
// replays, shadow policies, not_found policies and leases a test sees are
// the state machine's own, not a re-implementation of them.
//
// It does not import service (a Node provides every capability of
// service.Deps structurally: pass service.DepsOf(node) to service.New), so
// that service's own tests can use it.
package nodetest

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
)

// ErrNotInFake is what NoCapabilities answers for what it cannot do.
var ErrNotInFake = errors.New("not supported by this fake node")

// NoCapabilities answers every optional capability of service.Node as a
// node without it would: no leader known, no cached refusal, no lease
// granted, no RLS domain, no backup or digest. Fakes embed it and override
// what their test is about.
type NoCapabilities struct{}

func (NoCapabilities) LeaderID() (string, bool)         { return "", false }
func (NoCapabilities) LeaderHTTPAddr() (string, string) { return "", "" }
func (NoCapabilities) Refused(overlimit.LimitID, string, int64) (algo.Decision, bool) {
	return algo.Decision{}, false
}
func (NoCapabilities) GrantLeases(context.Context, []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	return nil, ErrNotInFake
}
func (NoCapabilities) ReturnLeases(context.Context, []nodeapi.LeaseReturn) ([]int64, error) {
	return nil, ErrNotInFake
}
func (NoCapabilities) SetLeaseHook(nodeapi.LeaseHook)        {}
func (NoCapabilities) LastTime() int64                       { return 0 }
func (NoCapabilities) RLSDomainConfig(string) ([]byte, bool) { return nil, false }
func (NoCapabilities) RLSDomains() []nodeapi.Domain          { return nil }
func (NoCapabilities) RLSDomainsVersion() uint64             { return 0 }
func (NoCapabilities) PutRLSDomain(context.Context, string, []byte) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node serves no RLS domains"}
}
func (NoCapabilities) DeleteRLSDomain(context.Context, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node serves no RLS domains"}
}
func (NoCapabilities) OpenBackup(context.Context) (nodeapi.Backup, error)      { return nil, ErrNotInFake }
func (NoCapabilities) Digest() (string, uint64, error)                         { return "", 0, ErrNotInFake }
func (NoCapabilities) PutPlan(context.Context, nodeapi.Plan) error             { return ErrNotInFake }
func (NoCapabilities) DeletePlan(context.Context, string) error                { return ErrNotInFake }
func (NoCapabilities) PutPrefixRule(context.Context, nodeapi.PrefixRule) error { return ErrNotInFake }
func (NoCapabilities) DeletePrefixRule(context.Context, string) error          { return ErrNotInFake }
func (NoCapabilities) SetDefaultPlan(context.Context, string) error            { return ErrNotInFake }
func (NoCapabilities) AssignPlans(context.Context, []nodeapi.Assignment) error { return ErrNotInFake }
func (NoCapabilities) PutOverride(context.Context, string, nodeapi.Override) error {
	return ErrNotInFake
}
func (NoCapabilities) DeleteOverride(context.Context, string) error { return ErrNotInFake }
func (NoCapabilities) Plan(string) (nodeapi.Plan, bool)             { return nodeapi.Plan{}, false }
func (NoCapabilities) Plans() []nodeapi.Plan                        { return nil }
func (NoCapabilities) PrefixRules() []nodeapi.PrefixRule            { return nil }
func (NoCapabilities) DefaultPlan() string                          { return "" }
func (NoCapabilities) List(string) ([]byte, bool)                   { return nil, false }
func (NoCapabilities) Lists() []nodeapi.List                        { return nil }
func (NoCapabilities) ListsVersion() uint64                         { return 0 }
func (NoCapabilities) PutList(context.Context, string, []byte) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no lists"}
}
func (NoCapabilities) DeleteList(context.Context, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node keeps no lists"}
}
func (NoCapabilities) LeaderTime() int64             { return time.Now().UnixNano() }
func (NoCapabilities) Times() (applied, clock int64) { return 0, time.Now().UnixNano() }
func (NoCapabilities) ChargeDegraded(context.Context, string, []nodeapi.DegradedCharge) error {
	return ErrNotInFake
}
func (NoCapabilities) Voters() int                                 { return 1 }
func (NoCapabilities) Banned(string, string) (time.Duration, bool) { return 0, false }
func (NoCapabilities) Bans(string, int) ([]nodeapi.Ban, string)    { return nil, "" }
func (NoCapabilities) Unban(context.Context, string, string) error {
	return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "this node bans nobody"}
}
func (NoCapabilities) ListKeys(nodeapi.KeysQuery) (nodeapi.KeysPage, error) {
	return nodeapi.KeysPage{}, ErrNotInFake
}

// Log is one state machine shared by the Nodes of an in-process cluster
// whose replicas all agree: every call is applied as the next log entry,
// stamped with the leader's time, which only the test moves.
type Log struct {
	// RequestIDRetention is the request-id retention each check entry
	// carries (≤ 0: the state machine's default). Set it before use.
	RequestIDRetention time.Duration

	mu      sync.Mutex
	f       *fsm.FSM
	index   uint64
	now     int64
	entries int
	hooks   hooks
}

// NewLog opens a state machine on t's temporary directory, closed when t
// ends; the leader's time starts at now.
func NewLog(t testing.TB, now time.Time) *Log {
	t.Helper()
	l := &Log{now: now.UnixNano()}
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), fsm.Options{NoSync: true, Leases: &l.hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	l.f = f
	return l
}

// FSM is the state machine, for tests that read it directly.
func (l *Log) FSM() *fsm.FSM { return l.f }

// Now is the leader's time (ns since the epoch).
func (l *Log) Now() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now
}

// SetNow sets the leader's time (ns since the epoch).
func (l *Log) SetNow(ns int64) {
	l.mu.Lock()
	l.now = ns
	l.mu.Unlock()
}

// Advance moves the leader's time by d.
func (l *Log) Advance(d time.Duration) {
	l.mu.Lock()
	l.now += int64(d)
	l.mu.Unlock()
}

// Entries is how many entries were applied.
func (l *Log) Entries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries
}

// Apply applies the entry build returns for the leader's time as the next
// log entry and returns the state machine's response.
func (l *Log) Apply(build func(now int64) []byte) any {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	l.entries++
	return l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: build(l.now)})
}

// Node returns a node named id (the lease holder) over l.
func (l *Log) Node(id string) *Node { return &Node{Log: l, ID: id} }

// hooks passes the state machine's lease events to every node's lease
// table, as each node's own replica would.
type hooks struct {
	mu sync.Mutex
	hs []nodeapi.LeaseHook
}

func (h *hooks) each(f func(nodeapi.LeaseHook)) {
	h.mu.Lock()
	hs := h.hs
	h.mu.Unlock()
	for _, x := range hs {
		f(x)
	}
}
func (h *hooks) Recall(p, k string)   { h.each(func(x nodeapi.LeaseHook) { x.Recall(p, k) }) }
func (h *hooks) Returned(p, k string) { h.each(func(x nodeapi.LeaseHook) { x.Returned(p, k) }) }

// Node is a service.Node over a Log: the leader, always ready, with no
// peers; checks, admin writes and leases go through the state machine.
// Membership calls succeed and change nothing; Status is empty.
type Node struct {
	NoCapabilities
	Log *Log
	ID  string
}

func (n *Node) Check(_ context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	resp := n.Log.Apply(func(now int64) []byte {
		return fsm.EncodeCheck(nil, now, int64(n.Log.RequestIDRetention), ops)
	})
	if err, ok := resp.(error); ok {
		return nil, err
	}
	return resp.([]nodeapi.Result), nil
}

func (n *Node) PutPolicy(_ context.Context, p nodeapi.Policy) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodePutPolicy(p) }))
}

func (n *Node) DeletePolicy(_ context.Context, name string) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeDeletePolicy(name) }))
}

func (n *Node) ResetKey(_ context.Context, c nodeapi.Check) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeResetKey(c) }))
}

func (n *Node) Policy(name string) (nodeapi.Policy, bool)          { return n.Log.f.Policy(name) }
func (n *Node) Policies() []nodeapi.Policy                         { return n.Log.f.Policies() }
func (n *Node) Join(context.Context, string, string, string) error { return nil }
func (n *Node) Remove(context.Context, string) error               { return nil }
func (n *Node) Status(context.Context) (nodeapi.Status, error)     { return nodeapi.Status{}, nil }
func (n *Node) Ready() error                                       { return nil }

func (n *Node) GrantLeases(_ context.Context, reqs []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	return n.Log.Apply(func(now int64) []byte { return fsm.EncodeGrantLease(nil, now, n.ID, reqs) }).([]nodeapi.LeaseGrant), nil
}

func (n *Node) ReturnLeases(_ context.Context, rets []nodeapi.LeaseReturn) ([]int64, error) {
	return n.Log.Apply(func(now int64) []byte { return fsm.EncodeReturnLease(nil, now, n.ID, rets) }).([]int64), nil
}

// The plan capability, through the state machine like the other admin
// writes; reads are the replica's own copy.
func (n *Node) PutPlan(_ context.Context, p nodeapi.Plan) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodePutPlan(p) }))
}
func (n *Node) DeletePlan(_ context.Context, name string) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeDeletePlan(name) }))
}
func (n *Node) PutPrefixRule(_ context.Context, r nodeapi.PrefixRule) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodePutPrefixRule(r) }))
}
func (n *Node) DeletePrefixRule(_ context.Context, prefix string) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeDeletePrefixRule(prefix) }))
}
func (n *Node) SetDefaultPlan(_ context.Context, plan string) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeSetDefaultPlan(plan) }))
}
func (n *Node) AssignPlans(_ context.Context, as []nodeapi.Assignment) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeAssignPlans(as) }))
}
func (n *Node) PutOverride(_ context.Context, key string, o nodeapi.Override) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodePutOverride(key, o) }))
}
func (n *Node) DeleteOverride(_ context.Context, key string) error {
	return adminResult(n.Log.Apply(func(int64) []byte { return fsm.EncodeDeleteOverride(key) }))
}
func (n *Node) Plan(name string) (nodeapi.Plan, bool) { return n.Log.f.Plan(name) }
func (n *Node) Plans() []nodeapi.Plan                 { return n.Log.f.Plans() }
func (n *Node) PrefixRules() []nodeapi.PrefixRule     { return n.Log.f.PrefixRules() }
func (n *Node) DefaultPlan() string                   { return n.Log.f.DefaultPlan() }

// LastTime is the leader time the state machine has applied.
func (n *Node) LastTime() int64 { return n.Log.f.LastTime() }

// SetLeaseHook adds h to the hooks the state machine's lease events reach.
func (n *Node) SetLeaseHook(h nodeapi.LeaseHook) {
	n.Log.hooks.mu.Lock()
	n.Log.hooks.hs = append(n.Log.hooks.hs, h)
	n.Log.hooks.mu.Unlock()
}

// adminResult is the error an admin command's response carries, as
// cluster.Node reports it: a typed nil *nodeapi.Error is success.
func adminResult(resp any) error {
	switch r := resp.(type) {
	case *nodeapi.Error:
		if r == nil {
			return nil
		}
		return r
	case error:
		return r
	}
	return nil
}
