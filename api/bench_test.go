package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// constStore answers every check with the same decision, so the benchmarks
// measure the HTTP layer alone: decoding, validation, headers, encoding.
type constStore struct{ *fakeStore }

func (constStore) Check(_ context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	out := make([]fsm.Result, len(ops))
	for i := range ops {
		out[i] = fsm.Result{Allowed: true, Decisions: []fsm.Decision{{Decision: algo.Decision{
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

func benchHandler(b *testing.B, path string, body []byte) {
	store := constStore{newFakeStore()}
	store.putPolicy(&testing.T{}, "api", algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1s"}, false)
	h := New(store, Config{Logger: discardLogger()}).Handler()
	req := httptest.NewRequest("POST", path, nil)
	rd := bytes.NewReader(body)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		req.ContentLength = int64(len(body))
		clear(w.h)
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
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
