package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service/nodetest"
)

// node is a Node that allows every check with a fixed decision, knows the
// policies it is given, and records what reaches it. err, when set, is what
// every call returns.
type node struct {
	nodetest.NoCapabilities
	mu       sync.Mutex
	policies map[string]nodeapi.Policy
	ops      []nodeapi.Op
	puts     []nodeapi.Policy
	resets   []nodeapi.Check
	joins    [][3]string
	removed  []string
	status   nodeapi.Status
	err      error
	opErr    *nodeapi.Error // answers every op when set
	replay   bool           // answer every op as replayed, with one decision
}

func newNode(names ...string) *node {
	n := &node{policies: map[string]nodeapi.Policy{}}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1m"}.Spec()
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		n.policies[name] = nodeapi.Policy{Name: name, Spec: spec}
	}
	return n
}

func (n *node) Check(_ context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return nil, n.err
	}
	out := make([]nodeapi.Result, len(ops))
	for i, op := range ops {
		n.ops = append(n.ops, op)
		if n.opErr != nil {
			e := *n.opErr
			out[i].Err = &e
			continue
		}
		out[i] = nodeapi.Result{Allowed: true, Replayed: n.replay}
		k := len(op.Checks)
		if n.replay {
			k = 1
		}
		for j := 0; j < k; j++ {
			out[i].Decisions = append(out[i].Decisions, nodeapi.Decision{Decision: algo.Decision{Allowed: true, Limit: 10, Remaining: 9}})
		}
	}
	return out, nil
}

func (n *node) PutPolicy(_ context.Context, p nodeapi.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.puts = append(n.puts, p)
	if n.err == nil {
		n.policies[p.Name] = p
	}
	return n.err
}

func (n *node) DeletePolicy(_ context.Context, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.policies[name]; !ok {
		return &nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "policy", Message: fmt.Sprintf("policy %q does not exist", name)}
	}
	delete(n.policies, name)
	return n.err
}

func (n *node) ResetKey(_ context.Context, c nodeapi.Check) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resets = append(n.resets, c)
	return n.err
}

func (n *node) Policy(name string) (nodeapi.Policy, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.policies[name]
	return p, ok
}

func (n *node) Policies() []nodeapi.Policy { return nil }

func (n *node) Join(_ context.Context, id, raftAddr, httpAddr string) error {
	n.joins = append(n.joins, [3]string{id, raftAddr, httpAddr})
	return n.err
}

func (n *node) Remove(_ context.Context, id string) error {
	n.removed = append(n.removed, id)
	return n.err
}

func (n *node) Status(context.Context) (nodeapi.Status, error) { return n.status, nil }
func (n *node) Ready() error                                   { return n.err }

