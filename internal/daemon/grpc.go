package daemon

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/internal/tracing/tracegrpc"
	"github.com/limitd/limitd/service"
)

// DefaultRLSGRPCAddr is --grpc-addr for a node given --rls-config and no
// --grpc-addr: envoy ratelimit's gRPC port (its GRPC_PORT, 8081), which
// Envoy's rate limit filter calls, on loopback so that the secure-default
// rule (no token or mutual TLS off loopback) never refuses such a node.
const DefaultRLSGRPCAddr = "127.0.0.1:8081"

// grpcFlags are serve's gRPC and Envoy RLS flags (LIMITD_GRPC_ADDR,
// LIMITD_RLS_CONFIG and LIMITD_RLS_HEADERS through applyEnv).
type grpcFlags struct {
	addr, rlsConfig, rlsHeaders string
	// addrSet: --grpc-addr was given (flag, environment or --config file),
	// empty included, which turns the listener off.
	addrSet bool
	// addrDefaulted: addr is DefaultRLSGRPCAddr because --rls-config was
	// given without --grpc-addr (defaultGRPCAddr).
	addrDefaulted              bool
	maxConnections, maxStreams int
}

// grpcAddrValue is --grpc-addr, recording that it was given: an empty
// --grpc-addr says "no gRPC", an absent one takes DefaultRLSGRPCAddr with
// --rls-config.
type grpcAddrValue struct{ g *grpcFlags }

func (v grpcAddrValue) String() string {
	if v.g == nil { // the flag package's zero value, for its usage text
		return ""
	}
	return v.g.addr
}

func (v grpcAddrValue) Set(s string) error {
	v.g.addr, v.g.addrSet = s, true
	return nil
}

// defaultGRPCAddr gives a node with --rls-config and no --grpc-addr its
// gRPC listener on DefaultRLSGRPCAddr: envoy ratelimit always serves gRPC,
// and a node reading its files is there for Envoy's filter. Without
// --rls-config the default stays no listener.
func defaultGRPCAddr(g *grpcFlags) {
	if g.rlsConfig != "" && !g.addrSet {
		g.addr, g.addrDefaulted = DefaultRLSGRPCAddr, true
	}
}

// grpcListenError words a failed gRPC listen; for the defaulted address it
// says where the address came from and how to choose another or none.
func grpcListenError(g *grpcFlags, err error) error {
	if g.addrDefaulted {
		return fmt.Errorf("listen grpc %s (the --grpc-addr default with --rls-config): %w; set --grpc-addr (LIMITD_GRPC_ADDR) to a free address, or to '' for no gRPC listener", g.addr, err)
	}
	return fmt.Errorf("listen grpc %s: %w", g.addr, err)
}

func addGRPCFlags(fs *flag.FlagSet, g *grpcFlags) {
	fs.Var(grpcAddrValue{g}, "grpc-addr", "address the gRPC API (limitd.v1, Envoy RLS, health, reflection) listens on; with --rls-config and no --grpc-addr: "+DefaultRLSGRPCAddr+" (envoy ratelimit's gRPC port, loopback); empty: no gRPC")
	fs.StringVar(&g.rlsConfig, "rls-config", "", "envoy ratelimit configuration: a YAML file or a directory of *.yaml files, applied at start and again when it changes (--config-watch-interval); domains are replicated; the files add and replace, DELETE /v1/rls/domains/{domain} (or --config-prune) removes")
	fs.IntVar(&g.maxConnections, "grpc-max-connections", grpcapi.DefaultMaxConnections, "gRPC: connections served at once; more wait in the listen backlog until one closes (a new connection has --read-timeout for its handshake, an idle one closes after --idle-timeout)")
	fs.IntVar(&g.maxStreams, "grpc-max-streams", grpcapi.DefaultMaxConcurrentStreams, "gRPC: calls in flight on one connection (HTTP/2 MAX_CONCURRENT_STREAMS); more are refused")
	fs.StringVar(&g.rlsHeaders, "rls-headers", "off", "response headers ShouldRateLimit asks Envoy to add: off, draft (RateLimit, RateLimit-Policy) or envoy (RateLimit-Limit, -Remaining, -Reset)")
}

