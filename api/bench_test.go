package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/service"
)

// constStore answers every check with the same decision, so the benchmarks
// measure the HTTP layer alone: decoding, validation, headers, encoding.
type constStore struct{ *fakeStore }

func (constStore) Check(_ context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	out := make([]nodeapi.Result, len(ops))
	for i := range ops {
		out[i] = nodeapi.Result{Allowed: true, Decisions: []nodeapi.Decision{{Decision: algo.Decision{
			Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 1_500_000_000}}}}
	}
	return out, nil
}

// discardWriter is a ResponseWriter that keeps nothing but the status, so
// that the benchmark counts the handler's allocations, not a recorder's.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// refusingStore is a store whose over-limit cache (a real overlimit.Cache,
// looked up as cluster.Node does) holds a refusal for every key it was told
// about; anything it misses reaches constStore, which allows.
type refusingStore struct {
	constStore
	cache *overlimit.Cache
}

func (r refusingStore) Refused(id overlimit.LimitID, key string, cost int64) (algo.Decision, bool) {
	return r.cache.LookupString(id, key, cost, time.Now().UnixNano())
}

// refuse caches a refusal of key under the limit id for an hour.
func (r refusingStore) refuse(id overlimit.LimitID, spec algo.Spec, key string) {
	r.cache.Observe(overlimit.Observation{ID: id, Key: []byte(key), Spec: &spec, Cost: 1, Now: time.Now().UnixNano(),
		Decision: algo.Decision{Limit: 100, ResetAfter: time.Hour, RetryAfter: time.Hour}})
}

var _ service.Refuser = refusingStore{}

// benchPolicy is the policy "api" of the benchmarks, and the inline limit of
// benchInline.
var benchPolicy = algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1s"}

func benchHandler(b *testing.B, path string, body []byte) {
	store := constStore{newFakeStore()}
	store.putPolicy(&testing.T{}, "api", benchPolicy, false)
	runBench(b, newAPI(store, Config{Logger: discardLogger()}).Handler(), path, body, nil)
}

// runBench serves body to h in a loop; check, when set, inspects each
// response.
func runBench(b *testing.B, h http.Handler, path string, body []byte, check func(*discardWriter)) {
	req := httptest.NewRequest("POST", path, nil)
	var rc readCloser // rewound, not rewrapped: the loop allocates nothing of its own
	req.Body = &rc
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	cpu := processCPU()
	n := 0
	for b.Loop() {
		n++
		rc.Reset(body)
		req.ContentLength = int64(len(body))
		clear(w.h)
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
		if check != nil {
			check(w)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(n), "cpu-ns/op")
}

// BenchmarkCheck is the /v1/check handler against a store that answers at
// once: the cost the HTTP layer adds to every decision.
func BenchmarkCheck(b *testing.B) {
	b.Run("inline", func(b *testing.B) {
		benchHandler(b, "/v1/check", []byte(`{"key":"user:12345","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"},"cost":1}`))
	})
	b.Run("policy", func(b *testing.B) {
		benchHandler(b, "/v1/check", []byte(`{"key":"user:12345","policy":"api","cost":1}`))
	})
}

// leasingStore is a follower whose leader grants every lease asked for at
// once, with units for the whole run: its checks are answered from the
// service's lease table, as a busy key's checks are on every node of a
// cluster with leases, so a benchmark of them is the front
// end's cost per leased check.
type leasingStore struct {
	constStore
	granted, checks atomic.Int64
}

func (l *leasingStore) Check(ctx context.Context, ops []nodeapi.Op) ([]nodeapi.Result, error) {
	l.checks.Add(1)
	return l.constStore.Check(ctx, ops)
}

func (*leasingStore) LeaderID() (string, bool)         { return "n1", false }
func (*leasingStore) LeaderHTTPAddr() (string, string) { return "n1", "http://127.0.0.1:8080" }

func (l *leasingStore) GrantLeases(_ context.Context, reqs []nodeapi.LeaseRequest) ([]nodeapi.LeaseGrant, error) {
	gs := make([]nodeapi.LeaseGrant, len(reqs))
	for i, r := range reqs {
		gs[i] = nodeapi.LeaseGrant{ID: r.ID, Units: 500_000_000, Valid: time.Hour, Limit: 1_000_000_000, Remaining: 500_000_000,
			ResetAt: time.Now().Add(time.Hour).UnixNano()}
	}
	l.granted.Add(int64(len(reqs)))
	return gs, nil
}

func (*leasingStore) ReturnLeases(_ context.Context, rets []nodeapi.LeaseReturn) ([]int64, error) {
	return make([]int64, len(rets)), nil
}

var _ service.Leaser = (*leasingStore)(nil)

// BenchmarkCheckRoles is /v1/check through the whole handler chain as each
// node of a cluster answers it: the leader (decided by the store), a
// follower (the same, plus the Limitd-Leader hint) and a follower
// answering from a quota lease (a leased check: no store call).
func BenchmarkCheckRoles(b *testing.B) {
	body := []byte(`{"key":"user:12345","policy":"api"}`)
	b.Run("leader", func(b *testing.B) {
		store := constStore{newFakeStore()}
		store.putPolicy(&testing.T{}, "api", benchPolicy, false)
		runBench(b, newAPI(store, Config{Logger: discardLogger()}).Handler(), "/v1/check", body, nil)
	})
	b.Run("follower", func(b *testing.B) {
		store := &leasingStore{constStore: constStore{newFakeStore()}}
		store.putPolicy(&testing.T{}, "api", benchPolicy, false)
		runBench(b, newAPI(store, Config{Logger: discardLogger()}).Handler(), "/v1/check", body, func(w *discardWriter) {
			if len(w.h[hdrLeader]) != 1 {
				b.Fatal("no leader hint")
			}
		})
	})
	b.Run("leased", func(b *testing.B) {
		store := &leasingStore{constStore: constStore{newFakeStore()}}
		spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1_000_000_000, Window: "24h"}.Spec()
		if err != nil {
			b.Fatal(err)
		}
		store.mu.Lock()
		store.policies["api"] = nodeapi.Policy{Name: "api", Spec: spec, Lease: algo.Lease{Share: algo.DefaultLeaseShare, MaxTTL: time.Minute}}
		store.mu.Unlock()
		srv := newAPI(store, Config{Logger: discardLogger()})
		defer srv.Service().CloseLeases(context.Background())
		h := srv.Handler()
		// The lease is taken in the background after the key's first checks.
		for deadline := time.Now().Add(10 * time.Second); store.granted.Load() == 0; {
			if time.Now().After(deadline) {
				b.Fatal("no lease granted")
			}
			runOnce(b, h, "/v1/check", body)
			time.Sleep(time.Millisecond)
		}
		runOnce(b, h, "/v1/check", body)
		before := store.checks.Load()
		runBench(b, h, "/v1/check", body, nil)
		b.StopTimer()
		if n := store.checks.Load() - before; n > int64(b.N/100) {
			b.Fatalf("%d of %d checks went to the store: not leased", n, b.N)
		}
	})
}

