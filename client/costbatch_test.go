package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// pairServer answers the pair routes: each release frees its slot once,
// each settle applies once (then replays); it counts requests per path and
// the items of each batch.
type pairServer struct {
	mu       sync.Mutex
	hits     map[string]int
	items    []int // per batch request, in arrival order
	freed    map[string]bool
	settled  map[string]bool
	gate     chan struct{} // when set, the first pair request waits for it
	fail     int           // batch requests to answer 503 unavailable first
	noBatch  bool          // answer 404 to the batch routes, as an older node
	errorFor string        // a slot answered not_found in a batch
}

func newPairServer(t *testing.T) (*pairServer, *Client) {
	ps := &pairServer{hits: map[string]int{}, freed: map[string]bool{}, settled: map[string]bool{}}
	srv := httptest.NewServer(ps)
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, WithCoalescing(Coalescing{MaxInflight: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ps, c
}

func (ps *pairServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ps.mu.Lock()
	ps.hits[r.URL.Path]++
	batch := strings.HasSuffix(r.URL.Path, "/batch")
	var gate chan struct{}
	if r.URL.Path != "/v1/cluster" { // not the client's leader lookup
		gate, ps.gate = ps.gate, nil
	}
	if batch && ps.noBatch {
		ps.mu.Unlock()
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","field":"","message":"no such endpoint"}}`)
		return
	}
	if batch && ps.fail > 0 {
		ps.fail--
		ps.mu.Unlock()
		w.WriteHeader(503)
		_, _ = io.WriteString(w, `{"error":{"code":"unavailable","field":"","message":"no leader"}}`)
		return
	}
	ps.mu.Unlock()
	if gate != nil {
		<-gate
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	answer := func(item map[string]any) any {
		if s, ok := item["slot"].(string); ok {
			if s == ps.errorFor {
				return map[string]any{"error": map[string]any{"code": "not_found", "field": "releases[0].slot", "message": "no slot"}}
			}
			done := !ps.freed[s]
			ps.freed[s] = true
			return map[string]any{"released": done, "slot": s, "slot_expires_ms": 0, "limit": 3, "remaining": 1}
		}
		rsv, _ := item["reservation"].(string)
		replayed := ps.settled[rsv]
		ps.settled[rsv] = true
		return map[string]any{"credited": 5, "debt": 0, "rolled": false, "limit": 10, "remaining": 7, "replayed": replayed}
	}
	if !batch {
		var item map[string]any
		_ = json.Unmarshal(body, &item)
		b, _ := json.Marshal(answer(item))
		_, _ = w.Write(b)
		return
	}
	var env map[string][]map[string]any
	_ = json.Unmarshal(body, &env)
	var out []any
	for _, items := range env {
		ps.items = append(ps.items, len(items))
		for _, it := range items {
			out = append(out, answer(it))
		}
	}
	b, _ := json.Marshal(map[string]any{"results": out})
	_, _ = w.Write(b)
}

func (ps *pairServer) counts() (map[string]int, []int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h := map[string]int{}
	for k, v := range ps.hits {
		h[k] = v
	}
	return h, append([]int(nil), ps.items...)
}

// waitPending waits until n items wait in b (the first batch is held at
// the server meanwhile).
func waitPending(t *testing.T, b *pairBatcher, n int, gate chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b.mu.Lock()
		got := len(b.pending)
		b.mu.Unlock()
		if got == n {
			return
		}
	}
	close(gate) // the held request must end, or the server's Close waits for it
	b.mu.Lock()
	got, inflight := len(b.pending), b.inflight
	b.mu.Unlock()
	t.Fatalf("%d items never pending (%d pending, %d in flight)", n, got, inflight)
}

// concurrently calls first, holds it at the server until the calls of
// rest (started once first is there) all wait in b, then lets them go: first
// goes alone (by its single route), rest as one batch.
func concurrently(t *testing.T, ps *pairServer, b *pairBatcher, first func(), rest ...func()) {
	t.Helper()
	gate := make(chan struct{})
	ps.mu.Lock()
	ps.gate = gate
	ps.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1 + len(rest))
	go func() { defer wg.Done(); first() }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ps.mu.Lock()
		held := ps.gate == nil
		ps.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("the first call never reached the server")
		}
	}
	for _, f := range rest {
		go func() { defer wg.Done(); f() }()
	}
	waitPending(t, b, len(rest), gate)
	close(gate)
	wg.Wait()
}