// rlsFrontEnd is the gRPC server (when --grpc-addr is set) and envoy
// ratelimit's POST /json on the HTTP port; the --rls-config domains are the
// config watcher's (watch.go).
type rlsFrontEnd struct {
	srv    *grpcapi.Server // on the one service
	ln     net.Listener    // nil without --grpc-addr
	g      *grpcFlags
	logger *slog.Logger
}

// newRLSFrontEnd takes the --rls-headers mode that
// loadStartInputs validated, builds the gRPC server on svc (same TLS
// certificate and admin token as HTTP) and listens on --grpc-addr when set.
func newRLSFrontEnd(f *serveFlags, in *startInputs, svc *service.Service, logger *slog.Logger) (*rlsFrontEnd, error) {
	g := &f.grpc
	fe := &rlsFrontEnd{g: g, logger: logger}
	mode := in.rlsHeaders
	var tc *tls.Config
	if f.tlsCert != "" && g.addr != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("grpc tls: %w", err)
		}
		tc = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	if g.maxConnections <= 0 || g.maxStreams <= 0 {
		return nil, fmt.Errorf("--grpc-max-connections and --grpc-max-streams must be positive")
	}
	// The HTTP port's bounds: its handshake time (--read-timeout), idle
	// time and a connection cap through the same limiter (its own slots,
	// so a flood of one port does not starve the other).
	cfg := grpcapi.Config{
		AdminToken: f.adminToken, TLS: tc, RLSHeaders: mode, Logger: slog.NewLogLogger(logger.Handler(), slog.LevelError), // it logs panics
		RequestTimeout:       f.applyTimeout + 4*time.Second,
		MaxConcurrentStreams: uint32(g.maxStreams),
		HandshakeTimeout:     f.readTimeout,
		IdleTimeout:          f.idleTimeout,
	}
	if tracing.Enabled() {
		cfg.UnaryInterceptors = []grpc.UnaryServerInterceptor{tracegrpc.UnaryServerInterceptor}
	}
	var err error
	if fe.srv, err = grpcapi.New(svc, cfg); err != nil {
		return nil, err
	}
	if g.addr != "" {
		ln, err := net.Listen("tcp", g.addr)
		if err != nil {
			return nil, grpcListenError(g, err)
		}
		fe.ln = limitListener(ln, g.maxConnections)
	}
	return fe, nil
}

// start serves gRPC in the background; failures go to background. The
// --rls-config domains are the config watcher's (watch.go).
func (fe *rlsFrontEnd) start(ctx context.Context, background chan<- error) {
	if fe.ln != nil {
		go func() {
			if err := fe.srv.Serve(fe.ln); err != nil {
				background <- fmt.Errorf("grpc server: %w", err)
			}
		}()
		if fe.g.addrDefaulted {
			fe.logger.Info("serving gRPC (limitd.v1, envoy.service.ratelimit.v3) on the default address for --rls-config: loopback only; set --grpc-addr (e.g. 0.0.0.0:8081) for an Envoy on another host", "grpc_addr", fe.ln.Addr().String())
		} else {
			fe.logger.Info("serving gRPC (limitd.v1, envoy.service.ratelimit.v3)", "grpc_addr", fe.ln.Addr().String())
		}
	} else if fe.g.rlsConfig != "" {
		fe.logger.Info("no gRPC listener (--grpc-addr is empty): Envoy's rate limit filter cannot reach this node; POST /json on the HTTP port serves the --rls-config domains")
	}
}

// stop ends gRPC gracefully within ctx.
func (fe *rlsFrontEnd) stop(ctx context.Context) {
	if fe.srv != nil {
		fe.srv.Stop(ctx)
	}
}
