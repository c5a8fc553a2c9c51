package grpcapi

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/cluster"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// testCluster is an in-process cluster (Raft over InmemTransport, each
// node's internal HTTP endpoints on loopback so followers forward for real)
// with a gRPC server per node on loopback and a client connection to each.
type testCluster struct {
	t       testing.TB
	nodes   []*cluster.Node
	trans   []*raft.InmemTransport
	servers []*Server
	conns   []*grpc.ClientConn
	closed  []bool
}

// testConfig is the gRPC server configuration of the test cluster's nodes.
type testConfig struct {
	Config
	wrap func(Domains) Domains // optional: wrap the node's domains (fault injection)
}

func newTestCluster(t testing.TB, size int, cfg testConfig) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	httpSrvs := make([]*httptest.Server, size)
	dirs := make([]string, size)
	for i := 0; i < size; i++ {
		dirs[i] = t.TempDir() // before c.close is registered: cleanups run last-in first-out
		_, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("node%d", i)))
		c.trans = append(c.trans, tr)
		httpSrvs[i] = httptest.NewUnstartedServer(nil)
	}
	for i := range c.trans {
		for j := range c.trans {
			if i != j {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
	t.Cleanup(c.close)
	for i := 0; i < size; i++ {
		n, err := cluster.Open(cluster.Config{
			NodeID: fmt.Sprintf("n%d", i), RaftAddr: string(c.trans[i].LocalAddr()),
			HTTPAddr: httpSrvs[i].Listener.Addr().String(), DataDir: dirs[i], Transport: c.trans[i],
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
			ApplyTimeout: 2 * time.Second, LogOutput: io.Discard,
		}, i == 0)
		if err != nil {
			t.Fatalf("open node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
		c.closed = append(c.closed, false)
		mux := http.NewServeMux()
		mux.Handle("/internal/", n.Internal())
		httpSrvs[i].Config.Handler = mux
		httpSrvs[i].Start()
		t.Cleanup(httpSrvs[i].Close)
		if i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.WaitLeader(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.nodes[0].Join(ctx, n.ID(), string(c.trans[i].LocalAddr()), httpSrvs[i].Listener.Addr().String())
			cancel()
			if err != nil {
				t.Fatalf("join node %d: %v", i, err)
			}
		}
		var doms Domains = n
		if cfg.wrap != nil {
			doms = cfg.wrap(n)
		}
		gcfg := cfg.Config
		gcfg.Logger = log.New(io.Discard, "", 0)
		s, err := New(service.New(n, service.Config{RequestTimeout: 3 * time.Second}), doms, gcfg)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(ln)
		c.servers = append(c.servers, s)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		c.conns = append(c.conns, conn)
	}
	for _, n := range c.nodes {
		deadline := time.Now().Add(10 * time.Second)
		for n.Ready() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("node %s not ready: %v", n.ID(), n.Ready())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return c
}

func (c *testCluster) stop(i int) {
	if c.closed[i] {
		return
	}
	c.closed[i] = true
	c.conns[i].Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	c.servers[i].Stop(ctx)
	cancel()
	if err := c.nodes[i].Close(); err != nil {
		c.t.Errorf("close node %d: %v", i, err)
	}
}

func (c *testCluster) close() {
	for i := range c.nodes {
		c.stop(i)
	}
}

func (c *testCluster) rls(i int) rlspb.RateLimitServiceClient {
	return rlspb.NewRateLimitServiceClient(c.conns[i])
}

func (c *testCluster) limitd(i int) limitdv1.LimitdClient {
	return limitdv1.NewLimitdClient(c.conns[i])
}

func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			if !c.closed[i] && n.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return -1
}

// waitDomain waits until every running node has the domain as canonical.
func (c *testCluster) waitDomain(name string, canonical []byte) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i, n := range c.nodes {
		for !c.closed[i] {
			cur, ok := n.RLSDomainConfig(name)
			if ok && string(cur) == string(canonical) {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d did not get domain %s", i, name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
