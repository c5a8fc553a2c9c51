package grpcapi

import (
	"context"
	"io"
	"log"
	"net"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// testCluster is the cluster harness (cluster/clustertest) with a gRPC
// server per node on loopback and a client connection to each.
type testCluster struct {
	*clustertest.Cluster
	t       testing.TB
	nodes   []*cluster.Node
	servers []*Server
	conns   []*grpc.ClientConn
	closed  []bool
}

// testConfig is the gRPC server configuration of the test cluster's nodes.
type testConfig struct {
	Config
	wrap func(*cluster.Node, *service.Deps) // optional: wrap the node's capabilities (fault injection)
}

func newTestCluster(t testing.TB, size int, cfg testConfig) *testCluster {
	t.Helper()
	// Daemon timers: answers a leadership change would alter (an aborted
	// forward) must not depend on the test host's load.
	c := &testCluster{t: t, Cluster: clustertest.MakeCluster(t, size, clustertest.SteadyTimers)}
	t.Cleanup(c.close) // before the harness's own cleanup: gRPC stops first
	for i := 0; i < size; i++ {
		n := c.Node(i)
		deps := clustertest.ServiceDeps(n)
		if cfg.wrap != nil {
			cfg.wrap(n, &deps)
		}
		gcfg := cfg.Config
		gcfg.Logger = log.New(io.Discard, "", 0)
		s, err := New(service.New(deps, service.Config{RequestTimeout: 3 * time.Second}), gcfg)
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
		c.nodes = append(c.nodes, n)
		c.closed = append(c.closed, false)
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
	c.Stop(i)
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
	return c.Leader()
}

// waitDomain waits until every running node has the domain as canonical.
func (c *testCluster) waitDomain(name string, canonical []byte) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i, n := range c.nodes {
		for !c.closed[i] {
			cur, ok := n.Catalog().RLSDomainConfig(name)
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

// putDomain installs a domain through node i like a careful operator: a
// change whose outcome is unknown (Aborted: leadership changed while it was
// in flight, as on a loaded test machine) or that found no leader
// (Unavailable) is repeated, which the API documents as safe, until ctx ends.
// Tests of those errors themselves call PutRLSDomain directly.
func (c *testCluster) putDomain(ctx context.Context, i int, req *limitdv1.PutRLSDomainRequest) (*limitdv1.RLSDomain, error) {
	for {
		resp, err := c.limitd(i).PutRLSDomain(ctx, req)
		switch status.Code(err) {
		case codes.Aborted, codes.Unavailable:
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		return resp, err
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
