package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/limitd/limitd/cluster"
)

// scrape parses a /metrics answer.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

func familyList(mfs map[string]*dto.MetricFamily) []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(mfs))
	for _, mf := range mfs {
		out = append(out, mf)
	}
	return out
}

// sample finds the metric of family name whose labels include want
// (name=value pairs), or nil.
func sample(mfs map[string]*dto.MetricFamily, name string, want ...string) *dto.Metric {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a gauge's or counter's value, or a histogram's count.
func value(m *dto.Metric) float64 {
	switch {
	case m == nil:
		return math.NaN()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return math.NaN()
}

// metricsCluster is three nodes over raft's in-memory transport, each with
// its API on loopback, snapshotting after every few entries so that the
// snapshot metrics move.
func metricsCluster(t *testing.T) (nodes []*cluster.Node, urls []string) {
	if testing.Short() {
		t.Skip("starts a Raft cluster")
	}
	const size = 3
	trans := make([]*raft.InmemTransport, size)
	for i := range trans {
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("raft%d:8300", i)))
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i := range trans {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n, err := cluster.Open(cluster.Config{
			NodeID: fmt.Sprintf("n%d", i), RaftAddr: string(trans[i].LocalAddr()), HTTPAddr: ln.Addr().String(),
			DataDir: t.TempDir(), Transport: trans[i],
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
			LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
			ApplyTimeout: 2 * time.Second, LogOutput: io.Discard,
			SnapshotThreshold: 8, SnapshotInterval: 20 * time.Millisecond, TrailingLogs: 16,
			FSMFlushInterval: 10 * time.Millisecond,
		}, i == 0)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(newAPI(n, Config{Logger: discardLogger()}).Handler())
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(func() { srv.Close(); n.Close() })
		nodes, urls = append(nodes, n), append(urls, srv.URL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[0].WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < size; i++ {
		body := fmt.Sprintf(`{"id":"n%d","raft_addr":"%s","http_addr":"%s"}`, i, trans[i].LocalAddr(), strings.TrimPrefix(urls[i], "http://"))
		if code, b := post(t, urls[0]+"/v1/cluster/join", body); code != 200 {
			t.Fatalf("join n%d: %d %s", i, code, b)
		}
	}
	for _, u := range urls {
		waitFor(t, "ready "+u, func() bool {
			resp, err := http.Get(u + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}
	return nodes, urls
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond for up to 10 s: metrics that raft reports on its own
// schedule (heartbeats, snapshots) appear when they happen.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsFamilies scrapes the leader and a follower of a 3-node
// cluster after checks, a replayed request_id and some errors, and checks
// every family an operator watches exists with a sane value.
func TestMetricsFamilies(t *testing.T) {
	nodes, urls := metricsCluster(t)
	leader := -1
	for i, n := range nodes {
		if n.IsLeader() {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader")
	}
	follower := (leader + 1) % len(nodes)
	const checks = 40
	for i := 0; i < checks; i++ {
		// Half on a follower, so that they are forwarded.
		u := urls[leader]
		if i%2 == 1 {
			u = urls[follower]
		}
		if code, b := post(t, u+"/v1/check", fmt.Sprintf(`{"key":"k%d","limit":%s}`, i, fw3)); code != 200 {
			t.Fatalf("check: %d %s", code, b)
		}
	}
	for i := 0; i < 2; i++ {
		if code, b := post(t, urls[leader]+"/v1/check", `{"key":"r","limit":`+fw3+`,"request_id":"once"}`); code != 200 {
			t.Fatalf("check with request_id: %d %s", code, b)
		}
	}
	if code, _ := post(t, urls[leader]+"/v1/check", `{"key":""}`); code != 400 {
		t.Fatalf("empty key: got %d, want 400", code)
	}
	if resp, err := http.Get(urls[leader] + "/no/such/route"); err == nil {
		resp.Body.Close()
	}

	var mfs map[string]*dto.MetricFamily
	waitFor(t, "raft heartbeats, snapshots and flushes in the leader's metrics", func() bool {
		mfs = scrape(t, urls[leader])
		return value(sample(mfs, "limitd_raft_snapshot_seconds", "phase", "create")) >= 1 &&
			value(sample(mfs, "limitd_raft_heartbeat_seconds")) >= 1 &&
			value(sample(mfs, "limitd_fsm_flush_seconds")) >= 1 &&
			value(sample(mfs, "limitd_raft_snapshot_bytes")) > 0
	})
	// The families pass Prometheus's lint (what `promtool check metrics`
	// checks): counters end in _total, units are base units...
	problems, err := promlint.NewWithMetricFamilies(familyList(mfs)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("/metrics: %s: %s", p.Metric, p.Text)
	}
	atLeast := func(min float64, name string, labels ...string) {
		t.Helper()
		if v := value(sample(mfs, name, labels...)); !(v >= min) {
			t.Errorf("%s%v = %v, want ≥ %v", name, labels, v, min)
		}
	}
	atLeast(1, "limitd_build_info", "go", runtime.Version())
	atLeast(checks/2, "limitd_raft_commit_seconds")
	atLeast(1, "limitd_raft_fsm_apply_seconds")
	atLeast(1, "limitd_raft_log_store_seconds", "role", "leader")
	atLeast(1, "limitd_raft_log_store_seconds", "role", "follower")
	atLeast(1, "limitd_raft_append_entries_seconds", "side", "sent")
	atLeast(1, "limitd_raft_append_entries_seconds", "side", "received")
	atLeast(1, "limitd_raft_leader_changes_total")
	atLeast(1, "limitd_raft_state", "state", "leader")
	atLeast(1, "limitd_raft_leader")
	atLeast(1, "limitd_data_dir_bytes")
	atLeast(checks+2, "limitd_raft_commit_index")
	atLeast(1, "limitd_request_id_replays_total")
	atLeast(checks/2+2, "limitd_http_responses_total", "endpoint", "check", "status", "200", "code", "ok")
	atLeast(1, "limitd_http_responses_total", "endpoint", "check", "status", "400", "code", "invalid_argument")
	atLeast(1, "limitd_http_responses_total", "endpoint", "other", "status", "404", "code", "not_found")
	atLeast(1, "limitd_http_responses_total", "endpoint", "internal", "status", "200", "code", "ok") // forwarded checks
	atLeast(checks/2, "limitd_checks_total", "result", "allowed")                                    // counted by the node asked
	if v := value(sample(mfs, "limitd_request_id_replays_total")); v != 1 {
		t.Errorf("limitd_request_id_replays_total = %v, want 1 (one retry)", v)
	}
	for _, s := range []string{"follower", "candidate", "shutdown"} {
		if v := value(sample(mfs, "limitd_raft_state", "state", s)); v != 0 {
			t.Errorf("leader: limitd_raft_state{state=%q} = %v, want 0", s, v)
		}
	}
	for _, r := range []string{"retry", "outcome_unknown", "unauthenticated", "too_large", "other"} {
		if sample(mfs, "limitd_forward_errors_total", "reason", r) == nil {
			t.Errorf("limitd_forward_errors_total{reason=%q} missing", r)
		}
	}
	for i, n := range nodes {
		if i == leader {
			continue
		}
		c := sample(mfs, "limitd_raft_follower_last_contact_seconds", "peer", n.ID())
		if v := value(c); !(v >= 0 && v < 5) {
			t.Errorf("last contact with %s = %v s, want a recent contact", n.ID(), v)
		}
	}
	for _, name := range []string{"limitd_raft_commit_lag", "limitd_raft_applied_index", "limitd_raft_term", "limitd_fsm_pending_batches",
		"limitd_raft_election_seconds", "limitd_group_commit_batch_ops", "limitd_keys_stored", "limitd_fsm_flushed_keys_total", "limitd_fsm_commits_total", "limitd_fsm_commit_seconds_total", "limitd_go_sched_wait_seconds"} {
		if mfs[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}
	// Latency histograms end at the request deadline (5 s by default).
	h := sample(mfs, "limitd_check_duration_seconds", "endpoint", "check").GetHistogram()
	b := h.GetBucket()
	if n := len(b); n > 0 && math.IsInf(b[n-1].GetUpperBound(), 1) {
		b = b[:n-1] // the exposition's +Inf bucket
	}
	if len(b) == 0 || b[len(b)-1].GetUpperBound() != 5 {
		t.Errorf("check latency buckets %v: want the last at 5 s", b)
	}

	fm := scrape(t, urls[follower])
	if v := value(sample(fm, "limitd_raft_state", "state", "follower")); v != 1 {
		t.Errorf("follower: limitd_raft_state{state=follower} = %v, want 1", v)
	}
	if c := sample(fm, "limitd_raft_follower_last_contact_seconds"); c != nil {
		t.Errorf("a follower reports last contact %v; only the leader knows it", c)
	}
	if v := value(sample(fm, "limitd_raft_leader_changes_total")); v < 1 {
		t.Errorf("follower: leader changes = %v, want ≥ 1", v)
	}
}

func TestRouteOfIsBounded(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/check": "check", "/v1/check/all": "check_all", "/v1/check/batch": "check_batch",
		"/v1/auth/api/some/path": "auth", "/v1/policies": "policies", "/v1/policies/p": "policies",
		"/v1/keys/user%2F1": "keys", "/v1/cluster": "cluster", "/v1/cluster/snapshot": "cluster_snapshot", "/v1/cluster/nodes/n2": "cluster_nodes",
		"/healthz": "healthz", "/internal/check": "internal", "/v1/check/other": "other", "/x": "other",
		"/v1/rls/domains": "rls_domains", "/v1/rls/domains/shop": "rls_domains", "/ui": "ui", "/ui/app.js": "ui", "/v1/simulate": "simulate",
	} {
		if got := routeNames[routeOf(path)]; got != want {
			t.Errorf("routeOf(%q) = %s, want %s", path, got, want)
		}
	}
}

// The response counter takes the error code from the body written by
// writeError: outcome_unknown and unavailable share status 503.
func TestResponsesCountErrorCodes(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), slog.NewLogLogger(discardLogger().Handler(), slog.LevelError), 0)
	h := m.Instrument(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/v1/check":
			writeError(w, &apiError{status: http.StatusServiceUnavailable, code: CodeOutcomeUnknown, message: "x"})
		case "/readyz":
			writeJSON(w, http.StatusServiceUnavailable, []byte(`{"ready":false}`))
		default:
			writeJSON(w, http.StatusOK, []byte(`{}`))
		}
	}))
	for _, p := range []string{"/v1/check", "/readyz", "/healthz", "/healthz"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	mfs := scrape(t, srv.URL)
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"endpoint", "check", "status", "503", "code", "outcome_unknown"}, 1},
		{[]string{"endpoint", "readyz", "status", "503", "code", "unavailable"}, 1},
		{[]string{"endpoint", "healthz", "status", "200", "code", "ok"}, 2},
	} {
		if v := value(sample(mfs, "limitd_http_responses_total", c.labels...)); v != c.want {
			t.Errorf("limitd_http_responses_total%v = %v, want %v", c.labels, v, c.want)
		}
	}
}
