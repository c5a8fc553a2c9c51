package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitd/limitd/cluster"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

func descriptor(kv ...string) *extpb.RateLimitDescriptor {
	d := &extpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &extpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestHealthAndReflection: grpc.health.v1 reports SERVING for the server,
// both services and envoy ratelimit's "ratelimit" once the node is ready;
// reflection lists the services.
func TestHealthAndReflection(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	h := healthpb.NewHealthClient(c.conns[0])
	for _, svc := range []string{"", "limitd.v1.Limitd", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := h.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
			if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("health %q: %v %v", svc, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stream, err := reflectpb.NewServerReflectionClient(c.conns[0]).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	got := strings.Join(names, ",")
	for _, want := range []string{"limitd.v1.Limitd", "envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !strings.Contains(got, want) {
			t.Fatalf("reflection lists %s, missing %s", got, want)
		}
	}
}

// faultyDomains injects failures into the node's domains.
type faultyDomains struct {
	*cluster.Catalog
	panicOn  string // domain whose lookup panics
	deadline chan time.Duration
}

func (f *faultyDomains) RLSDomainConfig(name string) ([]byte, bool) {
	if name == f.panicOn {
		panic("injected")
	}
	return f.Catalog.RLSDomainConfig(name)
}

func (f *faultyDomains) PutRLSDomain(ctx context.Context, name string, canonical []byte) error {
	dl, ok := ctx.Deadline()
	if !ok {
		f.deadline <- -1
	} else {
		f.deadline <- time.Until(dl)
	}
	return f.Catalog.PutRLSDomain(ctx, name, canonical)
}

// TestInterceptors: a panic answers INTERNAL and the server keeps serving;
// a request without a deadline gets RequestTimeout; an oversized message
// is refused.
func TestInterceptors(t *testing.T) {
	fd := &faultyDomains{panicOn: "boom", deadline: make(chan time.Duration, 4)}
	c := newTestCluster(t, 1, testConfig{
		Config: Config{RequestTimeout: 3 * time.Second, MaxRecvMsgSize: 64 << 10},
		wrap:   func(n *cluster.Node, d *service.Deps) { fd.Catalog = n.Catalog(); d.Domains = fd },
	})
	_, err := c.rls(0).ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "boom", Descriptors: []*extpb.RateLimitDescriptor{descriptor("k", "v")}})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("panic: %v", err)
	}
	if _, err := c.rls(0).ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: "other", Descriptors: []*extpb.RateLimitDescriptor{descriptor("k", "v")}}); err != nil {
		t.Fatalf("after a panic: %v", err)
	}
	if _, err := c.limitd(0).PutRLSDomain(context.Background(), &limitdv1.PutRLSDomainRequest{Config: "domain: d\n"}); err != nil {
		t.Fatal(err)
	}
	if d := <-fd.deadline; d <= 0 || d > 3*time.Second {
		t.Fatalf("request without a deadline ran with %v left, want at most 3s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.limitd(0).PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: "domain: d\n"}); err != nil {
		t.Fatal(err)
	}
	if d := <-fd.deadline; d > time.Second {
		t.Fatalf("a client's shorter deadline was extended to %v", d)
	}
	_, err = c.limitd(0).PutRLSDomain(ctxT(t), &limitdv1.PutRLSDomainRequest{Config: "domain: d\n#" + strings.Repeat("x", 70<<10)})
	if code := codesOf(err); code != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v", err)
	}
}

func codesOf(err error) codes.Code { return status.Code(err) }

// TestRLSDomainsAPI: put (YAML, refused whole with the path of the
// mistake), get (canonical), list, delete; replicated to every node.
func TestRLSDomainsAPI(t *testing.T) {
	c := newTestCluster(t, 3, testConfig{})
	cl := c.limitd(2) // a follower: writes are forwarded to the leader
	ctx := ctxT(t)
	bad := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"
	_, err := cl.PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Domain: "shop", Config: bad})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "config.descriptors[0].rate_limit.unit")
	_, err = cl.PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Domain: "other", Config: "domain: shop\n"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "domain")
	good := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n"
	d, err := cl.PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Domain: "shop", Config: good})
	if err != nil || d.GetDomain() != "shop" || !strings.HasPrefix(d.GetConfig(), `{"domain":"shop"`) {
		t.Fatalf("put: %v %v", d, err)
	}
	c.waitDomain("shop", []byte(d.GetConfig()))
	for i := range c.nodes {
		got, err := c.limitd(i).GetRLSDomain(ctx, &limitdv1.GetRLSDomainRequest{Domain: "shop"})
		if err != nil || got.GetConfig() != d.GetConfig() {
			t.Fatalf("node %d: %v %v", i, got, err)
		}
		r, err := c.rls(i).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", "u")}})
		if err != nil || r.GetStatuses()[0].GetLimitRemaining() != uint32(4-i) {
			t.Fatalf("node %d check: %v %v", i, r, err)
		}
	}
	if l, err := cl.ListRLSDomains(ctx, &limitdv1.ListRLSDomainsRequest{}); err != nil || len(l.GetDomains()) != 1 {
		t.Fatalf("list: %v %v", l, err)
	}
	if _, err := cl.DeleteRLSDomain(ctx, &limitdv1.DeleteRLSDomainRequest{Domain: "shop"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.DeleteRLSDomain(ctx, &limitdv1.DeleteRLSDomainRequest{Domain: "shop"})
	wantError(t, err, codes.NotFound, "not_found", "domain")
	_, err = c.limitd(0).GetRLSDomain(ctx, &limitdv1.GetRLSDomainRequest{Domain: "shop"})
	wantError(t, err, codes.NotFound, "not_found", "domain")
	// The deleted domain limits nothing any more (cached compilation dropped).
	r, err := c.rls(0).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", "u")}})
	if err != nil || r.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Fatalf("after delete: %v %v", r, err)
	}
}

