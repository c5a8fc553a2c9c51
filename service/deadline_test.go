package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/nodeapi"
)

// blockingNode answers no check: it waits for the context the service gives
// it, and records that context.
type blockingNode struct {
	*node
	got chan context.Context
}

func (b blockingNode) Check(ctx context.Context, _ []nodeapi.Op) ([]nodeapi.Result, error) {
	b.got <- ctx
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestDetachedCheckStillTimesOut: a check with a detached context (no
// cancellation of its own, as the HTTP API sends) is still bounded by
// RequestTimeout, through the shared deadline.
func TestDetachedCheckStillTimesOut(t *testing.T) {
	n := blockingNode{newNode("api"), make(chan context.Context, 1)}
	s := New(DepsOf(n), Config{RequestTimeout: 50 * time.Millisecond})
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, e := s.Check(Detach(parent), &CheckRequest{Key: "k", Policy: "api", Cost: 1})
	if e == nil || e.Code != CodeUnavailable || !strings.Contains(e.Message, "50ms") {
		t.Fatalf("got %v, want unavailable: the cluster did not answer within 50ms", e)
	}
	ctx := <-n.got
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("the node got a context without a deadline")
	}
}

// TestSharedDeadlines: contexts that cannot be cancelled share one deadline
// of at least RequestTimeout from now; a caller's sooner deadline is kept;
// a cancellable caller without one gets its own.
func TestSharedDeadlines(t *testing.T) {
	const timeout = 10 * time.Second
	s := New(DepsOf(newNode()), Config{RequestTimeout: timeout})

	before := time.Now()
	a, cancelA := s.context(context.Background())
	b, cancelB := s.context(Detach(context.Background()))
	defer cancelA()
	defer cancelB()
	if a.Done() == nil || a.Done() != b.Done() {
		t.Fatal("two uncancellable requests of the same instant do not share a deadline")
	}
	d, ok := a.Deadline()
	if !ok || d.Before(before.Add(timeout)) || d.After(time.Now().Add(timeout+timeout/deadlineSlack)) {
		t.Fatalf("shared deadline %v, want within [now+%v, now+%v+slack]", d, timeout, timeout)
	}

	sooner, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c, _ := s.context(sooner); c != sooner {
		t.Fatal("a caller's sooner deadline was not used as it is")
	}

	own, cancelOwn := context.WithCancel(context.Background())
	c, cancelC := s.context(own)
	defer cancelC()
	if c.Done() == a.Done() {
		t.Fatal("a cancellable caller got the shared deadline")
	}
	cancelOwn()
	<-c.Done() // the caller's cancellation reaches the node
}

// recordingNode decides like node and records the context of every check.
type recordingNode struct {
	*node
	ctxs []context.Context
}

func (r *recordingNode) Check(ctx context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	r.ctxs = append(r.ctxs, ctx)
	return r.node.Check(ctx, ops)
}

// TestCheckDetached: CheckDetached decides a check whose caller has gone
// (the node gets the shared deadline, not the caller's cancellation), as
// Check(Detach(ctx)) does; Check passes the caller's cancellation on.
func TestCheckDetached(t *testing.T) {
	n := &recordingNode{node: newNode("api")}
	s := New(DepsOf(n), Config{})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, e := s.CheckDetached(gone, &CheckRequest{Key: "k", Policy: "api", Cost: 1}); e != nil {
		t.Fatalf("CheckDetached with a cancelled caller: %v", e)
	}
	if got := n.ctxs[0]; got.Err() != nil {
		t.Fatalf("the node got the caller's cancellation: %v", got.Err())
	} else if _, ok := got.Deadline(); !ok {
		t.Fatal("the node got a context without a deadline")
	}
	_, _ = s.Check(gone, &CheckRequest{Key: "k", Policy: "api", Cost: 1})
	if got := n.ctxs[1]; got.Err() == nil {
		t.Fatal("Check did not pass the caller's cancellation on")
	}
}
