// Package grpcapi is limitd's gRPC front end: limitd's own API (limitd.v1,
// proto/limitd/v1) and Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), with the
// standard health service and reflection, on one grpc.Server; plus envoy
// ratelimit's POST /json (the same RLS decision in proto3 JSON, for the HTTP
// port) and the per-rule RLS counters for /metrics.
//
// It is a thin adapter: it decodes messages into the request types of
// package service (limitd.v1) or package rls (Envoy RLS), lets them decide,
// and encodes the answer; service error codes map to gRPC codes in one
// table (errors.go). It owns only what is gRPC's: interceptors (admin token
// on admin methods, a per-request deadline, panic recovery), message size
// bounds, and the health status.
package grpcapi

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// Defaults and bounds.
const (
	// DefaultMaxRecvMsgSize bounds a request message: the HTTP API's body
	// limit plus room for framing.
	DefaultMaxRecvMsgSize = 1<<20 + 64<<10
	// DefaultRequestTimeout bounds a request when the client sets no
	// shorter deadline: longer than the service's own wait for the
	// cluster, so the service, not this deadline, tells "no leader" from
	// "outcome unknown".
	DefaultRequestTimeout = service.DefaultRequestTimeout + 2*time.Second
	// DefaultMaxConcurrentStreams is the streams (calls in flight) one
	// connection may have open, advertised in HTTP/2 SETTINGS; a client that
	// opens more has them refused. Envoy opens another connection instead.
	// With the connection cap (DefaultMaxConnections) it bounds the memory
	// a client can pin with calls that never send their message (about 10
	// KB each).
	DefaultMaxConcurrentStreams = 100
	// DefaultMaxConnections is the gRPC connections served at once
	// (serve's --grpc-max-connections); more wait in the listen backlog.
	DefaultMaxConnections = 256
	// DefaultHandshakeTimeout bounds a new connection's TLS and HTTP/2
	// handshake: a client that connects and says nothing is cut off.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a connection without calls for this long
	// (the HTTP port's --idle-timeout).
	DefaultIdleTimeout = 120 * time.Second
	// MaxConnectionAge bounds a connection's life, and so how long a call
	// that never sends its request message (the client set no deadline)
	// can hold a stream: after it the server sends GOAWAY and gives calls
	// in flight MaxConnectionAgeGrace. Clients reconnect transparently.
	MaxConnectionAge      = 10 * time.Minute
	MaxConnectionAgeGrace = 30 * time.Second
	// KeepaliveMinTime is the shortest ping interval a client may use; a
	// client pinging more often is disconnected (ENHANCE_YOUR_CALM).
	KeepaliveMinTime = 10 * time.Second
	// HealthPollInterval is how often the health status follows the
	// node's readiness.
	HealthPollInterval = time.Second
)

// Config configures the server. The zero value of every field selects its
// default.
type Config struct {
	// AdminToken, when set, is required as "authorization: Bearer <token>"
	// metadata on admin methods (key reset, policy and domain writes), as on
	// the HTTP API.
	AdminToken string
	// TLS, when set, serves TLS with it (the HTTP API's certificate).
	TLS *tls.Config
	// RequestTimeout caps each request's deadline (default
	// DefaultRequestTimeout); a client's shorter deadline stays.
	RequestTimeout time.Duration
	// MaxRecvMsgSize bounds a request message (default DefaultMaxRecvMsgSize).
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (default DefaultMaxConcurrentStreams).
	MaxConcurrentStreams uint32
	// HandshakeTimeout bounds a new connection's handshake (default
	// DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection without calls (default
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// RLSHeaders selects the response headers ShouldRateLimit asks Envoy to
	// add (default none).
	RLSHeaders rls.HeaderMode
	// Logger receives recovered panics (default: the standard logger).
	Logger *log.Logger
	// UnaryInterceptors run outermost, before the panic guard, deadline and
	// authentication (serve's tracing, when on).
	UnaryInterceptors []grpc.UnaryServerInterceptor
}

// Server serves limitd.v1 and Envoy RLS over gRPC.
type Server struct {
	svc     *service.Service
	cfg     Config
	gs      *grpc.Server
	health  *health.Server
	metrics *rlsMetrics

	stopOnce sync.Once
	stop     chan struct{}
	polling  sync.WaitGroup
}

// The services this server registers, as health and reflection name them.
// "ratelimit" is the name envoyproxy/ratelimit registers with the health
// service, so Envoy health checks written for it keep working.
var serviceNames = []string{limitdv1.Limitd_ServiceDesc.ServiceName, rlspb.RateLimitService_ServiceDesc.ServiceName, "ratelimit"}

