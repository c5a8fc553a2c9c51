package service

import (
	"context"
	"testing"
	"unsafe"

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
	s := New(DepsOf(n), Config{})

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

// hitNode is a node whose over-limit cache refuses every check without
// allocating, and records the last limit identity it was asked about.
type hitNode struct {
	*node
	last overlimit.LimitID
}

func (n *hitNode) Refused(id overlimit.LimitID, _ string, _ int64) (algo.Decision, bool) {
	n.last = id
	return algo.Decision{Limit: 10, RetryAfter: 7e9, ResetAfter: 9e9}, true
}

// TestCachedRefusalAllocates: a check answered from the over-limit cache
// costs the service no allocation, under a policy or an inline limit (whose
// cache identity is interned, not rebuilt per check), through CheckDetached
// (which detaches the context only for checks that go to the node).
func TestCachedRefusalAllocates(t *testing.T) {
	n := &hitNode{node: newNode("p")}
	s := New(DepsOf(n), Config{})
	spec, err := algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range []CheckRequest{{Key: "k", Policy: "p", Cost: 1}, {Key: "k", Limit: &spec, Cost: 1}} {
		res, e := s.CheckDetached(ctx, &r)
		if e != nil || Allowed(&res.Decision) {
			t.Fatalf("%+v: %+v %v", r, res, e)
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = s.CheckDetached(ctx, &r) }); allocs != 0 {
			t.Errorf("%+v: %v allocations per cached refusal, want 0", r, allocs)
		}
	}
	if want := string(algo.AppendSpec(nil, spec)); n.last != (overlimit.LimitID{Ident: want}) {
		t.Fatalf("inline looked up %+v, want %q", n.last, want)
	}
}

// TestSpecIdents: an inline limit's identity is its canonical encoding,
// interned (the same string for equal specs), and still right, uninterned,
// once the table is full.
func TestSpecIdents(t *testing.T) {
	si := Interner{Max: maxSpecIdents}
	specs := []algo.Config{
		{Algorithm: "sliding_window", Limit: 100, Window: "1s"},
		{Algorithm: "token_bucket", Limit: 10, Window: "1m", Burst: 50},
		{Algorithm: "fixed_window", Limit: 3, Calendar: "day", Timezone: "America/Argentina/ComodRivadavia"},
		{Algorithm: "sliding_log", Limit: 5, Window: "1h", CountRefused: true},
	}
	for _, c := range specs {
		spec, err := c.Spec()
		if err != nil {
			t.Fatal(err)
		}
		want := string(algo.AppendSpec(nil, spec))
		a, b := specIdent(&si, &spec), specIdent(&si, &spec)
		if a != want || b != want {
			t.Fatalf("%+v: %q, %q, want %q", c, a, b, want)
		}
		if unsafe.StringData(a) != unsafe.StringData(b) {
			t.Fatalf("%+v: the identity is not interned", c)
		}
	}
	for i := 1; i <= maxSpecIdents+10; i++ {
		spec, err := algo.Config{Algorithm: "fixed_window", Limit: int64(i), Window: "1s"}.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := specIdent(&si, &spec), string(algo.AppendSpec(nil, spec)); got != want {
			t.Fatalf("limit %d: %q, want %q", i, got, want)
		}
	}
	if n := si.Len(); n != maxSpecIdents {
		t.Fatalf("%d identities interned, want the bound %d", n, maxSpecIdents)
	}
}
