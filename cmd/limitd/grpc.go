package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// grpcFlags are serve's gRPC and Envoy RLS flags (LIMITD_GRPC_ADDR,
// LIMITD_RLS_CONFIG and LIMITD_RLS_HEADERS through applyEnv).
type grpcFlags struct {
	addr, rlsConfig, rlsHeaders string
}

func addGRPCFlags(fs *flag.FlagSet, g *grpcFlags) {
	fs.StringVar(&g.addr, "grpc-addr", "", "address the gRPC API (limitd.v1, Envoy RLS, health, reflection) listens on; empty: no gRPC")
	fs.StringVar(&g.rlsConfig, "rls-config", "", "envoy ratelimit configuration to load at start: a YAML file or a directory of *.yaml files (domains are replicated; the file adds and replaces, DELETE /v1/rls/domains/{domain} removes)")
	fs.StringVar(&g.rlsHeaders, "rls-headers", "off", "response headers ShouldRateLimit asks Envoy to add: off, draft (RateLimit, RateLimit-Policy) or envoy (RateLimit-Limit, -Remaining, -Reset)")
}

// startGRPC validates --rls-config, starts the gRPC server when --grpc-addr
// is set (same TLS certificate and admin token as HTTP), and writes the RLS
// domains through the leader in the background (errors go to background).
// stop ends the server gracefully within ctx.
func startGRPC(ctx context.Context, f *serveFlags, node *cluster.Node, logger *log.Logger, background chan<- error) (stop func(context.Context), err error) {
	g := &f.grpc
	var domains []*rls.Domain
	if g.rlsConfig != "" {
		if domains, err = rls.LoadPath(g.rlsConfig); err != nil {
			return nil, err
		}
	}
	mode, err := rls.ParseHeaderMode(g.rlsHeaders)
	if err != nil {
		return nil, fmt.Errorf("--rls-headers: %w", err)
	}
	stop = func(context.Context) {}
	if g.addr != "" {
		var tc *tls.Config
		if f.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("grpc tls: %w", err)
			}
			tc = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		}
		svc := service.New(node, service.Config{MaxBatch: f.maxBatch, RequestTimeout: f.applyTimeout + 2*time.Second})
		srv, err := grpcapi.New(svc, node, grpcapi.Config{
			AdminToken: f.adminToken, TLS: tc, RLSHeaders: mode, Logger: logger,
			RequestTimeout: f.applyTimeout + 4*time.Second,
		})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", g.addr)
		if err != nil {
			return nil, fmt.Errorf("listen grpc %s: %w", g.addr, err)
		}
		go func() {
			if err := srv.Serve(ln); err != nil {
				background <- fmt.Errorf("grpc server: %w", err)
			}
		}()
		logger.Printf("serving gRPC (limitd.v1, envoy.service.ratelimit.v3) on %s", g.addr)
		stop = srv.Stop
	}
	if len(domains) > 0 {
		go func() {
			if err := node.LoadRLSDomains(ctx, domains); err != nil && ctx.Err() == nil {
				background <- err
				return
			}
			logger.Printf("loaded %d RLS domain(s) from %s", len(domains), g.rlsConfig)
		}()
	}
	return stop, nil
}