// runOnce serves body to h once.
func runOnce(b *testing.B, h http.Handler, path string, body []byte) {
	req := httptest.NewRequest("POST", path, bytes.NewReader(body))
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, req)
	if w.code != http.StatusOK {
		b.Fatalf("status %d", w.code)
	}
}

// BenchmarkCheckCachedRefusal is /v1/check for a key the over-limit cache
// refuses (the over-limit cache): the whole request is answered by this layer and the
// service, so it is their cost per refusal under attack.
func BenchmarkCheckCachedRefusal(b *testing.B) {
	spec, err := benchPolicy.Spec()
	if err != nil {
		b.Fatal(err)
	}
	store := refusingStore{constStore{newFakeStore()}, overlimit.New(overlimit.Options{})}
	store.putPolicy(&testing.T{}, "api", benchPolicy, false)
	store.refuse(overlimit.LimitID{Policy: true, Ident: "api"}, spec, "user:12345")
	store.refuse(overlimit.LimitID{Ident: string(algo.AppendSpec(nil, spec))}, spec, "user:12345")
	h := newAPI(store, Config{Logger: discardLogger()}).Handler()
	refused := func(w *discardWriter) {
		if len(w.h[hdrRetryAfter]) == 0 {
			b.Fatal("allowed: the over-limit cache missed")
		}
	}
	b.Run("inline", func(b *testing.B) {
		runBench(b, h, "/v1/check", []byte(`{"key":"user:12345","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"},"cost":1}`), refused)
	})
	b.Run("policy", func(b *testing.B) {
		runBench(b, h, "/v1/check", []byte(`{"key":"user:12345","policy":"api","cost":1}`), refused)
	})
}

// BenchmarkBatch100 reports the per-request cost of a batch of 100 checks.
func BenchmarkBatch100(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"checks":[`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"key":"user:` + strconv.Itoa(i) + `","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"}}`)
	}
	body.WriteString(`]}`)
	benchHandler(b, "/v1/check/batch", body.Bytes())
}

// readCloser is a request body that can be rewound without allocating.
type readCloser struct{ bytes.Reader }

func (*readCloser) Close() error { return nil }

// maxCachedRefusalAllocs is the allocation budget of /v1/check answered from
// the over-limit cache: the key's string, and the RateLimit header values
// with their slices.
const maxCachedRefusalAllocs = 3

// TestCachedRefusalHandlerAllocs holds the handler to its budget for a
// refusal from the over-limit cache, under a policy and an inline
// limit: a new allocation on this path costs every request of an attack.
func TestCachedRefusalHandlerAllocs(t *testing.T) {
	spec, err := benchPolicy.Spec()
	if err != nil {
		t.Fatal(err)
	}
	store := refusingStore{constStore{newFakeStore()}, overlimit.New(overlimit.Options{})}
	store.putPolicy(t, "api", benchPolicy, false)
	store.refuse(overlimit.LimitID{Policy: true, Ident: "api"}, spec, "user:12345")
	store.refuse(overlimit.LimitID{Ident: string(algo.AppendSpec(nil, spec))}, spec, "user:12345")
	h := newAPI(store, Config{Logger: discardLogger()}).Handler()
	for _, body := range []string{
		`{"key":"user:12345","policy":"api","cost":1}`,
		`{"key":"user:12345","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"},"cost":1}`,
	} {
		var rc readCloser
		data := []byte(body)
		req := httptest.NewRequest("POST", "/v1/check", nil)
		req.Body = &rc
		req.ContentLength = int64(len(body))
		w := &discardWriter{h: http.Header{}}
		serve := func() {
			rc.Reset(data)
			clear(w.h)
			h.ServeHTTP(w, req)
		}
		serve()
		if w.code != http.StatusOK || len(w.h[hdrRetryAfter]) == 0 {
			t.Fatalf("%s: status %d, headers %v: not a cached refusal", body, w.code, w.h)
		}
		if n := testing.AllocsPerRun(200, serve); n > maxCachedRefusalAllocs {
			t.Errorf("%s: %v allocations per request, budget %d", body, n, maxCachedRefusalAllocs)
		}
	}
}
