package grpcapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttppb "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// docBlock returns the first ```yaml block after marker in docs/ENVOY.md.
func docBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "ENVOY.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "<!-- test:"+marker+" -->")
	if i < 0 {
		t.Fatalf("docs/ENVOY.md has no %s block", marker)
	}
	s = s[i:]
	start := strings.Index(s, "```yaml\n") + len("```yaml\n")
	end := strings.Index(s[start:], "```")
	return s[start : start+end]
}

// yamlToJSON converts YAML to JSON for protojson.
func yamlToJSON(t *testing.T, y string) []byte {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validator is what go-control-plane's generated validation gives messages.
type validator interface{ ValidateAll() error }

// envoyRequest is a request as the route's actions see it.
type envoyRequest struct {
	remote  string
	headers map[string]string
}

// descriptors computes what Envoy's rate-limit actions send for a request:
// one descriptor per rate_limits entry; an entry whose request_headers
// action finds no header produces nothing.
func descriptors(t *testing.T, rls []*routepb.RateLimit, req envoyRequest) []*extpb.RateLimitDescriptor {
	t.Helper()
	var out []*extpb.RateLimitDescriptor
next:
	for _, rl := range rls {
		d := &extpb.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			var key, value string
			switch {
			case a.GetRemoteAddress() != nil:
				key, value = "remote_address", req.remote
			case a.GetGenericKey() != nil:
				key, value = a.GetGenericKey().GetDescriptorKey(), a.GetGenericKey().GetDescriptorValue()
				if key == "" {
					key = "generic_key"
				}
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := req.headers[strings.ToLower(h.GetHeaderName())]
				if !ok {
					continue next
				}
				key, value = h.GetDescriptorKey(), v
			default:
				t.Fatalf("action %v: not simulated by this test", a)
			}
			d.Entries = append(d.Entries, &extpb.RateLimitDescriptor_Entry{Key: key, Value: value})
		}
		out = append(out, d)
	}
	return out
}

// TestEnvoyDocConfig: the Envoy configuration in docs/ENVOY.md is a valid v3
// bootstrap (go-control-plane's types and validation rules), its rate-limit
// filter points at the limitd cluster with the domain of the limitd
// configuration on the same page, and the descriptors its route actions
// produce get the documented answers from a limitd cluster over gRPC.
func TestEnvoyDocConfig(t *testing.T) {
	var boot bootstrappb.Bootstrap
	if err := protojson.Unmarshal(yamlToJSON(t, docBlock(t, "envoy-config")), &boot); err != nil {
		t.Fatalf("Envoy configuration does not parse as a v3 bootstrap: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("Envoy configuration: %v", err)
	}
	var hcm hcmpb.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var filter ratelimitfilterpb.RateLimit
	var router routerpb.Router
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatal(err)
	}
	if err := hcm.GetHttpFilters()[1].GetTypedConfig().UnmarshalTo(&router); err != nil {
		t.Fatal(err)
	}
	for _, m := range []validator{&hcm, &filter, &router} {
		if err := m.ValidateAll(); err != nil {
			t.Fatalf("Envoy configuration: %v", err)
		}
	}
	limitdCluster := boot.GetStaticResources().GetClusters()[0]
	var opts upstreamhttppb.HttpProtocolOptions
	if err := limitdCluster.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&opts); err != nil {
		t.Fatal(err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Fatal("the limitd cluster must speak HTTP/2 (gRPC)")
	}
	if got := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != limitdCluster.GetName() {
		t.Fatalf("rate_limit_service points at %q, not the limitd cluster %q", got, limitdCluster.GetName())
	}
	if !filter.GetFailureModeDeny() {
		t.Fatal("the documented configuration sets failure_mode_deny")
	}
	if hc := limitdCluster.GetHealthChecks()[0].GetGrpcHealthCheck(); hc.GetServiceName() != rlspb.RateLimitService_ServiceDesc.ServiceName {
		t.Fatalf("gRPC health check service %q", hc.GetServiceName())
	}
	rateLimits := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()

	ctx := ctxT(t)
	reqs := []envoyRequest{
		{remote: "198.51.100.7", headers: map[string]string{"x-api-key": "k-123"}}, // both limits, decided together
		{remote: "203.0.113.9", headers: map[string]string{"x-api-key": "k-123"}},  // the blocked address
		{remote: "198.51.100.8", headers: map[string]string{"x-api-key": "k-123"}},
		{remote: "198.51.100.7"}, // no X-Api-Key: Envoy sends only the address descriptor
	}
	// The per-address limit is 20 per second in windows aligned to the
	// second (as envoy ratelimit aligns them): the four requests must fall
	// in one window for the counts below, so a run that straddles a
	// boundary (a loaded machine) is done again on a fresh node.
	var answers []*rlspb.RateLimitResponse
	for attempt := 0; ; attempt++ {
		c := newTestCluster(t, 1, testConfig{})
		dom, err := c.putDomain(ctx, 0, &limitdv1.PutRLSDomainRequest{Config: docBlock(t, "rls-config")})
		if err != nil {
			t.Fatalf("limitd configuration: %v", err)
		}
		if dom.GetDomain() != filter.GetDomain() {
			t.Fatalf("Envoy's filter uses domain %q, the limitd configuration %q", filter.GetDomain(), dom.GetDomain())
		}
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		begin := time.Now().Unix()
		answers = answers[:0]
		for _, req := range reqs {
			r, err := c.rls(0).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: filter.GetDomain(), Descriptors: descriptors(t, rateLimits, req)})
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, r)
		}
		if time.Now().Unix() == begin {
			break
		}
		if attempt == 4 {
			t.Fatal("five runs straddled a second boundary")
		}
	}
	type st struct {
		code      rlspb.RateLimitResponse_Code
		limit     uint32
		remaining uint32
	}
	check := func(r *rlspb.RateLimitResponse, overall rlspb.RateLimitResponse_Code, want ...st) {
		t.Helper()
		if r.GetOverallCode() != overall || len(r.GetStatuses()) != len(want) {
			t.Fatalf("answer %v, want %v with %d statuses", r, overall, len(want))
		}
		for i, w := range want {
			g := r.GetStatuses()[i]
			if g.GetCode() != w.code || g.GetCurrentLimit().GetRequestsPerUnit() != w.limit || g.GetLimitRemaining() != w.remaining {
				t.Fatalf("status %d: %v, want %+v", i, g, w)
			}
		}
	}
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	check(answers[0], ok, st{ok, 20, 19}, st{ok, 100, 99})
	// The blocked address: refused, and the API key's budget is not spent.
	check(answers[1], over, st{over, 0, 0}, st{ok, 100, 99})
	check(answers[2], ok, st{ok, 20, 19}, st{ok, 100, 98})
	check(answers[3], ok, st{ok, 20, 18})
}