// TestRLSRequestErrors: malformed requests are INVALID_ARGUMENT naming the
// field (Envoy then applies its failure mode).
func TestRLSRequestErrors(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	_, err := c.limitd(0).PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		req   *rlspb.RateLimitRequest
		field string
	}{
		{&rlspb.RateLimitRequest{Descriptors: []*extpb.RateLimitDescriptor{descriptor("k", "v")}}, "domain"},
		{&rlspb.RateLimitRequest{Domain: "d"}, "descriptors"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*extpb.RateLimitDescriptor{descriptor("k", "v"), {IsNegativeHits: true}}}, "descriptors[1].is_negative_hits"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*extpb.RateLimitDescriptor{{Entries: descriptor("k", "v").Entries, HitsAddend: wrapperspb.UInt64(1 << 62)}}}, "descriptors[0].hits_addend"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*extpb.RateLimitDescriptor{{Entries: descriptor("k", strings.Repeat("v", 2000)).Entries}}}, "descriptors[0].entries"},
		{&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*extpb.RateLimitDescriptor{{Entries: descriptor("k", "v").Entries, Limit: &extpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}}}, "descriptors[0].limit.unit"},
	}
	for _, tc := range cases {
		_, err := c.rls(0).ShouldRateLimit(ctx, tc.req)
		wantError(t, err, codes.InvalidArgument, "invalid_argument", tc.field)
	}
}

// TestRLSResponseHeaders: draft RateLimit/RateLimit-Policy for every limited
// descriptor; envoy ratelimit's RateLimit-Limit/-Remaining/-Reset for the
// most restrictive one; none by default.
func TestRLSResponseHeaders(t *testing.T) {
	cfg := "domain: h\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: minute, requests_per_unit: 5}\n  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	req := &rlspb.RateLimitRequest{Domain: "h", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", "u1"), descriptor("route", "r"), descriptor("none", "x")}}
	for _, tc := range []struct {
		mode rls.HeaderMode
		want []string // key: value prefixes
	}{
		{rls.HeadersOff, nil},
		{rls.HeadersDraft, []string{`RateLimit-Policy: "per_user";q=5;w=60, "h.route";q=100;w=3600`, `RateLimit: "per_user";r=4;t=`}},
		{rls.HeadersEnvoy, []string{"RateLimit-Limit: 5", "RateLimit-Remaining: 4", "RateLimit-Reset: "}},
	} {
		t.Run(string(tc.mode)+"_", func(t *testing.T) {
			c := newTestCluster(t, 1, testConfig{Config: Config{RLSHeaders: tc.mode}})
			ctx := ctxT(t)
			if _, err := c.limitd(0).PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			r, err := c.rls(0).ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			hs := r.GetResponseHeadersToAdd()
			if len(hs) != len(tc.want) {
				t.Fatalf("headers %v, want %d", hs, len(tc.want))
			}
			for i, w := range tc.want {
				if got := hs[i].GetKey() + ": " + hs[i].GetValue(); !strings.HasPrefix(got, w) {
					t.Fatalf("header %d: %q, want prefix %q", i, got, w)
				}
			}
		})
	}
	if _, err := New(nil, Config{RLSHeaders: "sometimes"}); err == nil {
		t.Fatal("an unknown header mode was accepted")
	}
}

// TestRLSAllUnits: every unit of the v3 proto, through configuration and
// through a limit override, answers with that unit and a reset within one
// unit.
func TestRLSAllUnits(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	units := []string{"second", "minute", "hour", "day", "week", "month", "year"}
	var cfg strings.Builder
	cfg.WriteString("domain: units\ndescriptors:\n")
	for _, u := range units {
		cfg.WriteString("  - key: " + u + "\n    rate_limit: {unit: " + strings.ToUpper(u) + ", requests_per_unit: 3}\n")
	}
	if _, err := c.limitd(0).PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: cfg.String()}); err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		unit, _ := rls.ParseUnit(u)
		for _, override := range []bool{false, true} {
			d := descriptor(u, "x")
			if override {
				d = descriptor("other", u)
				if unit == rls.UnitWeek {
					continue // envoy.type.v3.RateLimitUnit has no WEEK
				}
				d.Limit = &extpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typepb.RateLimitUnit(unit)}
			}
			r, err := c.rls(0).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "units", Descriptors: []*extpb.RateLimitDescriptor{d}})
			if err != nil {
				t.Fatalf("%s (override %v): %v", u, override, err)
			}
			st := r.GetStatuses()[0]
			reset := st.GetDurationUntilReset().AsDuration()
			if st.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_Unit(unit) || st.GetLimitRemaining() != 2 ||
				reset <= 0 || reset > unit.Duration() {
				t.Fatalf("%s (override %v): %v", u, override, st)
			}
		}
	}
}
