package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestProcessServesRLSFromConfigDir: LIMITD_GRPC_ADDR turns gRPC on,
// --rls-config loads a directory of envoy ratelimit files unchanged, and
// Envoy's ShouldRateLimit answers from them.
func TestProcessServesRLSFromConfigDir(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"example2.yaml", "example3.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "rls", "testdata", "readme", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr := freePort(t)
	p := newProc(t, "g", "")
	t.Setenv("LIMITD_GRPC_ADDR", grpcAddr)
	p.start("--rls-config", dir, "--rls-headers", "envoy")
	p.waitReady()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for { // the health status follows readiness within grpcapi.HealthPollInterval
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("health: %v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	req := &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*extpb.RateLimitDescriptor{{Entries: []*extpb.RateLimitDescriptor_Entry{
		{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}}}}}
	var resp *rlspb.RateLimitResponse
	for {
		resp, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
		if err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil {
			break // the domains are loaded in the background once there is a leader
		}
		if ctx.Err() != nil {
			t.Fatalf("domain never loaded: %v %v\n%s", resp, err, p.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := resp.GetStatuses()[0]
	if st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetCurrentLimit().GetUnit() != rlspb.RateLimitResponse_RateLimit_DAY {
		t.Fatalf("status %v", st)
	}
	if hs := resp.GetResponseHeadersToAdd(); len(hs) != 3 || hs[0].GetKey() != "RateLimit-Limit" || hs[0].GetValue() != "5" {
		t.Fatalf("headers %v", hs)
	}
	// envoy ratelimit's POST /json on the HTTP port: 200 while allowed.
	code, body := postJSON(t, p.URL("/json"), `{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`)
	if code != 429 || !strings.Contains(string(body), `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("POST /json (blocked address): %d %s", code, body)
	}
	code, body = postJSON(t, p.URL("/json"), `{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.1"}]}]}`)
	if code != 200 || !strings.Contains(string(body), `"overallCode":"OK"`) {
		t.Fatalf("POST /json: %d %s", code, body)
	}
	// The RLS counters are on /metrics.
	mresp, err := http.Get(p.URL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(mb), `limitd_rls_over_limit_total{domain="edge_proxy_per_ip",key="edge_proxy_per_ip.remote_address_50.0.0.5"} 1`) {
		t.Fatalf("/metrics has no RLS counters:\n%s", mb)
	}
	// RLS checks count in limitd_checks_total under their domain, so the
	// status page charts them as such (not as policy "inline").
	if !strings.Contains(string(mb), `limitd_checks_total{policy="rls:edge_proxy_per_ip",result="allowed"}`) {
		t.Errorf("/metrics counts no RLS checks under policy rls:edge_proxy_per_ip:\n%s", mb)
	}
	// Every family a node serves passes Prometheus's lint (promtool check
	// metrics runs the same checks): counters end in _total, base units...
	lintMetrics(t, mb)
	// Other paths still reach the API, unclean ones included. The window is
	// an hour so that the peek lands in the window the check spent however
	// loaded the machine is (with 1s, a peek a second later saw a new one).
	if code, body := postJSON(t, p.URL("/v1/check"), `{"key":"a//b","limit":{"algorithm":"fixed_window","limit":1,"window":"1h"}}`); code != 200 {
		t.Fatalf("POST /v1/check: %d %s", code, body)
	}
	peek, err := http.Get(p.URL("/v1/keys/a//b?algorithm=fixed_window&limit=1&window=1h"))
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := io.ReadAll(peek.Body)
	peek.Body.Close()
	if peek.StatusCode != 200 || !strings.Contains(string(pb), `"remaining":0`) {
		t.Fatalf("GET /v1/keys/a//b (the key just spent): %d %s", peek.StatusCode, pb)
	}
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
}

// TestProcessRefusesBadRLSConfig: one bad file refuses the start, naming the
// file, the field and the descriptor.
func TestProcessRefusesBadRLSConfig(t *testing.T) {
	dir := t.TempDir()
	bad := "domain: shop\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n"
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProc(t, "b", "")
	p.start("--rls-config", dir, "--grpc-addr", freePort(t))
	if err := p.Wait(); err == nil {
		t.Fatalf("started with a bad --rls-config:\n%s", p.Logs())
	}
	for _, want := range []string{"limitd: --rls-config: " + filepath.Join(dir, "shop.yaml") + ":5: ", "descriptors[0].rate_limit.unit", "shop.user", "fortnight"} {
		if !strings.Contains(p.Logs(), want) {
			t.Fatalf("error does not mention %q:\n%s", want, p.Logs())
		}
	}
	assertNothingWritten(t, p.DataDir)
}

// TestProcessValidatesInputsBeforeWriting: every file input is read and
// checked before the data directory is touched, and the refusal is one
// "limitd: --flag: ..." line.
func TestProcessValidatesInputsBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	badPolicies := filepath.Join(dir, "policies.json")
	if err := os.WriteFile(badPolicies, []byte(`[{"name":"x","algorithm":"fixed_window","limit":0,"window":"1h"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policies", badPolicies}, "limitd: --policies: "},
		{[]string{"--tls-cert", junk, "--tls-key", junk}, "limitd: --tls-cert/--tls-key: "},
		{[]string{"--rls-headers", "loud"}, "limitd: --rls-headers: "},
	} {
		p := newProc(t, "v", "")
		p.start(tc.args...)
		if err := p.Wait(); err == nil {
			t.Fatalf("%v: started:\n%s", tc.args, p.Logs())
		}
		if !strings.Contains(p.Logs(), tc.want) {
			t.Fatalf("%v: error is not %q...:\n%s", tc.args, tc.want, p.Logs())
		}
		assertNothingWritten(t, p.DataDir)
	}
}

// assertNothingWritten fails when a refused start left files in dir.
func assertNothingWritten(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("a refused start wrote %s", filepath.Join(dir, e.Name()))
	}
}

// lintMetrics fails the test on any problem promlint (the checks of
// `promtool check metrics`) finds in a /metrics page.
func lintMetrics(t *testing.T, page []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(page)).Lint()
	if err != nil {
		t.Fatalf("lint /metrics: %v", err)
	}
	for _, p := range problems {
		t.Errorf("/metrics: %s: %s", p.Metric, p.Text)
	}
}
