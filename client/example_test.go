package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/service"
)

// exampleAddr is a single-node limitd started in-process by TestMain, so
// that the examples run (and check their output) under go test.
var exampleAddr string

func TestMain(m *testing.M) {
	stop, err := startNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start in-process node:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startNode() (func(), error) {
	dir, err := os.MkdirTemp("", "limitd-client-example")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	_, trans := raft.NewInmemTransport("raft0:8300")
	n, err := cluster.Open(cluster.Config{
		NodeID: "n1", RaftAddr: string(trans.LocalAddr()), HTTPAddr: ln.Addr().String(),
		DataDir: dir, Transport: trans, LogOutput: io.Discard,
		HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
	}, true)
	if err != nil {
		return nil, err
	}
	// The HTTP API as the daemon composes it: its metrics are the service's
	// Observer. (One node: no /internal/ endpoints are needed.)
	m := api.NewMetrics(prometheus.NewRegistry(), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// Each capability the service uses comes from the cluster type that
	// provides it.
	c := n.Catalog()
	deps := service.Deps{Node: n, LeaderLocator: n, Leaser: n, Refuser: n.OverLimit(), Backuper: n.Backups(),
		Policies: c, Plans: c, Domains: c, Lists: c, Bans: c, Inventory: c, Digester: c, Alerts: c, Degrader: n, Usage: c}
	h := api.New(service.New(deps, service.Config{Observer: m}), n, m, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n.Ready() != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node not ready: %w", n.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	exampleAddr = ln.Addr().String()
	return func() { srv.Close(); n.Close(); os.RemoveAll(dir) }, nil
}

// A service limits a user to 3 requests a minute.
func Example() {
	c, err := client.New([]string{exampleAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	if _, err := c.PutPolicy(ctx, client.Policy{Name: "api", Limit: client.Limit{Algorithm: "fixed_window", Limit: 3, Window: "60s"}}); err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		d, err := c.Check(ctx, client.Request{Key: "user:42", Policy: "api"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}

// Errors carry the server's code and field.
func ExampleError() {
	c, _ := client.New([]string{exampleAddr})
	defer c.Close()
	_, err := c.Check(context.Background(), client.Request{Key: "k",
		Limit: &client.Limit{Algorithm: "token_bucket", Limit: 10, Window: "60"}})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(errors.Is(err, client.ErrInvalidArgument), e.Code, e.Field)
	}
	// Output: true invalid_argument limit.window
}

// A daily quota whose busy keys are answered from quota leases; a
// get-modify-put keeps the lease (PutPolicy replaces the whole policy).
func ExampleLease() {
	c, _ := client.New([]string{exampleAddr})
	defer c.Close()
	ctx := context.Background()
	share := 0.05
	_, err := c.PutPolicy(ctx, client.Policy{Name: "quota",
		Limit: client.Limit{Algorithm: "fixed_window", Limit: 1_000_000, Calendar: "day"},
		Lease: &client.Lease{Share: &share, MaxTTL: "2s"}})
	if err != nil {
		log.Fatal(err)
	}
	p, err := c.GetPolicy(ctx, "quota")
	if err != nil {
		log.Fatal(err)
	}
	p.Limit.Limit = 2_000_000
	if p, err = c.PutPolicy(ctx, p); err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Limit.Limit, *p.Lease.Share, p.Lease.MaxTTL)
	// Output: 2000000 0.05 2s
}

// Layered limits decided as one atomic step.
func ExampleClient_CheckAll() {
	c, _ := client.New([]string{exampleAddr})
	defer c.Close()
	perSecond := client.Limit{Algorithm: "token_bucket", Limit: 5, Window: "1s"}
	perDay := client.Limit{Algorithm: "fixed_window", Limit: 1, Calendar: "day"}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		res, err := c.CheckAll(ctx, "", client.Request{Key: "order:7", Limit: &perSecond}, client.Request{Key: "order:7", Limit: &perDay})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Allowed, res.Results[0].Allowed, res.Results[1].Allowed)
	}
	// Output:
	// true true true
	// false true false
}

// The middleware answers 429 with Retry-After once the key is spent, and
// sets RateLimit headers on every response.
func ExampleClient_Middleware() {
	c, _ := client.New([]string{exampleAddr}, client.WithFailMode(client.FailOpen))
	defer c.Close()
	ctx := context.Background()
	c.PutPolicy(ctx, client.Policy{Name: "web", Limit: client.Limit{Algorithm: "fixed_window", Limit: 1, Window: "1h"}})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := c.Middleware("web", func(r *http.Request) string { return r.Header.Get("X-Api-Key") })(app)
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Api-Key", "k1")
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 "web";q=1;w=3600 false
	// 429 "web";q=1;w=3600 true
}

// BenchmarkCheck measures single Check calls from 64 goroutines (coalesced).
// Against the in-process node the CPU is shared with the server; set
// LIMITD_BENCH_ADDRS to a running cluster ("h1:p1,h2:p2") to measure the
// client alone (LIMITD_BENCH_INFLIGHT sets Coalescing.MaxInflight): the cpu-µs/check metric is this process's user+system time
// per check (getrusage).
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func BenchmarkCheck(b *testing.B) {
	addrs := []string{exampleAddr}
	if v := os.Getenv("LIMITD_BENCH_ADDRS"); v != "" {
		addrs = []string{v}
	}
	for _, mode := range []struct {
		name string
		opt  client.Option
	}{
		{"coalesced", client.WithCoalescing(client.Coalescing{MaxInflight: envInt("LIMITD_BENCH_INFLIGHT")})},
		{"coalesced-no-request-ids", client.WithoutRequestIDs()},
		{"single", client.WithCoalescing(client.Coalescing{Disabled: true})},
	} {
		b.Run(mode.name, func(b *testing.B) {
			c, err := client.New(addrs, mode.opt)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			lim := &client.Limit{Algorithm: "token_bucket", Limit: 1_000_000_000, Window: "1s"}
			if _, err := c.Check(ctx, client.Request{Key: "warm", Limit: lim}); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(64 / max(1, runtimeGOMAXPROCS()))
			cpu0 := cpuTime()
			b.ResetTimer()
			var seq atomicCounter
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:%d", seq.next())
				for pb.Next() {
					if _, err := c.Check(ctx, client.Request{Key: key, Limit: lim}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/check")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
		})
	}
}
