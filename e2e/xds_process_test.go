package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestProcessRLSFromXDS: the binary with --rls-xds-server subscribes to
// go-control-plane's own management server (snapshot cache, in this test's
// process) and serves the snapshot's RateLimitConfig through Envoy's
// ShouldRateLimit; an updated snapshot changes the answers; an invalid one
// is NACKed with the reason and the last good one keeps answering.
func TestProcessRLSFromXDS(t *testing.T) {
	snaps := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	var mu sync.Mutex
	var nacks []*discovery.DiscoveryRequest
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	xds := server.NewServer(ctx, snaps, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			if r.GetErrorDetail() != nil {
				mu.Lock()
				nacks = append(nacks, r)
				mu.Unlock()
			}
			return nil
		},
	})
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xds)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	serve := func(version string, perMinute uint32, unit rlsconf.RateLimitUnit) {
		t.Helper()
		cfg := &rlsconf.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: perMinute}}}}
		snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {cfg}})
		if err != nil {
			t.Fatal(err)
		}
		if err := snaps.SetSnapshot(ctx, "limitd-test", snap); err != nil {
			t.Fatal(err)
		}
	}
	serve("1", 5, rlsconf.RateLimitUnit_MINUTE)

	grpcAddr := freePort(t)
	p := newProc(t, "x", "")
	p.start("--grpc-addr", grpcAddr, "--rls-xds-server", ln.Addr().String(), "--rls-xds-node-id", "limitd-test")
	p.waitReady()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	limit := func() uint32 {
		req := &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*extpb.RateLimitDescriptor{{
			Entries: []*extpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
		resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		if err != nil {
			return 0
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen in 20s; logs:\n%s", what, p.Logs())
			}
		}
	}
	eventually("version 1 served", func() bool { return limit() == 5 })
	serve("2", 50, rlsconf.RateLimitUnit_MINUTE)
	eventually("version 2 served", func() bool { return limit() == 50 })

	serve("3", 7, rlsconf.RateLimitUnit_UNKNOWN) // no unit: invalid
	eventually("the NACK", func() bool { mu.Lock(); defer mu.Unlock(); return len(nacks) > 0 })
	mu.Lock()
	nack := nacks[0]
	mu.Unlock()
	if nack.GetVersionInfo() != "2" || !strings.Contains(nack.GetErrorDetail().GetMessage(), `resource "shop": descriptors[0].rate_limit.unit`) {
		t.Fatalf("NACK version %q detail %q", nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
	}
	if n := limit(); n != 50 {
		t.Fatalf("after the NACK: limit %d, want the last good 50", n)
	}
	eventually("the refusal counted", has(p, "/metrics", `limitd_config_reload_errors_total{source="rls_xds"} 1`))
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
}

// has reports whether GET path on p answers a body containing want.
func has(p *proc, path, want string) func() bool {
	return func() bool {
		resp, err := http.Get(p.URL(path))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), want)
	}
}
