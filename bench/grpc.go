package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// GRPCConfig configures a GRPCTarget or an RLSTarget.
type GRPCConfig struct {
	Addrs []string // host:port of every node's gRPC listener; requests go round-robin
	Check CheckSpec
	// RLSDomain is the Envoy rate-limit domain an RLSTarget asks (see
	// RLSDomainConfig); unused by GRPCTarget.
	RLSDomain string
	Timeout   time.Duration // per request; 0 means 10 s
	// TLS, when set, speaks TLS to the nodes (their --tls-cert); nil is
	// plaintext.
	TLS *tls.Config
}

// grpcConns is one plaintext connection per node (benchmarks run on
// loopback or a trusted LAN), used in turn. HTTP/2 multiplexes every
// worker's requests on it, as Envoy's gRPC client does.
type grpcConns struct {
	conns   []*grpc.ClientConn
	next    atomic.Uint64
	timeout time.Duration
}

func dialAll(addrs []string, timeout time.Duration, tlsCfg *tls.Config) (*grpcConns, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no gRPC addresses to send checks to")
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	g := &grpcConns{timeout: timeout}
	for _, a := range addrs {
		creds := insecure.NewCredentials()
		if tlsCfg != nil {
			creds = credentials.NewTLS(tlsCfg)
		}
		cc, err := grpc.NewClient("passthrough:///"+a, grpc.WithTransportCredentials(creds))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gRPC connection to %s: %w", a, err)
		}
		g.conns = append(g.conns, cc)
	}
	return g, nil
}

// Close closes every connection.
func (g *grpcConns) Close() {
	for _, cc := range g.conns {
		cc.Close()
	}
}

// grpcError maps a gRPC status to the report's classes: deadline → timeout,
// Unavailable/Aborted (outcome unknown)/Internal → 5xx, other codes → 4xx.
func grpcError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("gRPC %s: %w", st.Message(), context.DeadlineExceeded)
	case codes.Canceled:
		return err
	case codes.Unavailable:
		return &StatusError{Code: "unavailable", Message: "gRPC: " + st.Message()}
	case codes.Aborted:
		return &StatusError{Code: "outcome_unknown", Message: "gRPC: " + st.Message()}
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return &StatusError{Code: "internal", Message: "gRPC " + st.Code().String() + ": " + st.Message()}
	}
	return &StatusError{Code: st.Code().String(), Message: "gRPC: " + st.Message()}
}

// GRPCTarget sends limitd.v1 Check RPCs, one check per call.
type GRPCTarget struct {
	*grpcConns
	clients []limitdv1.LimitdClient
	spec    CheckSpec
	limit   *limitdv1.Limit // the inline limit (nil with a policy)
	hot     *limitdv1.Limit // the hot keys' limit
	cost    *int64
}

// NewGRPCTarget returns a target for cfg. Hot keys (IsHot) are checked
// against an inline limit of cfg.Check.HotLimit per window.
func NewGRPCTarget(cfg GRPCConfig) (*GRPCTarget, error) {
	g, err := dialAll(cfg.Addrs, cfg.Timeout, cfg.TLS)
	if err != nil {
		return nil, err
	}
	c := cfg.Check
	t := &GRPCTarget{grpcConns: g, spec: c, cost: &c.Cost,
		hot: &limitdv1.Limit{Algorithm: c.Algorithm, Limit: c.hotLimit(), Window: c.Window, Burst: c.hotBurst()}}
	if c.Policy == "" && !c.ByPlan {
		t.limit = &limitdv1.Limit{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window, Burst: c.Burst}
	}
	for _, cc := range g.conns {
		t.clients = append(t.clients, limitdv1.NewLimitdClient(cc))
	}
	return t, nil
}

