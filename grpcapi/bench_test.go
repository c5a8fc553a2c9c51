package grpcapi

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster/clustertest"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFrontEnds: one check per request against the same 1-node
// cluster, over loopback: HTTP/JSON (POST /v1/check), gRPC limitd.v1 Check,
// and Envoy RLS ShouldRateLimit with one descriptor. 32 concurrent callers,
// distinct keys. cpu-us/check is the whole process's CPU (clients, servers
// and the cluster) per check.
func BenchmarkFrontEnds(b *testing.B) {
	c := newTestCluster(b, 1, testConfig{})
	defer c.close()
	// The HTTP API as the daemon composes it: its metrics are the service's
	// Observer. (One node: no /internal/ endpoints are needed.)
	m := api.NewMetrics(prometheus.NewRegistry(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := api.New(service.New(clustertest.ServiceDeps(c.nodes[0]), service.Config{Observer: m}), c.nodes[0], m, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	hs := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()
	httpURL := "http://" + ln.Addr().String() + "/v1/check"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if _, err := c.putDomain(ctxT(b), 0, &limitdv1.PutRLSDomainRequest{
		Config: "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"}); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	limit := &limitdv1.Limit{Algorithm: "sliding_window", Limit: 1000000, Window: "1h"}
	run := func(b *testing.B, one func(key string) error) {
		b.SetParallelism(16) // × GOMAXPROCS (2) = 32 callers
		start := cpuTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(fmt.Sprintf("k%d", seq.Add(1)%10000)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-us/check")
	}
	b.Run("http", func(b *testing.B) {
		run(b, func(key string) error {
			body := `{"key":"` + key + `","limit":{"algorithm":"sliding_window","limit":1000000,"window":"1h"}}`
			resp, err := client.Post(httpURL, "application/json", strings.NewReader(body))
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
	})
	b.Run("grpc", func(b *testing.B) {
		cl := c.limitd(0)
		ctx := ctxT(b)
		run(b, func(key string) error {
			_, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: key, Limit: limit})
			return err
		})
	})
	b.Run("rls", func(b *testing.B) {
		cl := c.rls(0)
		ctx := ctxT(b)
		run(b, func(key string) error {
			_, err := cl.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", key)}})
			return err
		})
	})
}
