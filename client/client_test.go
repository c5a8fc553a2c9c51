package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustNew(t testing.TB, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The client learns the leader from GET /v1/cluster on the one node it was
// given, sends to the leader, and follows a leader change.
func TestLeaderFollowing(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	c := mustNew(t, []string{fc.nodes[0].addr()}, WithCoalescing(Coalescing{Disabled: true}))
	ctx := ctxT(t)
	if _, err := c.learnLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := c.Check(ctx, Request{Key: "k", Policy: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fc.nodes[1].hitCount("/v1/check"); got != 5 {
		t.Fatalf("leader n2 got %d checks, want 5 (n1 %d, n3 %d)", got, fc.nodes[0].hitCount("/v1/check"), fc.nodes[2].hitCount("/v1/check"))
	}
	// n2 loses leadership and answers 503 for a while; n3 leads. n3 was never
	// configured: the client learned it from the members list.
	fc.setLeader(2)
	fc.inject = func(n *fakeNode, path string, applied bool) (int, string) {
		if n == fc.nodes[1] && !applied {
			return 503, CodeUnavailable
		}
		return 0, ""
	}
	if _, err := c.Check(ctx, Request{Key: "k", Policy: "p"}); err != nil {
		t.Fatal(err)
	}
	if got := c.Target(); got != fc.nodes[2].addr() {
		t.Fatalf("target %s, want n3 %s", got, fc.nodes[2].addr())
	}
	if got := fc.nodes[2].hitCount("/v1/check"); got != 1 {
		t.Fatalf("n3 got %d checks, want 1", got)
	}
}

// Cluster answers with the leader's view (every member's health known)
// even when the node asked is a follower; when the leader does not answer,
// with the follower's view, which names the follower.
func TestClusterAsksTheLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	c := mustNew(t, []string{fc.nodes[0].addr()}, WithCoalescing(Coalescing{Disabled: true}))
	ctx := ctxT(t)
	st, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != "n3" || st.State != StateLeader {
		t.Fatalf("answered by %s (%s), want the leader n3", st.NodeID, st.State)
	}
	for _, m := range st.Members {
		if m.Health != "healthy" {
			t.Fatalf("member %s health %q in the leader's view", m.ID, m.Health)
		}
	}
	fc.nodes[2].srv.Close()
	st, err = c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == StateLeader || st.NodeID == "n3" {
		t.Fatalf("answered by %s (%s) with the leader down, want a follower's own view", st.NodeID, st.State)
	}
	if st.Members[1].Health != "unknown" && st.NodeID == "n1" {
		t.Fatalf("follower n1's view of n2: %q, want unknown", st.Members[1].Health)
	}
}

// A follower's answer names the leader (Limitd-Leader): the client sends
// there next, even when no discovery could tell it.
func TestFollowsLeaderHeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.leaderHeader, fc.hideLeader = true, true
	c := mustNew(t, []string{fc.nodes[0].addr()}, WithCoalescing(Coalescing{Disabled: true}))
	ctx := ctxT(t)
	for i := 0; i < 4; i++ {
		if _, err := c.Check(ctx, Request{Key: "k", Policy: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Target(); got != fc.nodes[2].addr() {
		t.Fatalf("target %s, want the leader n3 %s", got, fc.nodes[2].addr())
	}
	if got := fc.nodes[2].hitCount("/v1/check"); got != 3 {
		t.Fatalf("the leader got %d of 4 checks, want the 3 after the first answer named it", got)
	}
}

// With the first configured node down, the client fails over to the next.
func TestFailover(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	down := fc.nodes[0].addr()
	fc.nodes[0].srv.Close()
	c := mustNew(t, []string{down, fc.nodes[1].addr(), fc.nodes[2].addr()})
	d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"})
	if err != nil || !d.Allowed {
		t.Fatalf("check: %+v %v", d, err)
	}
	// The leader dies: the client moves to the new leader.
	fc.nodes[1].srv.Close()
	fc.setLeader(2)
	d, err = c.Check(ctxT(t), Request{Key: "k", Policy: "p"})
	if err != nil || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("check after failover: %+v %v", d, err)
	}
}

// An outcome_unknown after the check was applied is retried with the same
// request_id: the server sees the id twice and counts it once.
func TestRetrySameRequestID(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			fc := newFakeCluster(t, 1)
			var mu sync.Mutex
			failed := false
			fc.inject = func(n *fakeNode, path string, applied bool) (int, string) {
				mu.Lock()
				defer mu.Unlock()
				if applied && !failed {
					failed = true
					return 503, CodeOutcomeUnknown
				}
				return 0, ""
			}
			c := mustNew(t, fc.addrs(), WithCoalescing(Coalescing{Disabled: !coalesce}))
			d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 4 || !d.Replayed {
				t.Fatalf("decision %+v, want allowed, remaining 4, replayed", d)
			}
			fc.mu.Lock()
			defer fc.mu.Unlock()
			if len(fc.applied) != 1 {
				t.Fatalf("applied %d checks, want 1", len(fc.applied))
			}
			id := fc.applied[0].ID
			if id == "" || fc.idHits[id] != 2 {
				t.Fatalf("request id %q arrived %d times, want 2 with one id", id, fc.idHits[id])
			}
			if s := c.Stats(); s.Retries != 1 {
				t.Fatalf("retries %d, want 1", s.Retries)
			}
		})
	}
}