// New builds the server for a service (which reaches the node's RLS
// domains).
func New(svc *service.Service, cfg Config) (*Server, error) {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxRecvMsgSize <= 0 {
		cfg.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = log.Default()
	}
	if _, err := rls.ParseHeaderMode(string(cfg.RLSHeaders)); err != nil {
		return nil, err
	}
	s := &Server{svc: svc, cfg: cfg, health: health.NewServer(), stop: make(chan struct{}), metrics: newRLSMetrics()}
	// The HTTP port's bounds, so gRPC is no softer target: calls per connection, handshake
	// time, idle and total connection life, message sizes, a deadline on
	// every unary call (the streams, reflection and health Watch, end with
	// their connection's age); the connection cap is the listener's (serve
	// wraps it).
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.MaxHeaderListSize(64 << 10),
		grpc.ChainUnaryInterceptor(append(slices.Clone(cfg.UnaryInterceptors), s.recoverPanic, s.deadline, s.authenticate)...),
		grpc.ChainStreamInterceptor(s.recoverStream, s.authenticateStream),
		// Envoy keeps its connection open; ping it so dead peers are noticed.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: 2 * time.Minute, Timeout: 20 * time.Second,
			MaxConnectionIdle: cfg.IdleTimeout, MaxConnectionAge: MaxConnectionAge, MaxConnectionAgeGrace: MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.gs = grpc.NewServer(opts...)
	limitdv1.RegisterLimitdServer(s.gs, &limitdServer{s: s})
	rlspb.RegisterRateLimitServiceServer(s.gs, &rlsServer{s: s})
	healthpb.RegisterHealthServer(s.gs, s.health)
	reflection.Register(s.gs)
	s.updateHealth()
	s.polling.Add(1)
	go s.pollHealth()
	return s, nil
}

// GRPC returns the underlying server (to register more services before Serve).
func (s *Server) GRPC() *grpc.Server { return s.gs }

// Serve accepts connections on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return s.gs.Serve(ln) }

// Stop marks every service NOT_SERVING, lets requests in flight finish until
// ctx ends, then closes every connection.
func (s *Server) Stop(ctx context.Context) {
	s.stopOnce.Do(func() { close(s.stop) })
	s.polling.Wait()
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.gs.Stop()
		<-done
	}
}

// pollHealth keeps the health status in step with the node's readiness
// (a leader, and this node caught up), which is when answers are current.
func (s *Server) pollHealth() {
	defer s.polling.Done()
	t := time.NewTicker(HealthPollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.updateHealth()
		}
	}
}

func (s *Server) updateHealth() {
	st := healthpb.HealthCheckResponse_SERVING
	if s.svc.Ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	for _, name := range serviceNames {
		s.health.SetServingStatus(name, st)
	}
}

// adminMethods need the admin token.
var adminMethods = map[string]bool{
	"/limitd.v1.Limitd/Reset":            true,
	"/limitd.v1.Limitd/PutPolicy":        true,
	"/limitd.v1.Limitd/DeletePolicy":     true,
	"/limitd.v1.Limitd/PutRLSDomain":     true,
	"/limitd.v1.Limitd/DeleteRLSDomain":  true,
	"/limitd.v1.Limitd/PutPlan":          true,
	"/limitd.v1.Limitd/DeletePlan":       true,
	"/limitd.v1.Limitd/SetDefaultPlan":   true,
	"/limitd.v1.Limitd/AssignPlan":       true,
	"/limitd.v1.Limitd/PutPrefixRule":    true,
	"/limitd.v1.Limitd/DeletePrefixRule": true,
	"/limitd.v1.Limitd/PutOverride":      true,
	"/limitd.v1.Limitd/DeleteOverride":   true,
	// Lists and bans, reads included (lists.go).
	"/limitd.v1.Limitd/PutList":    true,
	"/limitd.v1.Limitd/GetList":    true,
	"/limitd.v1.Limitd/ListLists":  true,
	"/limitd.v1.Limitd/DeleteList": true,
	"/limitd.v1.Limitd/ListBans":   true,
	"/limitd.v1.Limitd/Unban":      true,
	// Webhooks, reads included (webhooks.go).
	"/limitd.v1.Limitd/PutWebhook":    true,
	"/limitd.v1.Limitd/GetWebhook":    true,
	"/limitd.v1.Limitd/ListWebhooks":  true,
	"/limitd.v1.Limitd/DeleteWebhook": true,
}

// authenticate requires the admin token on admin methods.
func (s *Server) authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.cfg.AdminToken != "" && adminMethods[info.FullMethod] && !s.adminOK(ctx) {
		return nil, toStatus(&service.Error{Code: service.CodeUnauthenticated,
			Message: "this method needs the admin token: metadata \"authorization: Bearer <token>\""})
	}
	return handler(ctx, req)
}

// authenticateStream is authenticate for streaming methods (the usage
// export): an admin stream without the token ends before its handler runs.
func (s *Server) authenticateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.cfg.AdminToken != "" && adminMethods[info.FullMethod] && !s.adminOK(ss.Context()) {
		return toStatus(&service.Error{Code: service.CodeUnauthenticated,
			Message: "this method needs the admin token: metadata \"authorization: Bearer <token>\""})
	}
	return handler(srv, ss)
}

func (s *Server) adminOK(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) == 1 {
			return true
		}
	}
	return false
}

// deadline caps the request's deadline at RequestTimeout.
func (s *Server) deadline(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.cfg.RequestTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
		defer cancel()
	}
	return handler(ctx, req)
}

// recoverPanic turns a panic in a handler into INTERNAL for that request
// instead of a crashed node.
func (s *Server) recoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Printf("grpc: panic in %s: %v\n%s", info.FullMethod, p, debug.Stack())
			resp, err = nil, status.Errorf(codes.Internal, "internal error in %s: %v", info.FullMethod, p)
		}
	}()
	return handler(ctx, req)
}

func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Printf("grpc: panic in %s: %v\n%s", info.FullMethod, p, debug.Stack())
			err = status.Errorf(codes.Internal, "internal error in %s: %v", info.FullMethod, p)
		}
	}()
	return handler(srv, ss)
}

// String describes the server for logs.
func (s *Server) String() string {
	return fmt.Sprintf("grpc (%s)", strings.Join(serviceNames, ", "))
}