func inline(t *testing.T) *algo.Spec {
	t.Helper()
	s, e := ValidateLimit(algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s"}, "limit")
	if e != nil {
		t.Fatal(e)
	}
	return &s
}

func wantErr(t *testing.T, e *Error, code Code, field string) {
	t.Helper()
	if e == nil {
		t.Fatalf("no error, want %s on %q", code, field)
	}
	if e.Code != code || e.Field != field || e.Message == "" {
		t.Fatalf("error %+v, want %s on %q with a message", e, code, field)
	}
}

// TestCheckValidation: every invalid check is refused before anything is
// proposed, with the field that is wrong.
func TestCheckValidation(t *testing.T) {
	spec := inline(t)
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name  string
		req   CheckRequest
		field string
	}{
		{"empty key", CheckRequest{Policy: "api", Cost: 1}, "key"},
		{"long key", CheckRequest{Key: long(MaxKeyBytes + 1), Policy: "api", Cost: 1}, "key"},
		{"negative cost", CheckRequest{Key: "k", Policy: "api", Cost: -1}, "cost"},
		{"long request id", CheckRequest{Key: "k", Policy: "api", Cost: 1, RequestID: long(MaxRequestIDBytes + 1)}, "request_id"},
		{"both limits", CheckRequest{Key: "k", Policy: "api", Limit: spec, Cost: 1}, "limit"},
		{"bad policy name", CheckRequest{Key: "k", Policy: "a b", Cost: 1}, "policy"},
		{"long policy name", CheckRequest{Key: "k", Policy: long(MaxPolicyName + 1), Cost: 1}, "policy"},
		{"key before limit", CheckRequest{Cost: -1}, "key"},
		{"key not UTF-8", CheckRequest{Key: "u\xff", Policy: "api", Cost: 1}, "key"},
		{"request id not UTF-8", CheckRequest{Key: "k", Policy: "api", Cost: 1, RequestID: "r\xc3"}, "request_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode("api")
			s := New(DepsOf(n), Config{})
			_, e := s.Check(t.Context(), &tc.req)
			wantErr(t, e, CodeInvalidArgument, tc.field)
			if len(n.ops) != 0 {
				t.Fatalf("an invalid check reached the node: %+v", n.ops)
			}
		})
	}
	// The limits themselves are accepted.
	s := New(DepsOf(newNode("api")), Config{})
	ok := []CheckRequest{
		{Key: long(MaxKeyBytes), Policy: long(MaxPolicyName), Cost: 0, RequestID: long(MaxRequestIDBytes)},
		{Key: "k", Limit: spec, Cost: 3},
	}
	for _, r := range ok {
		if _, e := s.Check(t.Context(), &r); e != nil && e.Code == CodeInvalidArgument {
			t.Fatalf("%+v refused: %v", r, e)
		}
	}
}

func TestValidateLimitNamesFields(t *testing.T) {
	for _, tc := range []struct {
		cfg    algo.Config
		prefix string
		field  string
	}{
		{algo.Config{Algorithm: "nope", Limit: 1, Window: "1s"}, "limit", "limit.algorithm"},
		{algo.Config{Algorithm: "fixed_window", Limit: 1}, "limit", "limit.window"},
		{algo.Config{Algorithm: "fixed_window", Limit: 0, Window: "1s"}, "", "limit"},
		{algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"}, "checks[2].limit", ""},
	} {
		_, e := ValidateLimit(tc.cfg, tc.prefix)
		if tc.field == "" {
			if e != nil {
				t.Fatalf("%+v: %v", tc.cfg, e)
			}
			continue
		}
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
}

// TestNodeErrors: the node's failures map to the shared codes, and the
// state machine's refusals pass through unchanged.
func TestNodeErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		code  Code
		field string
	}{
		{nodeapi.ErrNoLeader, CodeUnavailable, ""},
		{fmt.Errorf("forward: %w", nodeapi.ErrOutcomeUnknown), CodeOutcomeUnknown, ""},
		{context.DeadlineExceeded, CodeUnavailable, ""},
		{context.Canceled, CodeUnavailable, ""},
		{errors.New("disk on fire"), CodeInternal, ""},
		{&nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "policy", Message: "gone"}, CodeNotFound, "policy"},
		{fmt.Errorf("wrapped: %w", &nodeapi.Error{Code: nodeapi.CodeInvalidArgument, Field: "name", Message: "bad"}), CodeInvalidArgument, "name"},
		{&nodeapi.Error{Field: "x", Message: "no code"}, CodeInternal, "x"},
		{fmt.Errorf("%w: 9000 ops", nodeapi.ErrTooLarge), CodePayloadTooLarge, ""},
		{fmt.Errorf("%w: raft log write failed: no space left on device", nodeapi.ErrUnavailable), CodeUnavailable, ""},
	} {
		n := newNode("api")
		n.err = tc.err
		s := New(DepsOf(n), Config{RequestTimeout: time.Second})
		_, e := s.Check(t.Context(), &CheckRequest{Key: "k", Policy: "api", Cost: 1})
		wantErr(t, e, tc.code, tc.field)
		if tc.err == context.DeadlineExceeded && !strings.Contains(e.Message, "1s") {
			t.Fatalf("timeout message does not name the wait: %q", e.Message)
		}
		if errors.Is(tc.err, nodeapi.ErrUnavailable) && !strings.Contains(e.Message, "no space left") {
			t.Fatalf("unavailable message does not name the cause: %q", e.Message)
		}
		wantErr(t, s.ResetKey(t.Context(), &CheckRequest{Key: "k", Policy: "api"}), tc.code, tc.field)
	}
}