// A caller-given request_id is sent as is.
func TestCallerRequestID(t *testing.T) {
	fc := newFakeCluster(t, 1)
	c := mustNew(t, fc.addrs())
	for i := 0; i < 2; i++ {
		if _, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p", RequestID: "mine"}); err != nil {
			t.Fatal(err)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.idHits["mine"] != 2 || len(fc.applied) != 1 {
		t.Fatalf("id hits %d applied %d, want 2 and 1", fc.idHits["mine"], len(fc.applied))
	}
}

// Typed errors: the server's code and field, relative to the check even when
// it was coalesced into a batch.
func TestTypedErrors(t *testing.T) {
	fc := newFakeCluster(t, 1)
	for _, coalesce := range []bool{false, true} {
		c := mustNew(t, fc.addrs(), WithCoalescing(Coalescing{Disabled: !coalesce}))
		_, err := c.Check(ctxT(t), Request{Key: "", Policy: "p"})
		var e *Error
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "key" || e.Code != CodeInvalidArgument {
			t.Fatalf("coalesce=%v: err %v (%#v), want invalid_argument on field key", coalesce, err, e)
		}
		_, err = c.Check(ctxT(t), Request{Key: "k", Policy: "nope"})
		if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("coalesce=%v: err %v, want not_found", coalesce, err)
		}
	}
	fc.setLeader(-1)
	c := mustNew(t, fc.addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, Request{Key: "k", Policy: "p"})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("no leader: err %v, want unavailable + deadline, not unknown", err)
	}
}

