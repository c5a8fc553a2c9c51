package bench

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
)

// fakeGRPC is one node's gRPC listener: limitd.v1 Check and RLS
// ShouldRateLimit that record what they were asked. Key "fail" answers
// Unavailable, "bad" InvalidArgument; a limit or rule of 1 refuses.
type fakeGRPC struct {
	limitdv1.UnimplementedLimitdServer
	rlspb.UnimplementedRateLimitServiceServer
	mu     sync.Mutex
	checks []*limitdv1.CheckRequest
	rls    []*rlspb.RateLimitRequest
}

func (f *fakeGRPC) Check(_ context.Context, r *limitdv1.CheckRequest) (*limitdv1.CheckResponse, error) {
	f.mu.Lock()
	f.checks = append(f.checks, r)
	f.mu.Unlock()
	switch r.Key {
	case "g:fail":
		return nil, status.Error(codes.Unavailable, "no leader")
	case "g:bad":
		return nil, status.Error(codes.InvalidArgument, "key")
	}
	return &limitdv1.CheckResponse{Decision: &limitdv1.Decision{Allowed: r.Limit == nil || r.Limit.Limit != 1}}, nil
}

func (f *fakeGRPC) ShouldRateLimit(_ context.Context, r *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	f.mu.Lock()
	f.rls = append(f.rls, r)
	f.mu.Unlock()
	code := rlspb.RateLimitResponse_OK
	if r.Descriptors[0].Entries[0].Key == RLSHotDescriptorKey {
		code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return &rlspb.RateLimitResponse{OverallCode: code}, nil
}

func startFakeGRPC(t *testing.T) (*fakeGRPC, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeGRPC{}
	s := grpc.NewServer()
	limitdv1.RegisterLimitdServer(s, f)
	rlspb.RegisterRateLimitServiceServer(s, f)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return f, ln.Addr().String()
}

func TestGRPCTarget(t *testing.T) {
	f1, a1 := startFakeGRPC(t)
	f2, a2 := startFakeGRPC(t)
	spec := CheckSpec{KeyPrefix: "g:", Algorithm: "sliding_window", Limit: 100, Window: "1s", Cost: 2, HotLimit: 1}
	tg, err := NewGRPCTarget(GRPCConfig{Addrs: []string{a1, a2}, Check: spec, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ctx := context.Background()
	if ok, err := tg.Do(ctx, 7); !ok || err != nil {
		t.Errorf("normal key: %v %v", ok, err)
	}
	if ok, err := tg.Do(ctx, HotIndex(3)); ok || err != nil {
		t.Errorf("hot key: %v %v, want refused by the hot limit", ok, err)
	}
	// Requests alternate between the nodes.
	if len(f1.checks) != 1 || len(f2.checks) != 1 {
		t.Fatalf("checks per node %d, %d; want 1, 1", len(f1.checks), len(f2.checks))
	}
	all := append(f1.checks, f2.checks...)
	var normal, hot *limitdv1.CheckRequest
	for _, c := range all {
		if c.Key == "g:7" {
			normal = c
		} else {
			hot = c
		}
	}
	if normal == nil || normal.Limit.GetLimit() != 100 || normal.Limit.Algorithm != "sliding_window" || normal.Limit.Window != "1s" || normal.GetCost() != 2 {
		t.Errorf("normal check %v", normal)
	}
	if hot == nil || hot.Key != "g:hot3" || hot.Limit.GetLimit() != 1 || hot.Limit.Window != "1s" {
		t.Errorf("hot check %v", hot)
	}
	// gRPC errors are classed as the HTTP target's are.
	for key, class := range map[string]ErrorClass{"fail": Err5xx, "bad": Err4xx} {
		_, err := tg.clients[0].Check(ctx, &limitdv1.CheckRequest{Key: "g:" + key})
		if got := Classify(grpcError(err)); got != class {
			t.Errorf("%s: class %s, want %s (%v)", key, got, class, err)
		}
	}
	if got := Classify(grpcError(status.Error(codes.DeadlineExceeded, "slow"))); got != ErrTimeout {
		t.Errorf("deadline: class %s", got)
	}
	if got := Classify(grpcError(status.Error(codes.Aborted, "outcome unknown"))); got != Err5xx {
		t.Errorf("aborted: class %s", got)
	}
	if _, err := NewGRPCTarget(GRPCConfig{}); err == nil {
		t.Error("no addresses: no error")
	}
}

func TestGRPCTargetPolicy(t *testing.T) {
	f, a := startFakeGRPC(t)
	tg, err := NewGRPCTarget(GRPCConfig{Addrs: []string{a}, Check: CheckSpec{KeyPrefix: "p:", Policy: "api", Algorithm: "token_bucket", Window: "1s", Burst: 50, Cost: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	tg.Do(context.Background(), 1)
	tg.Do(context.Background(), HotIndex(0))
	if c := f.checks[0]; c.Policy != "api" || c.Limit != nil {
		t.Errorf("policy check %v", c)
	}
	// The hot keys keep an inline limit of their own, with a burst as small as their rate.
	if c := f.checks[1]; c.Policy != "" || c.Limit.GetLimit() != DefaultHotLimit || c.Limit.Burst != DefaultHotLimit {
		t.Errorf("hot check under a policy run %v", c)
	}
}

func TestRLSTarget(t *testing.T) {
	f, a := startFakeGRPC(t)
	tg, err := NewRLSTarget(GRPCConfig{Addrs: []string{a}, RLSDomain: "d", Check: CheckSpec{KeyPrefix: "r:", Cost: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if ok, err := tg.Do(context.Background(), 5); !ok || err != nil {
		t.Errorf("normal: %v %v", ok, err)
	}
	if ok, err := tg.Do(context.Background(), HotIndex(2)); ok || err != nil {
		t.Errorf("hot: %v %v", ok, err)
	}
	r := f.rls[0]
	if r.Domain != "d" || r.HitsAddend != 3 || len(r.Descriptors) != 1 || len(r.Descriptors[0].Entries) != 1 {
		t.Fatalf("request %v", r)
	}
	if e := r.Descriptors[0].Entries[0]; e.Key != RLSDescriptorKey || e.Value != "r:5" {
		t.Errorf("entry %v", e)
	}
	if e := f.rls[1].Descriptors[0].Entries[0]; e.Key != RLSHotDescriptorKey || e.Value != "r:hot2" {
		t.Errorf("hot entry %v", e)
	}
	for _, cfg := range []GRPCConfig{{Addrs: []string{a}}, {Addrs: []string{a}, RLSDomain: "d", Check: CheckSpec{Cost: -1}}} {
		if _, err := NewRLSTarget(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// The domain the bench installs is valid envoy-ratelimit configuration
// whose rules are the normal and the hot limits.
func TestRLSDomainConfig(t *testing.T) {
	spec := CheckSpec{Algorithm: "sliding_window", Limit: 100, Window: "1m", HotLimit: 2}
	y, err := RLSDomainConfig("limitd-bench", spec)
	if err != nil {
		t.Fatal(err)
	}
	d, err := rls.Parse("bench", []byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	for key, want := range map[string]uint32{RLSDescriptorKey: 100, RLSHotDescriptorKey: 2} {
		m := d.Match([]rls.Entry{{Key: key, Value: "x"}})
		if m == nil || m.Rule.RequestsPerUnit != want || m.Rule.Unit.String() != "minute" {
			t.Errorf("%s: match %+v, want %d per minute", key, m, want)
		}
	}
	for _, bad := range []CheckSpec{{Window: "90s", Limit: 1}, {Window: "x"}, {Window: "1s", Policy: "p"}} {
		if _, err := RLSDomainConfig("d", bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