func TestCheckAll(t *testing.T) {
	n := newNode("a", "b")
	s := New(DepsOf(n), Config{MaxBatch: 3})
	checks := []CheckRequest{{Key: "k", Policy: "a", Cost: 1}, {Key: "k", Policy: "b", Cost: 1}}
	res, e := s.CheckAll(t.Context(), checks, "rid")
	if e != nil || !res.Allowed || len(res.Decisions) != 2 || res.Limits[1].Name != "b" || !res.Limits[1].Known {
		t.Fatalf("%+v %v", res, e)
	}
	if op := n.ops[0]; !op.All || op.RequestID != "rid" || len(op.Checks) != 2 {
		t.Fatalf("op %+v", op)
	}
	for _, tc := range []struct {
		checks []CheckRequest
		rid    string
		field  string
	}{
		{nil, "", "checks"},
		{make([]CheckRequest, 4), "", "checks"},
		{checks, strings.Repeat("r", MaxRequestIDBytes+1), "request_id"},
		{[]CheckRequest{checks[0], {Key: "k", Policy: "a", RequestID: "x"}}, "", "checks[1].request_id"},
		{[]CheckRequest{checks[0], {Policy: "a"}}, "", "checks[1].key"},
	} {
		_, e := s.CheckAll(t.Context(), tc.checks, tc.rid)
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
	// The state machine's not_found is located at the check whose policy
	// this node does not know either.
	n.opErr = &nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "policy", Message: `policy "zz" does not exist`}
	_, e = s.CheckAll(t.Context(), []CheckRequest{checks[0], {Key: "k", Policy: "zz", Cost: 1}}, "")
	wantErr(t, e, CodeNotFound, "checks[1].policy")
	if n.opErr.Field != "policy" {
		t.Fatalf("the node's error was modified: %+v", n.opErr)
	}
	// A replayed request id whose stored answer has another shape.
	n.opErr, n.replay = nil, true
	_, e = s.CheckAll(t.Context(), checks, "used")
	wantErr(t, e, CodeConflict, "request_id")
}

func TestBatch(t *testing.T) {
	n := newNode("a")
	s := New(DepsOf(n), Config{})
	pre := []*Error{nil, Invalid("limit", "decoded badly").Under(EntryField(1)), nil, nil}
	res, e := s.Batch(t.Context(), []CheckRequest{
		{Key: "k", Policy: "a", Cost: 1},
		{},
		{Key: "", Policy: "a"},
		{Key: "k2", Policy: "a", Cost: 2, RequestID: "r"},
	}, pre)
	if e != nil || len(res) != 4 {
		t.Fatalf("%v %v", res, e)
	}
	if res[0].Err != nil || res[3].Err != nil || !res[0].Decision.Allowed || res[3].Limit.Name != "a" {
		t.Fatalf("decided entries: %+v", res)
	}
	wantErr(t, res[1].Err, CodeInvalidArgument, "checks[1].limit")
	wantErr(t, res[2].Err, CodeInvalidArgument, "checks[2].key")
	if len(n.ops) != 2 || n.ops[1].RequestID != "r" || n.ops[1].Checks[0].Cost != 2 {
		t.Fatalf("ops %+v", n.ops)
	}
	_, e = s.Batch(t.Context(), []CheckRequest{{Key: "k", Policy: "a", Cost: 1}}, make([]*Error, 2))
	wantErr(t, e, CodeInternal, "")
	n.opErr = &nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "policy", Message: "no"}
	res, _ = s.Batch(t.Context(), []CheckRequest{{Key: "k", Policy: "a", Cost: 1}}, nil)
	wantErr(t, res[0].Err, CodeNotFound, "checks[0].policy")
	n.opErr, n.err = nil, nodeapi.ErrNoLeader
	_, e = s.Batch(t.Context(), []CheckRequest{{Key: "k", Policy: "a", Cost: 1}}, nil)
	wantErr(t, e, CodeUnavailable, "")
}