// Fail-open and fail-closed answer for an unreachable cluster, and count.
func TestFailModes(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	for _, tc := range []struct {
		mode    FailMode
		allowed bool
	}{{FailOpen, true}, {FailClosed, false}} {
		c := mustNew(t, []string{addr}, WithFailMode(tc.mode), WithTimeout(50*time.Millisecond))
		for i := 0; i < 3; i++ {
			d, err := c.Check(context.Background(), Request{Key: "k", Policy: "p"})
			if err != nil || d.Allowed != tc.allowed || !d.Degraded {
				t.Fatalf("mode %d: %+v %v", tc.mode, d, err)
			}
		}
		s := c.Stats()
		if got := s.FailedOpen + s.FailedClosed; got != 3 || (tc.mode == FailOpen) != (s.FailedOpen == 3) || s.Checks != 3 {
			t.Fatalf("mode %d: stats %+v", tc.mode, s)
		}
	}
	// An invalid request is an error in every mode: fail-open must not hide bugs.
	fc := newFakeCluster(t, 1)
	c := mustNew(t, fc.addrs(), WithFailMode(FailOpen))
	if _, err := c.Check(ctxT(t), Request{Key: "", Policy: "p"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("fail-open with an invalid key: %v", err)
	}
	// FailError returns the error.
	c = mustNew(t, []string{addr}, WithTimeout(50*time.Millisecond))
	if _, err := c.Check(context.Background(), Request{Key: "k", Policy: "p"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("FailError: %v", err)
	}
}

func TestMiddlewareHeaders(t *testing.T) {
	fc := newFakeCluster(t, 1)
	c := mustNew(t, fc.addrs())
	h := c.Middleware("p", func(r *http.Request) string { return r.Header.Get("X-Api-Key") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	for i := 0; i < 6; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Api-Key", "alice")
		h.ServeHTTP(rec, req)
		if got := rec.Header().Get("RateLimit-Policy"); got != `"p";q=5;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q", i, got)
		}
		wantR := fmt.Sprintf(`"p";r=%d;t=`, max(4-i, 0))
		if got := rec.Header().Get("RateLimit"); !strings.HasPrefix(got, wantR) {
			t.Fatalf("request %d: RateLimit %q, want prefix %q", i, got, wantR)
		}
		if i < 5 {
			if rec.Code != 200 || rec.Header().Get("Retry-After") != "" {
				t.Fatalf("request %d: %d, Retry-After %q", i, rec.Code, rec.Header().Get("Retry-After"))
			}
			continue
		}
		if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || rec.Header().Get("Retry-After") == "0" {
			t.Fatalf("request %d: %d, Retry-After %q, want 429 with a wait", i, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
}

// Coalescing under races: any interleaving of concurrent Check calls gives
// each caller exactly the decision a serial replay of the server's order
// gives it alone, each check is applied exactly once, invalid entries get
// their own error, and the decisions match some serial order (the server's).
func TestCoalescingProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fc := newFakeCluster(t, 1)
		// A node that takes fewer checks per batch than the client sends
		// makes the client split its batches.
		fc.maxBatch = rapid.IntRange(0, 4).Draw(rt, "serverMaxBatch")
		cfg := Coalescing{
			MaxBatch:    rapid.IntRange(1, 8).Draw(rt, "maxBatch"),
			MaxInflight: rapid.IntRange(1, 4).Draw(rt, "maxInflight"),
			MaxWait:     time.Duration(rapid.IntRange(0, 1).Draw(rt, "maxWaitMS")) * time.Millisecond,
		}
		c, err := New(fc.addrs(), WithCoalescing(cfg))
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		n := rapid.IntRange(1, 40).Draw(rt, "callers")
		reqs := make([]Request, n)
		for i := range reqs {
			reqs[i] = Request{
				Key:    rapid.SampledFrom([]string{"a", "b", "c", ""}).Draw(rt, "key"),
				Policy: "p",
				Cost:   rapid.Int64Range(0, 3).Draw(rt, "cost"),
				// Explicit ids tie each caller to its applied check; generated
				// ids are covered by TestRetrySameRequestID.
				RequestID: fmt.Sprintf("c%d", i),
			}
		}
		got := make([]Decision, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				got[i], errs[i] = c.Check(context.Background(), reqs[i])
			}(i)
		}
		wg.Wait()

		fc.mu.Lock()
		applied := append([]appliedCheck(nil), fc.applied...)
		fc.mu.Unlock()
		// Replay the server's order alone, from a fresh state.
		replay := newFakeCluster(t, 1)
		want := map[string]wireDecision{}
		for _, a := range applied {
			cost := a.Cost
			d, e := replay.decide(fakeCheck{Key: a.Key, Policy: "p", Cost: &cost}, "")
			if e != nil {
				rt.Fatalf("replay: %v", e)
			}
			if _, dup := want[a.ID]; dup || a.ID == "" {
				rt.Fatalf("request id %q applied twice or missing", a.ID)
			}
			want[a.ID] = d
		}
		// Each caller gets exactly the replayed decision of its own check
		// (matched by its request_id), so the decisions are those of one serial
		// order: the server's.
		valid := 0
		for i, r := range reqs {
			if r.Key == "" {
				var e *Error
				if !errors.As(errs[i], &e) || e.Field != "key" {
					rt.Fatalf("caller %d (empty key): err %v, want field key", i, errs[i])
				}
				continue
			}
			valid++
			if errs[i] != nil {
				rt.Fatalf("caller %d: %v", i, errs[i])
			}
			w, ok := want[r.RequestID]
			if !ok {
				rt.Fatalf("caller %d: its check was never applied", i)
			}
			if got[i] != decisionOf(&w) {
				rt.Fatalf("caller %d (%s cost %d): got %+v, serial replay gives %+v", i, r.Key, r.Cost, got[i], decisionOf(&w))
			}
		}
		if len(applied) != valid {
			rt.Fatalf("applied %d checks for %d valid callers", len(applied), valid)
		}
	})
}

// Batch: entries decided in order, an invalid one gets its own error with a
// field relative to its check, every entry carries a request_id.
func TestBatch(t *testing.T) {
	fc := newFakeCluster(t, 1)
	c := mustNew(t, fc.addrs())
	res, err := c.Batch(ctxT(t), Request{Key: "a", Policy: "p"}, Request{Key: "", Policy: "p"}, Request{Key: "a", Policy: "p", Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if res[0].Err != nil || res[0].Decision.Remaining != 4 || !errors.As(res[1].Err, &e) || e.Field != "key" || res[2].Decision.Remaining != 2 {
		t.Fatalf("batch: %+v", res)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, a := range fc.applied {
		if a.ID == "" {
			t.Fatalf("batch entry without a request_id: %+v", a)
		}
	}
}

// TLS: an https:// address or WithTLS talks HTTPS; the admin token goes on
// admin calls only.
func TestTLSAndToken(t *testing.T) {
	fc := newFakeClusterTLS(t, 1, true)
	tlsCfg := fc.nodes[0].srv.Client().Transport.(*http.Transport).TLSClientConfig
	c := mustNew(t, []string{"https://" + fc.addrs()[0]}, WithTLS(tlsCfg), WithToken("s3cret"))
	if _, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctxT(t), "k", "p", nil); err != nil {
		t.Fatal(err)
	}
	n := fc.nodes[0]
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range n.auth {
		admin := strings.HasPrefix(a, "DELETE /v1/keys/")
		if has := strings.HasSuffix(a, "Bearer s3cret"); has != admin {
			t.Errorf("request %q: token sent %v, want %v", a, has, admin)
		}
	}
	// Without the CA, the handshake fails: a configuration error, not
	// unavailability (TestConfigErrorsAreNotRetried has the details).
	c2 := mustNew(t, []string{"https://" + fc.addrs()[0]}, WithTimeout(30*time.Second)) // answered at once: no retries
	if _, err := c2.Check(context.Background(), Request{Key: "k", Policy: "p"}); !errors.Is(err, ErrConfig) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("untrusted certificate: %v", err)
	}
	// A failed handshake sent nothing: not an unknown outcome.
	hs := &url.Error{Op: "Post", URL: "https://x", Err: &tls.CertificateVerificationError{Err: errors.New("unknown authority")}}
	if sentMaybe(hs) {
		t.Error("a failed TLS handshake counted as a request that may have been sent")
	}
	dial := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	if sentMaybe(dial) || !sentMaybe(&url.Error{Op: "Post", URL: "http://x", Err: io.ErrUnexpectedEOF}) {
		t.Error("dial failures are unsent, lost answers may have been counted")
	}
}

// A leader whose advertised address the client cannot reach does not
// capture the retries: the client goes round the nodes it can reach, which
// forward.
func TestUnreachableLeaderAddress(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.setLeader(1)
	fc.nodes[1].srv.Close() // the named leader is unreachable from here
	c := mustNew(t, []string{fc.nodes[0].addr()}, WithCoalescing(Coalescing{Disabled: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.learnLeader(ctx); err != nil || c.Target() != fc.nodes[1].addr() {
		t.Fatalf("learn leader: %v, target %s", err, c.Target())
	}
	if _, err := c.Check(ctx, Request{Key: "k", Policy: "p"}); err != nil {
		t.Fatalf("check through the reachable node: %v", err)
	}
}

// A caller returns at its own deadline even when its check shares a batch
// with checks that may wait longer (and the node does not answer).
func TestCoalescedCallerKeepsItsDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cluster" {
			http.Error(w, "", http.StatusNotFound)
			return
		}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	c := mustNew(t, []string{strings.TrimPrefix(srv.URL, "http://")},
		WithCoalescing(Coalescing{MaxInflight: 1, MaxWait: 50 * time.Millisecond}))
	short := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := c.Check(ctx, Request{Key: "short", Policy: "p"})
		short <- err
	}()
	time.Sleep(10 * time.Millisecond) // join the short caller's batch while it waits (MaxWait)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.Check(ctx, Request{Key: "long", Policy: "p"})
	}()
	select {
	case err := <-short:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("short caller: %v, want its deadline with an unknown outcome", err)
		}
	case <-time.After(20 * time.Second): // a liveness bound, 100 times its deadline
		t.Fatal("the short caller is held by the long caller's deadline")
	}
}