// Concurrent releases go out as batches, as checks do: the first alone (by
// its single route), the nine that arrived while it was in flight as one
// request; each caller gets its own answer.
func TestConcurrentReleasesAreCoalescedIntoBatches(t *testing.T) {
	ps, c := newPairServer(t)
	ctx := context.Background()
	got := make([]SlotStatus, 10)
	errs := make([]error, 10)
	release := func(i int) func() {
		return func() {
			got[i], errs[i] = c.Release(ctx, Request{Key: "job", Policy: "workers"}, "s"+string(rune('0'+i)))
		}
	}
	var rest []func()
	for i := 1; i < 10; i++ {
		rest = append(rest, release(i))
	}
	concurrently(t, ps, c.pb.release, release(0), rest...)
	for i := range got {
		if errs[i] != nil || !got[i].Done {
			t.Fatalf("release %d: %+v %v", i, got[i], errs[i])
		}
	}
	hits, items := ps.counts()
	if hits["/v1/release/batch"] != 1 || hits["/v1/release"] != 1 || len(items) != 1 || items[0] != 9 {
		t.Fatalf("requests %v, items per batch %v: want one single release, then one batch of 9", hits, items)
	}
	if st := c.Stats(); st.PairBatches != 1 || st.Batches != 0 {
		t.Fatalf("stats %+v: want 1 pair batch and no check batch", st)
	}
}

// A batch item's error is its caller's, named as the single route names it.
func TestBatchedReleaseErrorIsTheCallers(t *testing.T) {
	ps, c := newPairServer(t)
	ps.errorFor = "gone"
	ctx := context.Background()
	var err error
	var ok SlotStatus
	concurrently(t, ps, c.pb.release, func() { _, _ = c.Release(ctx, Request{Key: "job", Policy: "workers"}, "first") },
		func() { _, err = c.Release(ctx, Request{Key: "job", Policy: "workers"}, "gone") },
		func() { ok, _ = c.Release(ctx, Request{Key: "job", Policy: "workers"}, "other") })
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Field != "slot" || !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v (%+v), want not_found on slot", err, e)
	}
	if !ok.Done {
		t.Fatalf("the other item of the batch: %+v", ok)
	}
	if hits, _ := ps.counts(); hits["/v1/release/batch"] != 1 {
		t.Fatalf("requests %v: want the two in one batch", hits)
	}
}

// Settles are coalesced and retried as a whole: a batch answered 503 is
// sent again, and each settle applies once on the server (the retry's
// answer is the caller's, not a second settle).
func TestBatchedSettleRetriesAsAWhole(t *testing.T) {
	ps, c := newPairServer(t)
	ps.fail = 1
	ctx := context.Background()
	var s1, s2 Settled
	var e1, e2 error
	concurrently(t, ps, c.pb.settle, func() { _, _ = c.Settle(ctx, "r1.first", 5) },
		func() { s1, e1 = c.Settle(ctx, "r1.a", 5) }, func() { s2, e2 = c.Settle(ctx, "r1.b", 5) })
	if e1 != nil || e2 != nil || s1.Credited != 5 || s1.Remaining != 7 || s1.Replayed || s2.Replayed {
		t.Fatalf("settles: %+v %v, %+v %v", s1, e1, s2, e2)
	}
	hits, _ := ps.counts()
	if hits["/v1/settle/batch"] != 2 || hits["/v1/settle"] != 1 {
		t.Fatalf("requests %v: want the batch sent twice", hits)
	}
	if s, _ := c.Settle(ctx, "r1.a", 5); !s.Replayed {
		t.Fatalf("a repeated settle: %+v", s)
	}
}

// A node without the batch routes (404) gets single requests, from then on
// without trying the batch route again.
func TestPairCallsFallBackToSingleRoutes(t *testing.T) {
	ps, c := newPairServer(t)
	ps.noBatch = true
	ctx := context.Background()
	st := make([]SlotStatus, 3)
	errs := make([]error, 3)
	rel := func(i int) func() {
		return func() {
			st[i], errs[i] = c.Release(ctx, Request{Key: "job", Policy: "workers"}, "s"+string(rune('0'+i)))
		}
	}
	concurrently(t, ps, c.pb.release, rel(0), rel(1), rel(2))
	for i := range st {
		if errs[i] != nil || !st[i].Done {
			t.Fatalf("release %d: %+v %v", i, st[i], errs[i])
		}
	}
	for i := range st { // no batcher now: straight to the single route
		rel(i)()
	}
	hits, _ := ps.counts()
	if hits["/v1/release/batch"] != 1 || hits["/v1/release"] != 1+2+3 {
		t.Fatalf("requests %v: want one batch attempt, then single releases", hits)
	}
}