func TestPeekConsumesNothing(t *testing.T) {
	n := newNode("a")
	s := New(DepsOf(n), Config{})
	if _, e := s.Peek(t.Context(), &CheckRequest{Key: "k", Policy: "a", Cost: 7}); e != nil {
		t.Fatal(e)
	}
	if c := n.ops[0].Checks[0]; c.Cost != 0 {
		t.Fatalf("peek proposed cost %d", c.Cost)
	}
	_, e := s.Peek(t.Context(), &CheckRequest{Key: "k", Policy: "a", RequestID: "r"})
	wantErr(t, e, CodeInvalidArgument, "request_id")
}

func TestPolicies(t *testing.T) {
	n := newNode()
	s := New(DepsOf(n), Config{})
	good := algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"}
	for _, tc := range []struct {
		p     PolicyRequest
		field string
	}{
		{PolicyRequest{Name: "", Config: good}, "name"},
		{PolicyRequest{Name: "a/b", Config: good}, "name"},
		{PolicyRequest{Name: strings.Repeat("n", MaxPolicyName+1), Config: good}, "name"},
		{PolicyRequest{Name: "api", Config: algo.Config{Algorithm: "sliding_window", Limit: 100}}, "window"},
	} {
		_, e := s.PutPolicy(t.Context(), tc.p)
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
	if len(n.puts) != 0 {
		t.Fatalf("invalid policies reached the node: %+v", n.puts)
	}
	p, e := s.PutPolicy(t.Context(), PolicyRequest{Name: "api", Config: good, Shadow: true})
	if e != nil || p.Name != "api" || !p.Shadow || p.Spec.Limit != 100 {
		t.Fatalf("%+v %v", p, e)
	}
	if got, e := s.GetPolicy("api"); e != nil || got != p {
		t.Fatalf("get: %+v %v", got, e)
	}
	_, e = s.GetPolicy("zz")
	wantErr(t, e, CodeNotFound, "name")
	wantErr(t, s.DeletePolicy(t.Context(), "zz"), CodeNotFound, "policy")
	if e := s.DeletePolicy(t.Context(), "api"); e != nil {
		t.Fatal(e)
	}
}

func TestJoinValidation(t *testing.T) {
	for _, tc := range []struct {
		j     JoinRequest
		field string
	}{
		{JoinRequest{RaftAddr: "127.0.0.1:1"}, "id"},
		{JoinRequest{ID: strings.Repeat("n", MaxPolicyName+1), RaftAddr: "127.0.0.1:1"}, "id"},
		{JoinRequest{ID: "incarnation/n1", RaftAddr: "127.0.0.1:1"}, "id"},
		{JoinRequest{ID: "n"}, "raft_addr"},
		{JoinRequest{ID: "n", RaftAddr: "localhost"}, "raft_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:0"}, "raft_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:65536"}, "raft_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:http"}, "raft_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:99999"}, "http_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:1", HTTPAddr: "nope"}, "http_addr"},
		{JoinRequest{ID: "n", RaftAddr: "127.0.0.1:1"}, ""},
		{JoinRequest{ID: "n", RaftAddr: "[::1]:65535", HTTPAddr: "h:1"}, ""},
	} {
		e := ValidateJoin(tc.j)
		if tc.field == "" {
			if e != nil {
				t.Fatalf("%+v: %v", tc.j, e)
			}
			continue
		}
		wantErr(t, e, CodeInvalidArgument, tc.field)
	}
}

// observer records what the service reports.
type observer struct{ decided, failed []string }

func (o *observer) Decided(l Limit, d nodeapi.Decision) { o.decided = append(o.decided, l.Name) }
func (o *observer) Failed(l Limit)                      { o.failed = append(o.failed, l.Name) }

