package rlsxds

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/limitd/limitd/rls"
)

// The type URL is go-control-plane's own name for the resource type.
func TestTypeURL(t *testing.T) {
	if TypeURL != resource.RateLimitConfigType {
		t.Fatalf("TypeURL %q, go-control-plane's %q", TypeURL, resource.RateLimitConfigType)
	}
}

func shop(perMinute uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: perMinute},
	}}}
}

func anys(t *testing.T, ms ...*rlsconf.RateLimitConfig) []*anypb.Any {
	t.Helper()
	var out []*anypb.Any
	for _, m := range ms {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// Every field of the proto becomes its envoy ratelimit YAML counterpart.
func TestConvertFields(t *testing.T) {
	pb := &rlsconf.RateLimitConfig{Name: "r", Domain: "messaging", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "message_type", Value: "marketing", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "to_number", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 5, Name: "per_number"},
		}}},
		{Key: "to_number", Value: "2061234567", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Name: "vip",
			Replaces: []*rlsconf.RateLimitReplace{{Name: "per_number"}}}},
		{Key: "hour", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 0}},
	}}
	ds, err := Convert(anys(t, pb))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"domain":"messaging","descriptors":[{"key":"message_type","value":"marketing","descriptors":[{"key":"to_number","rate_limit":{"name":"per_number","unit":"day","requests_per_unit":5},"shadow_mode":true,"detailed_metric":true}]},{"key":"to_number","value":"2061234567","rate_limit":{"name":"vip","replaces":[{"name":"per_number"}],"requests_per_unit":0,"unlimited":true}},{"key":"hour","rate_limit":{"unit":"hour","requests_per_unit":0}}]}`
	if got := string(ds[0].Canonical()); got != want {
		t.Fatalf("canonical\n got %s\nwant %s", got, want)
	}
	m := ds[0].Match([]rls.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "1"}})
	if m == nil || m.Rule.RequestsPerUnit != 5 || m.Rule.Unit != rls.UnitDay || !m.Rule.Shadow {
		t.Fatalf("match %+v", m)
	}
}

// Bad resources are refused naming the resource and the field; one bad
// resource, or two of one domain, refuse the whole response.
func TestConvertRefuses(t *testing.T) {
	noUnit := shop(5)
	noUnit.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	other := shop(1)
	other.Name = "shop-again"
	long := shop(1)
	long.Descriptors[0].Key = strings.Repeat("k", rls.MaxStringLen+1)
	for _, c := range []struct {
		res  []*anypb.Any
		want string
	}{
		{anys(t, noUnit), `resource "shop": descriptors[0].rate_limit.unit: descriptor shop.user: required`},
		{anys(t, shop(1), other), `resource "shop-again": domain: domain "shop" is also configured in resource "shop"`},
		{anys(t, &rlsconf.RateLimitConfig{Name: "x"}), `resource "x": domain: required`},
		{anys(t, long), `resource "shop": descriptors[0].key: longer than 1024 bytes`},
		// (protobuf varies the space after "proto:" on purpose)
		{[]*anypb.Any{{TypeUrl: "type.googleapis.com/google.protobuf.Duration"}}, `mismatched message type`},
	} {
		if _, err := Convert(c.res); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "resource") {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// xdsServer is go-control-plane's own management server with a snapshot
// cache, in process, recording the requests it receives (ACKs and NACKs).
type xdsServer struct {
	addr  string
	cache cache.SnapshotCache
	mu    sync.Mutex
	reqs  []*discovery.DiscoveryRequest
	stop  func()
}

func startXDS(t *testing.T) *xdsServer { return startXDSAt(t, "127.0.0.1:0") }

// startXDSAt starts a fresh server (empty cache, no requests) on addr.
func startXDSAt(t *testing.T, addr string) *xdsServer {
	t.Helper()
	s := &xdsServer{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	srv := server.NewServer(ctx, s.cache, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			s.mu.Lock()
			s.reqs = append(s.reqs, r)
			s.mu.Unlock()
			return nil
		},
	})
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	s.stop = func() { gs.Stop(); cancel() }
	t.Cleanup(s.stop)
	s.addr = ln.Addr().String()
	return s
}

func (s *xdsServer) serve(t *testing.T, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	var rs []types.Resource
	for _, c := range cfgs {
		rs = append(rs, c)
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), "limitd-test", snap); err != nil {
		t.Fatal(err)
	}
}

// waitRequest waits for a request the server received that ok accepts.
func (s *xdsServer) waitRequest(t *testing.T, what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		for _, r := range s.reqs {
			if ok(r) {
				s.mu.Unlock()
				return r
			}
		}
		s.mu.Unlock()
	}
	t.Fatalf("the server never received %s", what)
	return nil
}

func ack(version string) func(*discovery.DiscoveryRequest) bool {
	return func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == version && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	}
}

// applied is the client's Apply: the last set of domains it was given.
type applied struct {
	mu      sync.Mutex
	domains []*rls.Domain
	calls   int
	refused []error
}

func (a *applied) apply(_ context.Context, ds []*rls.Domain) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.domains, a.calls = ds, a.calls+1
	return nil
}

func (a *applied) limit(t *testing.T) uint32 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.domains) != 1 || a.domains[0].Name() != "shop" {
		t.Fatalf("domains %v", a.domains)
	}
	return a.domains[0].Match([]rls.Entry{{Key: "user", Value: "u1"}}).Rule.RequestsPerUnit
}

// Against go-control-plane's server: a snapshot is applied and ACKed, an
// update replaces it, and an invalid one is NACKed with the reason while
// the last good one stays applied; a corrected one is taken again.
func TestSubscribeACKNACK(t *testing.T) {
	s := startXDS(t)
	s.serve(t, "1", shop(5))
	a := &applied{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Server: s.addr, NodeID: "limitd-test", Apply: a.apply,
			Refused: func(err error) { a.mu.Lock(); a.refused = append(a.refused, err); a.mu.Unlock() },
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)), MinBackoff: 10 * time.Millisecond})
	}()
	defer func() {
		cancel()
		<-done
	}()
	first := s.waitRequest(t, "the subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if first.GetTypeUrl() != resource.RateLimitConfigType || first.GetNode().GetId() != "limitd-test" {
		t.Fatalf("first request %v", first)
	}
	s.waitRequest(t, "the ACK of version 1", ack("1"))
	if n := a.limit(t); n != 5 {
		t.Fatalf("version 1: limit %d", n)
	}

	s.serve(t, "2", shop(50))
	s.waitRequest(t, "the ACK of version 2", ack("2"))
	if n := a.limit(t); n != 50 {
		t.Fatalf("version 2: limit %d", n)
	}

	bad := shop(7)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	calls := a.calls
	s.serve(t, "3", bad)
	nack := s.waitRequest(t, "the NACK of version 3", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if nack.GetVersionInfo() != "2" || !strings.Contains(nack.GetErrorDetail().GetMessage(), `resource "shop": descriptors[0].rate_limit.unit`) {
		t.Fatalf("NACK: version %q (want the last ACKed, 2), detail %q", nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
	}
	if n := a.limit(t); n != 50 || a.calls != calls {
		t.Fatalf("after the NACK: limit %d, %d more applies (want the last good, untouched)", n, a.calls-calls)
	}
	if len(a.refused) != 1 {
		t.Fatalf("refused %v", a.refused)
	}

	s.serve(t, "4", shop(9))
	s.waitRequest(t, "the ACK of version 4", ack("4"))
	if n := a.limit(t); n != 9 {
		t.Fatalf("version 4: limit %d", n)
	}

	// The server restarts (a new process: its versions start again): the
	// client reconnects, asks afresh and takes the new server's version.
	s.stop()
	s = startXDSAt(t, s.addr)
	s.serve(t, "1", shop(11))
	again := s.waitRequest(t, "the new subscription", func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
	if again.GetVersionInfo() != "" {
		t.Fatalf("the new stream opened with version %q, want none (ask afresh)", again.GetVersionInfo())
	}
	s.waitRequest(t, "the ACK of the new server's version 1", ack("1"))
	if n := a.limit(t); n != 11 {
		t.Fatalf("after the server's restart: limit %d", n)
	}
}

// A refusal by Apply (the cluster refused a write) is a NACK too.
func TestApplyErrorNACKs(t *testing.T) {
	s := startXDS(t)
	s.serve(t, "1", shop(5))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Server: s.addr, NodeID: "limitd-test",
			Apply:  func(context.Context, []*rls.Domain) error { return io.ErrUnexpectedEOF },
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	defer func() {
		cancel()
		<-done
	}()
	nack := s.waitRequest(t, "the NACK", func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if !strings.Contains(nack.GetErrorDetail().GetMessage(), "apply: unexpected EOF") {
		t.Fatalf("NACK detail %q", nack.GetErrorDetail().GetMessage())
	}
}
