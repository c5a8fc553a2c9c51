package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/service/nodetest"
	"github.com/limitd/limitd/wire"
)

// BenchmarkCostPairsBatchedHTTP is BenchmarkCostPairsHTTP with the
// coalescing the Go client does: 16 units per request, one log entry per
// request. check: 16 checks in one /v1/check/batch; acquire+release: 16
// acquires in one /v1/check/batch, then their 16 releases in one
// /v1/release/batch; reserve+settle: 16 reserves as single checks, then
// their 16 settles in one /v1/settle/batch; reserve+settle-batched: the 16
// reserves as entries of one /v1/check/batch.
// cpu-ns/unit is process CPU over the units (docs/BENCHMARKS.md).
func BenchmarkCostPairsBatchedHTTP(b *testing.B) {
	const per = 16
	run := func(b *testing.B, policy string, round func(h http.Handler, keys []string)) {
		log := nodetest.NewLog(b, time.Unix(0, testEpoch))
		log.RequestIDRetention = 10 * time.Minute
		h := newAPI(&fsmStore{Node: log.Node("n1")}, Config{Logger: discardLogger(), AdminToken: "tok"}).Handler()
		if w := serve(h, "PUT", "/v1/policies/p", policy, "Authorization: Bearer tok"); w.Code != 200 {
			b.Fatalf("policy: %d %s", w.Code, w.Body)
		}
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		for i := 0; i < 20; i++ {
			round(h, keys[(i*per)%len(keys):][:per])
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		for i := 0; i < b.N; i++ {
			round(h, keys[(i*per)%len(keys):][:per])
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*per), "cpu-ns/unit")
	}
	// results reads an answer as the Go client does (wire's scanner), so
	// that the harness's share of the CPU stays small beside the server's,
	// and alike for every workload.
	var decs []wire.Decision
	results := func(b *testing.B, body []byte, member string) []string {
		var err error
		if decs, err = wire.ParseBatch(body, decs); err != nil || len(decs) != per {
			b.Fatalf("results: %s (%v)", body, err)
		}
		out := make([]string, per)
		for i := range decs {
			switch member {
			case "slot":
				out[i] = decs[i].Slot
			case "reservation":
				out[i] = decs[i].Reservation
			}
			if out[i] == "" && member != "" {
				b.Fatalf("no %s in %+v", member, decs[i])
			}
		}
		return out
	}
	checks := func(keys []string, extra string) string {
		var sb strings.Builder
		sb.WriteString(`{"checks":[`)
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"key":"` + k + `","policy":"p"` + extra + `}`)
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	rate := `{"algorithm":"fixed_window","limit":1000000000,"window":"1h"}`
	b.Run("check", func(b *testing.B) {
		run(b, rate, func(h http.Handler, keys []string) {
			// Read as the pair's first half is (its slots), so that the
			// harness's own decoding weighs alike on both sides.
			w := serve(h, "POST", "/v1/check/batch", checks(keys, ""))
			if w.Code != 200 {
				b.Fatal(w.Body)
			}
			results(b, w.Body.Bytes(), "")
		})
	})
	b.Run("acquire+release", func(b *testing.B) {
		run(b, `{"algorithm":"concurrency","limit":8,"hold":"30s"}`, func(h http.Handler, keys []string) {
			slots := results(b, serve(h, "POST", "/v1/check/batch", checks(keys, "")).Body.Bytes(), "slot")
			var sb strings.Builder
			sb.WriteString(`{"releases":[`)
			for i, k := range keys {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(`{"key":"` + k + `","policy":"p","slot":"` + slots[i] + `"}`)
			}
			sb.WriteString(`]}`)
			if w := serve(h, "POST", "/v1/release/batch", sb.String()); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		run(b, rate, func(h http.Handler, keys []string) {
			var sb strings.Builder
			sb.WriteString(`{"settles":[`)
			for i, k := range keys {
				w := serve(h, "POST", "/v1/check", `{"key":"`+k+`","policy":"p","cost":10,"reserve":{"hold":"60s"}}`)
				var m map[string]any
				if json.Unmarshal(w.Body.Bytes(), &m) != nil || m["reservation"] == nil {
					b.Fatalf("reserve: %s", w.Body)
				}
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(`{"reservation":"` + m["reservation"].(string) + `","cost":7}`)
			}
			sb.WriteString(`]}`)
			if w := serve(h, "POST", "/v1/settle/batch", sb.String()); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
	// As the Go client sends them now: 16 reserves as entries of one
	// /v1/check/batch, then their settles in one /v1/settle/batch.
	b.Run("reserve+settle-batched", func(b *testing.B) {
		run(b, rate, func(h http.Handler, keys []string) {
			ids := results(b, serve(h, "POST", "/v1/check/batch", checks(keys, `,"cost":10,"reserve":{"hold":"60s"}`)).Body.Bytes(), "reservation")
			var sb strings.Builder
			sb.WriteString(`{"settles":[`)
			for i := range keys {
				if i > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(`{"reservation":"` + ids[i] + `","cost":7}`)
			}
			sb.WriteString(`]}`)
			if w := serve(h, "POST", "/v1/settle/batch", sb.String()); w.Code != 200 {
				b.Fatal(w.Body)
			}
		})
	})
}