// Do sends one Check to the next node in turn.
func (t *GRPCTarget) Do(ctx context.Context, keyIndex int) (bool, error) {
	req := &limitdv1.CheckRequest{Key: t.spec.Key(keyIndex), Policy: t.spec.Policy, Limit: t.limit, Cost: t.cost}
	if IsHot(keyIndex) {
		req.Policy, req.Limit = "", t.hot
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, err := t.clients[t.next.Add(1)%uint64(len(t.clients))].Check(ctx, req)
	if err != nil {
		return false, grpcError(err)
	}
	if resp.GetDecision() == nil {
		return false, malformed("Check answered no decision")
	}
	return resp.Decision.Allowed, nil
}

// RLSDescriptorKey is the descriptor entry key of the domain an RLSTarget
// asks; the entry's value is the check's key. RLSHotDescriptorKey is the
// hot keys' entry key, under its own (lower) limit.
const (
	RLSDescriptorKey    = "bench_key"
	RLSHotDescriptorKey = "bench_hot_key"
)

// RLSDomainConfig is the envoy-ratelimit configuration (YAML) of domain:
// every value of RLSDescriptorKey gets spec's limit, every value of
// RLSHotDescriptorKey the hot limit, both with spec's algorithm (a limitd
// extension) over spec's window, which must be one rate-limit unit (1s, 1m,
// 1h, 24h).
func RLSDomainConfig(domain string, spec CheckSpec) (string, error) {
	unit, err := rlsUnit(spec.Window)
	if err != nil {
		return "", err
	}
	if spec.Policy != "" || spec.ByPlan {
		return "", errors.New("the RLS target checks an inline limit of the domain it installs, not a policy or plan")
	}
	rule := func(key string, limit int64) string {
		return fmt.Sprintf("  - key: %s\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n      algorithm: %s\n",
			key, unit, limit, spec.Algorithm)
	}
	return "domain: " + strconv.Quote(domain) + "\ndescriptors:\n" +
		rule(RLSDescriptorKey, spec.Limit) + rule(RLSHotDescriptorKey, spec.hotLimit()), nil
}

func rlsUnit(window string) (string, error) {
	d, err := time.ParseDuration(window)
	if err != nil {
		return "", fmt.Errorf("window %q: %w", window, err)
	}
	switch d {
	case time.Second:
		return "second", nil
	case time.Minute:
		return "minute", nil
	case time.Hour:
		return "hour", nil
	case 24 * time.Hour:
		return "day", nil
	}
	return "", fmt.Errorf("the RLS target needs a window of one rate-limit unit (1s, 1m, 1h, 24h), got %s", window)
}

// RLSTarget sends envoy.service.ratelimit.v3 ShouldRateLimit calls with one
// descriptor of one entry per request, as Envoy's rate-limit filter does for
// a route with one action.
type RLSTarget struct {
	*grpcConns
	clients []rlspb.RateLimitServiceClient
	spec    CheckSpec
	domain  string
	addend  uint32
}

// NewRLSTarget returns a target for cfg; the domain must exist on the nodes
// (RLSDomainConfig).
func NewRLSTarget(cfg GRPCConfig) (*RLSTarget, error) {
	if cfg.RLSDomain == "" {
		return nil, errors.New("no RLS domain")
	}
	if cfg.Check.Cost < 0 || cfg.Check.Cost > 1<<32-1 {
		return nil, fmt.Errorf("cost %d does not fit RLS hits_addend", cfg.Check.Cost)
	}
	g, err := dialAll(cfg.Addrs, cfg.Timeout, cfg.TLS)
	if err != nil {
		return nil, err
	}
	t := &RLSTarget{grpcConns: g, spec: cfg.Check, domain: cfg.RLSDomain, addend: uint32(cfg.Check.Cost)}
	for _, cc := range g.conns {
		t.clients = append(t.clients, rlspb.NewRateLimitServiceClient(cc))
	}
	return t, nil
}

// Do sends one ShouldRateLimit to the next node in turn.
func (t *RLSTarget) Do(ctx context.Context, keyIndex int) (bool, error) {
	entry := &rlscommon.RateLimitDescriptor_Entry{Key: RLSDescriptorKey, Value: t.spec.Key(keyIndex)}
	if IsHot(keyIndex) {
		entry.Key = RLSHotDescriptorKey
	}
	req := &rlspb.RateLimitRequest{
		Domain:      t.domain,
		Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{entry}}},
		HitsAddend:  t.addend,
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	resp, err := t.clients[t.next.Add(1)%uint64(len(t.clients))].ShouldRateLimit(ctx, req)
	if err != nil {
		return false, grpcError(err)
	}
	switch resp.GetOverallCode() {
	case rlspb.RateLimitResponse_OK:
		return true, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return false, nil
	}
	return false, malformed("ShouldRateLimit answered overall code %s", resp.GetOverallCode())
}
