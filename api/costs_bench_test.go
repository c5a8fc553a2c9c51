package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/service/nodetest"
)

// BenchmarkCostPairsHTTP is the process CPU per unit of work through the
// whole HTTP handler, the service and a real state machine (each request its
// own log entry, no Raft): one check, an acquire and its release, a reserve
// and its settle. A pair is two requests, so its floor is 2× one check's;
// docs/BENCHMARKS.md has the figures.
func BenchmarkCostPairsHTTP(b *testing.B) {
	run := func(b *testing.B, policy string, unit func(h http.Handler, key string)) {
		log := nodetest.NewLog(b, time.Unix(0, testEpoch))
		log.RequestIDRetention = 10 * time.Minute
		h := newAPI(&fsmStore{Node: log.Node("n1")}, Config{Logger: discardLogger(), AdminToken: "tok"}).Handler()
		if w := serve(h, "PUT", "/v1/policies/p", policy, "Authorization: Bearer tok"); w.Code != 200 {
			b.Fatalf("policy: %d %s", w.Code, w.Body)
		}
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		for i := 0; i < 200; i++ {
			unit(h, keys[i%len(keys)])
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			unit(h, keys[i%len(keys)])
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/unit")
	}
	field := func(b *testing.B, w *httptest.ResponseRecorder, name string) string {
		var m map[string]any
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &m) != nil {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
		s, _ := m[name].(string)
		if s == "" {
			b.Fatalf("no %s in %s", name, w.Body)
		}
		return s
	}
	rate := `{"algorithm":"fixed_window","limit":1000000000,"window":"1h"}`
	b.Run("check", func(b *testing.B) {
		run(b, rate, func(h http.Handler, key string) {
			if w := serve(h, "POST", "/v1/check", `{"key":"`+key+`","policy":"p"}`); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
	b.Run("acquire+release", func(b *testing.B) {
		run(b, `{"algorithm":"concurrency","limit":8,"hold":"30s"}`, func(h http.Handler, key string) {
			slot := field(b, serve(h, "POST", "/v1/check", `{"key":"`+key+`","policy":"p"}`), "slot")
			if w := serve(h, "POST", "/v1/release", `{"key":"`+key+`","policy":"p","slot":"`+slot+`"}`); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		run(b, rate, func(h http.Handler, key string) {
			rsv := field(b, serve(h, "POST", "/v1/check", `{"key":"`+key+`","policy":"p","cost":10,"reserve":{"hold":"60s"}}`), "reservation")
			if w := serve(h, "POST", "/v1/settle", `{"reservation":"`+rsv+`","cost":7}`); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
}

func serve(h http.Handler, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for _, kv := range header {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}
