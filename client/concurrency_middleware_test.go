package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// One slot per key: a second request while the first is served is 429 with
// the hold's Retry-After and never reaches the handler; the slot is released
// when the handler returns, when it panics and when the caller hung up.
func TestConcurrencyMiddleware(t *testing.T) {
	fc := newFakeCluster(t, 1)
	spec, err := algo.Config{Algorithm: "concurrency", Limit: 1, Hold: "30s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	fc.specs["inflight"] = spec
	c, err := New(fc.addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entered, unblock := make(chan struct{}), make(chan struct{})
	served := 0
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		switch r.URL.Path {
		case "/slow":
			entered <- struct{}{}
			<-unblock
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/hangup":
			// The caller went away before the handler returned: the
			// release must not inherit the cancellation.
			r.Context().Value(cancelKey{}).(context.CancelFunc)()
		}
		w.WriteHeader(http.StatusNoContent)
	})
	h := c.ConcurrencyMiddleware("inflight", func(r *http.Request) string { return r.Header.Get("X-User") })(app)
	serve := func(path, user string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), cancelKey{}, context.CancelFunc(nil)))
		defer cancel()
		ctx = context.WithValue(ctx, cancelKey{}, cancel)
		r := httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	releases := func() int {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return len(fc.released)
	}

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- serve("/slow", "alice") }()
	<-entered
	if w := serve("/fast", "alice"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "30" {
		t.Fatalf("second request in flight: %d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if served != 1 {
		t.Fatalf("a refused request reached the handler (%d served)", served)
	}
	if w := serve("/fast", "bob"); w.Code != http.StatusNoContent {
		t.Fatalf("another key: %d", w.Code)
	}
	close(unblock)
	if w := <-first; w.Code != http.StatusNoContent {
		t.Fatalf("first request: %d", w.Code)
	}
	if n := releases(); n != 2 {
		t.Fatalf("%d releases after two served requests, want 2", n)
	}
	if w := serve("/fast", "alice"); w.Code != http.StatusNoContent {
		t.Fatalf("after the release: %d", w.Code)
	}

	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Fatalf("the handler's panic did not go on up: %v", p)
			}
		}()
		serve("/panic", "alice")
	}()
	if w := serve("/fast", "alice"); w.Code != http.StatusNoContent {
		t.Fatalf("after a panicking handler the slot is still held: %d", w.Code)
	}
	if w := serve("/hangup", "alice"); w.Code != http.StatusNoContent {
		t.Fatalf("hangup: %d", w.Code)
	}
	if w := serve("/fast", "alice"); w.Code != http.StatusNoContent {
		t.Fatalf("after a hung-up caller the slot is still held: %d", w.Code)
	}
	before := served
	if w := serve("/fast", ""); w.Code != http.StatusNoContent || served != before+1 || releases() != 7 {
		t.Fatalf("no key: %d (releases %d)", w.Code, releases())
	}
}

// An unreachable cluster under FailError is 503 with Retry-After: 1, and
// the handler is not run.
func TestConcurrencyMiddlewareUnavailable(t *testing.T) {
	fc := newFakeCluster(t, 1)
	fc.setLeader(-1)
	c, err := New(fc.addrs(), WithFailMode(FailError))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := false
	h := c.ConcurrencyMiddleware("inflight", func(*http.Request) string { return "alice" })(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	w := httptest.NewRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || ran {
		t.Fatalf("unavailable: %d Retry-After %q ran %v", w.Code, w.Header().Get("Retry-After"), ran)
	}
}

type cancelKey struct{}