// TestObserver: fresh decisions and failures are reported; peeks and
// replays, which consume nothing, are not counted as decisions.
func TestObserver(t *testing.T) {
	n := newNode("a")
	o := &observer{}
	s := New(DepsOf(n), Config{Observer: o})
	s.Check(t.Context(), &CheckRequest{Key: "k", Policy: "a", Cost: 1})
	s.Peek(t.Context(), &CheckRequest{Key: "k", Policy: "a"})
	s.CheckAll(t.Context(), []CheckRequest{{Key: "k", Policy: "a", Cost: 1}, {Key: "k", Limit: inline(t), Cost: 1}}, "")
	n.opErr = &nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "policy", Message: "no"}
	s.Check(t.Context(), &CheckRequest{Key: "k", Policy: "zz", Cost: 1})
	n.opErr, n.replay = nil, true
	s.Check(t.Context(), &CheckRequest{Key: "k", Policy: "a", Cost: 1, RequestID: "r"})
	if got := strings.Join(o.decided, ","); got != "a,a,"+InlineName {
		t.Fatalf("decided %q", got)
	}
	if got := strings.Join(o.failed, ","); got != "zz" {
		t.Fatalf("failed %q", got)
	}
}

func TestLimitCache(t *testing.T) {
	var c LimitCache
	calls := 0
	decode := func(raw []byte, field string) (algo.Config, *Error) {
		calls++
		if string(raw) == "bad" {
			return algo.Config{}, Invalid(field, "malformed")
		}
		return algo.Config{Algorithm: "fixed_window", Limit: 3, Window: string(raw)}, nil
	}
	a, e := c.Get([]byte("1s"), "limit", decode)
	b, e2 := c.Get([]byte("1s"), "limit", decode)
	if e != nil || e2 != nil || a != b || calls != 1 {
		t.Fatalf("cache: %v %v %v %v calls %d", a, b, e, e2, calls)
	}
	_, e = c.Get([]byte("bad"), "limit", decode)
	wantErr(t, e, CodeInvalidArgument, "limit")
	_, e = c.Get([]byte("0s"), "checks[0].limit", decode)
	wantErr(t, e, CodeInvalidArgument, "checks[0].limit.window")
}

// flaky is a node whose PutPolicy fails with ErrNoLeader a number of times
// before it works.
type flaky struct {
	*node
	fails int
}

func (f *flaky) PutPolicy(ctx context.Context, p nodeapi.Policy) error {
	if f.fails > 0 {
		f.fails--
		return nodeapi.ErrNoLeader
	}
	return f.node.PutPolicy(ctx, p)
}

// TestPutPolicies: the policies file loader (used by `limitd serve
// --policies`) skips policies already stored as given, retries until the
// cluster answers, and stops at a refusal naming the policy.
func TestPutPolicies(t *testing.T) {
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"}.Spec()
	ps := []nodeapi.Policy{{Name: "a", Spec: spec}, {Name: "b", Spec: spec}}
	n := &flaky{node: newNode(), fails: 2}
	s := New(DepsOf(n), Config{})
	if err := s.PutPolicies(t.Context(), ps, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(n.puts) != 2 || n.puts[1] != ps[1] {
		t.Fatalf("puts %+v", n.puts)
	}
	// Already stored as given: nothing is written.
	if err := s.PutPolicies(t.Context(), ps, time.Millisecond); err != nil || len(n.puts) != 2 {
		t.Fatalf("second load: %v, %d puts", err, len(n.puts))
	}
	// Without retries the first failure is returned, naming the policy.
	n.fails = 1
	changed := []nodeapi.Policy{{Name: "c", Spec: spec}}
	if err := s.PutPolicies(t.Context(), changed, 0); err == nil || !errors.Is(err, nodeapi.ErrNoLeader) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("no retry: %v", err)
	}
	// A refusal is not retried.
	n.err = &nodeapi.Error{Code: nodeapi.CodeInvalidArgument, Field: "limit", Message: "no"}
	if err := s.PutPolicies(t.Context(), changed, time.Millisecond); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("refusal: %v", err)
	}
	// Retries end with the context.
	n.err, n.fails = nil, 1<<30
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.PutPolicies(ctx, changed, time.Millisecond); err == nil {
		t.Fatal("a canceled load succeeded")
	}
}
