package service

import (
	"context"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
)

// refusingNode is a node with an over-limit cache that holds a refusal for
// the keys in hot (any limit, any cost) and records the lookups.
type refusingNode struct {
	*node
	hot     map[string]bool
	lookups []overlimit.LimitID
}

func (n *refusingNode) Refused(id overlimit.LimitID, key string, _ int64) (algo.Decision, bool) {
	n.lookups = append(n.lookups, id)
	if !n.hot[key] {
		return algo.Decision{}, false
	}
	return algo.Decision{Limit: 10, RetryAfter: 7e9, ResetAfter: 9e9}, true
}

// TestCachedRefusals: checks without request_id are answered from the node's
// over-limit cache when it holds a refusal (nothing reaches the log); with a
// request_id, and for peeks, the cache is not consulted; a batch sends only
// its misses; an atomic group is answered from the cache only when every
// check of it hits, and otherwise goes to the log whole.
func TestCachedRefusals(t *testing.T) {
	ctx := context.Background()
	n := &refusingNode{node: newNode("p"), hot: map[string]bool{"hot": true, "hot2": true}}
	s := New(n, Config{})

	r, e := s.Check(ctx, &CheckRequest{Key: "hot", Policy: "p", Cost: 1})
	if e != nil || Allowed(&r.Decision) || r.Decision.RetryAfter != 7e9 || r.Limit.Name != "p" || !r.Limit.Known {
		t.Fatalf("cached check: %+v %v", r, e)
	}
	if len(n.ops) != 0 {
		t.Fatal("a cached refusal reached the log")
	}
	if got := n.lookups[0]; got != (overlimit.LimitID{Policy: true, Ident: "p"}) {
		t.Fatalf("looked up %+v", got)
	}

	if _, e := s.Check(ctx, &CheckRequest{Key: "hot", Policy: "p", Cost: 1, RequestID: "r1"}); e != nil || len(n.ops) != 1 {
		t.Fatalf("a check with request_id was not sent to the log (%d ops, %v)", len(n.ops), e)
	}
	if _, e := s.Peek(ctx, &CheckRequest{Key: "hot", Policy: "p"}); e != nil || len(n.ops) != 2 {
		t.Fatalf("a peek was not sent to the log (%d ops, %v)", len(n.ops), e)
	}
	if _, e := s.Check(ctx, &CheckRequest{Key: "hot", Policy: "p", Cost: 0}); e != nil || len(n.ops) != 3 {
		t.Fatalf("a check of cost 0 (a peek) was not sent to the log (%d ops, %v)", len(n.ops), e)
	}

	// Inline limits are looked up by their canonical encoding.
	spec, err := algo.Config{Algorithm: "token_bucket", Limit: 3, Window: "1s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	n.lookups = nil
	if r, e := s.Check(ctx, &CheckRequest{Key: "hot", Limit: &spec, Cost: 1}); e != nil || Allowed(&r.Decision) || r.Limit.Name != InlineName {
		t.Fatalf("inline: %+v %v", r, e)
	}
	if got := n.lookups[0]; got != (overlimit.LimitID{Ident: string(algo.AppendSpec(nil, spec))}) {
		t.Fatalf("inline looked up %+v", got)
	}

	n.ops = nil
	rs, e := s.Batch(ctx, []CheckRequest{
		{Key: "hot", Policy: "p", Cost: 1},
		{Key: "cold", Policy: "p", Cost: 1},
		{Key: "hot", Policy: "p", Cost: 1, RequestID: "r2"},
	}, nil)
	if e != nil || Allowed(&rs[0].Decision) || !Allowed(&rs[1].Decision) || !Allowed(&rs[2].Decision) {
		t.Fatalf("batch: %+v %v", rs, e)
	}
	if len(n.ops) != 2 || n.ops[0].Checks[0].Key != "cold" || n.ops[1].RequestID != "r2" {
		t.Fatalf("batch sent %+v, want only the misses", n.ops)
	}

	n.ops = nil
	all, e := s.CheckAll(ctx, []CheckRequest{{Key: "hot", Policy: "p", Cost: 1}, {Key: "hot2", Policy: "p", Cost: 1}}, "")
	if e != nil || all.Allowed || len(all.Decisions) != 2 || len(n.ops) != 0 {
		t.Fatalf("all-hit group: %+v %v, %d ops", all, e, len(n.ops))
	}
	if _, e := s.CheckAll(ctx, []CheckRequest{{Key: "hot", Policy: "p", Cost: 1}, {Key: "cold", Policy: "p", Cost: 1}}, ""); e != nil || len(n.ops) != 1 || !n.ops[0].All {
		t.Fatalf("a partly cached group did not go to the log whole: %d ops, %v", len(n.ops), e)
	}
	if _, e := s.CheckAll(ctx, []CheckRequest{{Key: "hot", Policy: "p", Cost: 1}, {Key: "hot2", Policy: "p", Cost: 1}}, "r3"); e != nil || len(n.ops) != 2 {
		t.Fatalf("a group with request_id was answered from the cache: %v", e)
	}
}

var _ Refuser = (*refusingNode)(nil)
