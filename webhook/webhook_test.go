package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/nodeapi"
)

type fakeNode struct {
	mu     sync.Mutex
	leader bool
	events []nodeapi.Event
	hooks  []nodeapi.Webhook
	acked  []uint64
}

func (f *fakeNode) IsLeader() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.leader }
func (f *fakeNode) Outbox(after uint64, limit int) []nodeapi.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]nodeapi.Event(nil), f.events...)
}
func (f *fakeNode) Webhooks() []nodeapi.Webhook { return f.hooks }
func (f *fakeNode) AckEvents(_ context.Context, seqs []uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked = append(f.acked, seqs...)
	var left []nodeapi.Event
	for _, e := range f.events {
		keep := true
		for _, s := range seqs {
			keep = keep && e.Seq != s
		}
		if keep {
			left = append(left, e)
		}
	}
	f.events = left
	return nil
}

// TestRetriesWithBackoffThenAcks: a delivery the receiver refuses is
// retried no sooner than its backoff, the event is acked only once the
// receiver took it, each POST carries the id and a signature that
// verifies, and a node that does not lead posts nothing.
func TestRetriesWithBackoffThenAcks(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		n, _ := r.Body.Read(buf)
		if r.Header.Get(HeaderEventID) != "e1" || !Verify("s3cret-s3cret-s3cret", buf[:n], r.Header.Get(HeaderSignature)) {
			t.Errorf("delivery headers %v", r.Header)
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	n := &fakeNode{events: []nodeapi.Event{{Seq: 7, ID: "e1", Body: []byte(`{"id":"e1"}`)}},
		hooks: []nodeapi.Webhook{{Name: "a", URL: srv.URL, Secret: "s3cret-s3cret-s3cret"}}}
	l := New(n, Config{MinBackoff: time.Second, MaxBackoff: 4 * time.Second})
	ctx := context.Background()
	t0 := time.Unix(1000, 0)
	l.pass(ctx, t0)
	if calls.Load() != 0 {
		t.Fatal("a follower delivered")
	}
	n.leader = true
	l.pass(ctx, t0) // fails: next at t0+1s
	l.pass(ctx, t0.Add(500*time.Millisecond))
	if calls.Load() != 1 {
		t.Fatalf("%d calls before the backoff ended, want 1", calls.Load())
	}
	l.pass(ctx, t0.Add(time.Second)) // fails again: next at +2s
	l.pass(ctx, t0.Add(2500*time.Millisecond))
	if calls.Load() != 2 || len(n.acked) != 0 {
		t.Fatalf("calls %d acked %v", calls.Load(), n.acked)
	}
	l.pass(ctx, t0.Add(3*time.Second))
	if calls.Load() != 3 || len(n.acked) != 1 || n.acked[0] != 7 {
		t.Fatalf("calls %d acked %v, want 3 and [7]", calls.Load(), n.acked)
	}
	if c := l.Counts(); c.Delivered != 1 || c.Retried != 2 || c.Dropped != 0 || c.Acked != 1 {
		t.Fatalf("counts %+v", c)
	}
}

// TestGivesUpAfterMaxAttemptsAndFollowsNoRedirect: a receiver that never
// takes an event (here: it redirects, which is not followed) costs
// MaxAttempts attempts, then the event is dropped for it, counted, and
// acked.
func TestGivesUpAfterMaxAttemptsAndFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusTemporaryRedirect))
	defer srv.Close()
	n := &fakeNode{leader: true, events: []nodeapi.Event{{Seq: 1, ID: "e", Body: []byte(`{}`)}},
		hooks: []nodeapi.Webhook{{Name: "a", URL: srv.URL, Secret: "x"}}}
	l := New(n, Config{MinBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond, MaxAttempts: 3})
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		l.pass(context.Background(), t0.Add(time.Duration(i)*time.Second))
	}
	if c := l.Counts(); c.Dropped != 1 || c.Retried != 2 || c.Delivered != 0 || len(n.acked) != 1 {
		t.Fatalf("counts %+v acked %v", c, n.acked)
	}
	if elsewhere.Load() != 0 {
		t.Fatal("a redirect was followed")
	}
}
