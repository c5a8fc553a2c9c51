// Command xds-server is a runnable example of an xDS management server for
// limitd's --rls-xds-server (and envoy ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW):
// go-control-plane's own server and snapshot cache, serving one
// RateLimitConfig whose single rule the flags give. Sending it SIGHUP
// serves the next version with requests_per_unit doubled, as an operator's
// change would.
//
//	go run ./examples/xds-server --addr 127.0.0.1:18000 --requests-per-unit 5 &
//	limitd serve --rls-xds-server 127.0.0.1:18000
//	curl -s -X POST localhost:8080/json -d '{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}'
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "address to serve xDS (ADS) on")
	nodeID := flag.String("node-id", "limitd", "the xDS node id the snapshot is for (limitd's --rls-xds-node-id)")
	domain := flag.String("domain", "shop", "the RLS domain")
	key := flag.String("key", "user", "the descriptor key the rule limits")
	unit := flag.String("unit", "minute", "the rule's unit: second, minute, hour or day")
	perUnit := flag.Uint("requests-per-unit", 5, "the rule's requests_per_unit")
	flag.Parse()
	u, ok := rlsconf.RateLimitUnit_value[strings.ToUpper(*unit)]
	if !ok || u == 0 {
		log.Fatalf("--unit %q: want second, minute, hour or day", *unit)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	snaps := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	version := 0
	serve := func(n uint32) {
		version++
		cfg := &rlsconf.RateLimitConfig{Name: *domain, Domain: *domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       *key,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit(u), RequestsPerUnit: n},
		}}}
		snap, err := cache.NewSnapshot(strconv.Itoa(version), map[resource.Type][]types.Resource{resource.RateLimitConfigType: {cfg}})
		if err == nil {
			err = snaps.SetSnapshot(ctx, *nodeID, snap)
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "xds-server: version %d: domain %s, %s: %d per %s\n", version, *domain, *key, n, *unit)
	}
	n := uint32(*perUnit)
	serve(n)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			n *= 2
			serve(n)
		}
	}()

	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, server.NewServer(ctx, snaps, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	fmt.Fprintf(os.Stderr, "xds-server: serving ADS on %s for node %q\n", ln.Addr(), *nodeID)
	if err := gs.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
