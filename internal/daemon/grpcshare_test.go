package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster/clustertest"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestGRPCChecksCountInHTTPMetrics: serve builds the gRPC server and the
// HTTP API on one service and one registry, so a check over gRPC shows in /metrics' decision counters
// (limitd_checks_total) like one over HTTP. (The RLS metrics on /metrics:
// TestProcessServesRLSFromConfigDir.)
func TestGRPCChecksCountInHTTPMetrics(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	f := &serveFlags{applyTimeout: 2 * time.Second, grpc: grpcFlags{addr: "127.0.0.1:0", rlsHeaders: "off", maxConnections: 8, maxStreams: 8}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fes, err := newFrontEnds(f, &startInputs{}, c.Node(0), nil, api.Config{Logger: logger}, logger)
	if err != nil {
		t.Fatal(err)
	}
	fe, handler := fes.rls, fes.handler
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	background := make(chan error, 1)
	fe.start(ctx, background)
	defer fe.stop(context.Background())
	hs := httptest.NewServer(handler)
	defer hs.Close()

	conn, err := grpc.NewClient(fe.ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lim := &limitdv1.Limit{Algorithm: "fixed_window", Limit: 2, Window: "1h"}
	for i, want := range []bool{true, true, false} {
		r, err := limitdv1.NewLimitdClient(conn).Check(ctx, &limitdv1.CheckRequest{Key: "g", Limit: lim})
		if err != nil || r.GetDecision().GetAllowed() != want {
			t.Fatalf("gRPC check %d: %v %v, want allowed=%v", i, r, err, want)
		}
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`limitd_checks_total{policy="inline",result="allowed"} 2`,
		`limitd_checks_total{policy="inline",result="refused"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics after 3 gRPC checks lacks %q:\n%s", want, b)
		}
	}
	select {
	case err := <-background:
		t.Fatalf("background: %v", err)
	default:
	}
}
