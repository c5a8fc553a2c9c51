package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// switchDialer dials the real address, or refuses as a closed port does
// while down is set, and counts the attempts: the test asserts on dials, not
// on wall-clock time.
type switchDialer struct {
	down  atomic.Bool
	hang  atomic.Bool // a dial waits for its context, as one to a host that drops SYNs
	dials atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

// goDown refuses new connections and closes every one dialed so far. Closing
// only the idle ones is not enough: the transport returns a connection to its
// idle pool after the caller has its answer, so a connection still on its way
// back would carry the next check to the node that "went away".
func (d *switchDialer) goDown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down.Store(true)
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

func (d *switchDialer) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d.dials.Add(1)
			if d.hang.Load() {
				<-ctx.Done()
				return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
			}
			// Under mu, so a dial in flight when goDown runs is either
			// refused or closed by it.
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.down.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				d.conns = append(d.conns, c)
			}
			return c, err
		},
	}}
}

// fakeClock is the breaker's clock in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// With the cluster unreachable, fail-open answers come at once instead of
// after the timeout: after Failures calls the breaker opens, later calls
// make no connection attempt, one call per Interval probes, and the breaker
// closes when the cluster answers again.
func TestBreakerFailsFastAndCloses(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(0)
	sd := &switchDialer{}
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	c := mustNew(t, fc.addrs(), WithHTTPClient(sd.client()), WithFailMode(FailOpen),
		WithBreaker(Breaker{Failures: 3, Interval: time.Second}))
	c.br.now = clock.now
	if d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil || d.Degraded {
		t.Fatalf("check while up: %+v %v", d, err)
	}

	sd.goDown() // the node "went away": its connections too
	const n = 50
	loop := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			// No deadline of the caller's own: the client's 10 s default applies.
			d, err := c.Check(context.Background(), Request{Key: "k", Policy: "p"})
			if err != nil || !d.Allowed || !d.Degraded {
				loop <- fmt.Errorf("check %d while down: %+v %v", i, d, err)
				return
			}
		}
		loop <- nil
	}()
	select {
	case err := <-loop:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // a liveness bound, half of one timeout (10 s)
		t.Fatalf("%d fail-open checks not answered within 5s", n)
	}
	dialsOpen := sd.dials.Load()
	// 3 failing calls, each one attempt plus at most one discovery round in
	// the background: far fewer than one dial per check.
	if dialsOpen > 12 {
		t.Fatalf("%d dial attempts for %d checks with the breaker open", dialsOpen, n)
	}
	if s := c.Stats(); s.ShortCircuited < n-3 || s.FailedOpen != n {
		t.Fatalf("stats %+v", s)
	}

	// Within the interval nothing dials; after it, one call probes.
	waitDials := func() int64 { // the background discovery, if one runs, ends first
		for range 100 {
			if !c.discovering.Load() {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return sd.dials.Load()
	}
	base := waitDials()
	c.Check(context.Background(), Request{Key: "k", Policy: "p"})
	if got := waitDials(); got != base {
		t.Fatalf("%d dials within the interval", got-base)
	}
	clock.advance(time.Second)
	c.Check(context.Background(), Request{Key: "k", Policy: "p"})
	c.Check(context.Background(), Request{Key: "k", Policy: "p"})
	if got := waitDials(); got == base {
		t.Fatal("no probe after the interval")
	}

	// The cluster is back: the next probe closes the breaker.
	sd.down.Store(false)
	clock.advance(time.Second)
	if d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil || d.Degraded {
		t.Fatalf("probe after the cluster came back: %+v %v", d, err)
	}
	if c.br.open.Load() {
		t.Fatal("breaker still open after an answer")
	}
	if d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil || d.Degraded {
		t.Fatalf("check after the breaker closed: %+v %v", d, err)
	}
}

// A probe of the open breaker is bounded by Breaker.ProbeTimeout, not by
// the call's own deadline: against a cluster whose connections hang (a host
// dropping SYNs) the fail-open answer comes after ProbeTimeout (200 ms here)
// although the caller allowed a minute.
func TestBreakerProbeBoundedByProbeTimeout(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(0)
	sd := &switchDialer{}
	sd.goDown()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	c := mustNew(t, fc.addrs(), WithHTTPClient(sd.client()), WithFailMode(FailOpen), WithTimeout(time.Minute),
		WithBreaker(Breaker{Failures: 1, Interval: time.Second, ProbeTimeout: 200 * time.Millisecond}))
	c.br.now = clock.now
	if d, err := c.Check(context.Background(), Request{Key: "k", Policy: "p"}); err != nil || !d.Degraded {
		t.Fatalf("refused check: %+v %v", d, err)
	}
	if !c.br.open.Load() {
		t.Fatal("breaker not open after a refused call with Failures 1")
	}
	sd.hang.Store(true)
	clock.advance(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		d, err := c.Check(ctx, Request{Key: "k", Policy: "p"})
		if err == nil && (!d.Allowed || !d.Degraded) {
			err = fmt.Errorf("probe answered %+v", d)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a liveness bound, half the caller's minute
		t.Fatal("the probe waited for the caller's deadline, not ProbeTimeout")
	}
	if s := c.Stats(); s.FailedOpen != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A refused connection fails over to the other known nodes before the call
// counts as a transport failure, even with a breaker that opens at one.
func TestRefusedNodeFailsOverFirst(t *testing.T) {
	fc := newFakeCluster(t, 4)
	fc.setLeader(3)
	var addrs []string
	for _, nd := range fc.nodes[:3] {
		addrs = append(addrs, nd.addr())
		nd.srv.Close()
	}
	addrs = append(addrs, fc.nodes[3].addr())
	c := mustNew(t, addrs, WithBreaker(Breaker{Failures: 1}), WithCoalescing(Coalescing{Disabled: true}))
	for i := 0; i < 3; i++ {
		if d, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil || d.Degraded {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	if c.br.open.Load() {
		t.Fatal("breaker opened although a node answered")
	}
}

// Against a closed port, a call fails at once (not at the deadline), says
// "connection refused to ADDR", and does not claim the check may have been
// counted: nothing was sent.
func TestClosedPortFailsFast(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	c := mustNew(t, []string{addr}, WithTimeout(time.Minute))
	done := make(chan error, 1)
	go func() {
		_, err := c.PutPolicy(context.Background(), Policy{Name: "p", Limit: Limit{Algorithm: "fixed_window", Limit: 1, Window: "1s"}})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) ||
			!strings.Contains(err.Error(), "connection refused to "+addr) || strings.Contains(err.Error(), "counted") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(20 * time.Second): // a liveness bound, a third of the timeout
		t.Fatal("a refused connection waited for the deadline")
	}
}

// An admin write whose outcome is unknown says it may have been applied,
// not counted: only checks count.
func TestAdminUnknownOutcomeSaysApplied(t *testing.T) {
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
	// Coalescing off: a coalesced caller whose deadline passes before its
	// batch is even sent rightly reports a known (uncounted) outcome.
	c := mustNew(t, []string{strings.TrimPrefix(srv.URL, "http://")}, WithTimeout(time.Second),
		WithCoalescing(Coalescing{Disabled: true}))
	_, err := c.PutPolicy(context.Background(), Policy{Name: "p", Limit: Limit{Algorithm: "fixed_window", Limit: 1, Window: "1s"}})
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "it may have been applied") || strings.Contains(err.Error(), "counted") {
		t.Fatalf("put: %v", err)
	}
	_, err = c.Check(context.Background(), Request{Key: "k", Policy: "p"})
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "it may have been counted") {
		t.Fatalf("check: %v", err)
	}
}

// Through Middleware with FailOpen, an outage passes requests on at once
// instead of adding the client's timeout to each: after the breaker opens
// no request dials, and every one reaches the handler.
func TestMiddlewareFailOpenOutagePassesAtOnce(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(0)
	sd := &switchDialer{}
	sd.goDown()
	c := mustNew(t, fc.addrs(), WithHTTPClient(sd.client()), WithFailMode(FailOpen),
		WithBreaker(Breaker{Failures: 3, Interval: time.Hour}))
	var served atomic.Int64
	h := c.Middleware("p", func(r *http.Request) string { return "alice" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	const n = 50
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil)) // no deadline: the 10 s default applies
			if rec.Code != http.StatusOK {
				done <- fmt.Errorf("request %d: %d %s", i, rec.Code, rec.Body)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // a liveness bound, half of one timeout (10 s)
		t.Fatalf("%d fail-open requests not served within 5s", n)
	}
	if served.Load() != n {
		t.Fatalf("%d of %d requests reached the handler", served.Load(), n)
	}
	// Three calls that reached no node (each one attempt, plus at most a
	// discovery round), then none: far fewer dials than requests.
	if d := sd.dials.Load(); d > 12 {
		t.Fatalf("%d dial attempts for %d requests", d, n)
	}
	if s := c.Stats(); s.FailedOpen != n || s.ShortCircuited < n-3 {
		t.Fatalf("stats %+v", s)
	}
}
