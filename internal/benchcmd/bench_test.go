package benchcmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/bench"
	"github.com/limitd/limitd/internal/daemon"
	"github.com/limitd/limitd/internal/proccluster"
)

// Environment of the fake node: the test binary re-executed as "limitd serve"
// for the --cluster tests. init runs before TestMain, so the child is a node
// and nothing else.
const (
	fakeNodeEnv       = "LIMITD_BENCH_FAKE_NODE"        // "1": be a fake node
	fakeNodeDirEnv    = "LIMITD_BENCH_FAKE_DIR"         // where nodes write <id>.pid and <id>.checks
	fakeNodeIgnoreEnv = "LIMITD_BENCH_FAKE_IGNORE_TERM" // "1": ignore SIGTERM
	fakeNodeFailEnv   = "LIMITD_BENCH_FAKE_FAIL"        // "1": fail at start
	fakeNodeCrashEnv  = "LIMITD_BENCH_FAKE_CRASH_AFTER" // N: exit after answering N checks
	realNodeEnv       = "LIMITD_BENCH_REAL_NODE"        // "1": be a real node (daemon.Main)
)

func init() {
	if os.Getenv(fakeNodeEnv) == "1" {
		os.Exit(fakeNode(os.Args[1:]))
	}
	if os.Getenv(realNodeEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(daemon.Main(os.Args[2:], os.Stderr))
	}
}

// fakeNode imitates `limitd serve` closely enough for the bench's cluster
// start-up: /readyz, /v1/cluster, join, policies and checks.
func fakeNode(args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "fake node: want serve, got", args)
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	id := fs.String("node-id", "", "")
	httpAddr := fs.String("http-addr", "", "")
	fs.String("raft-addr", "", "")
	dataDir := fs.String("data-dir", "", "")
	join := fs.String("join", "", "")
	dataGroups := fs.String("data-groups", "", "") // what --serve-arg passes in its test
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if os.Getenv(fakeNodeFailEnv) == "1" {
		fmt.Fprintf(os.Stderr, "boom: %s cannot open %s\n", *id, *dataDir)
		return 1
	}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return 1
	}
	os.WriteFile(filepath.Join(*dataDir, "state.db"), make([]byte, 12345), 0o644)
	dir := os.Getenv(fakeNodeDirEnv)
	os.WriteFile(filepath.Join(dir, *id+".pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	os.WriteFile(filepath.Join(dir, *id+".procs"), []byte(strconv.Itoa(runtime.GOMAXPROCS(0))), 0o644)
	os.WriteFile(filepath.Join(dir, *id+".data-groups"), []byte(*dataGroups), 0o644)

	var mu sync.Mutex
	members := []string{*id}
	var checks atomic.Int64
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, `{"ready":false}`, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"ready":true}`))
	})
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var ms []map[string]string
		for _, m := range members {
			ms = append(ms, map[string]string{"id": m})
		}
		state := "Leader" // the node that bootstrapped
		if *join != "" {
			state = "Follower"
		}
		json.NewEncoder(w).Encode(map[string]any{"node_id": *id, "state": state, "members": ms})
	})
	mux.HandleFunc("POST /v1/cluster/join", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ ID string }
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		members = append(members, req.ID)
		mu.Unlock()
	})
	// Policies are replicated: a file in the shared directory stands for the
	// log entry every node sees.
	mux.HandleFunc("PUT /v1/policies/{name}", func(w http.ResponseWriter, r *http.Request) {
		os.WriteFile(filepath.Join(dir, "policy-"+r.PathValue("name")), nil, 0o644)
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var c struct{ Policy string }
		json.NewDecoder(r.Body).Decode(&c)
		if _, err := os.Stat(filepath.Join(dir, "policy-"+c.Policy)); c.Policy != "" && err != nil {
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","field":"policy"}}`))
			return
		}
		n := checks.Add(1)
		w.Write([]byte(`{"allowed":true,"limit":100,"remaining":99}`))
		if crash, _ := strconv.ParseInt(os.Getenv(fakeNodeCrashEnv), 10, 64); crash > 0 && n >= crash {
			w.(http.Flusher).Flush()
			fmt.Fprintf(os.Stderr, "panic: %s crashing after %d checks\n", *id, n)
			os.Exit(2)
		}
	})
	srv := &http.Server{Addr: *httpAddr, Handler: mux}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "fake node:", err)
			os.Exit(1)
		}
	}()
	if *join != "" {
		body, _ := json.Marshal(map[string]string{"id": *id})
		for {
			resp, err := http.Post(*join+"/v1/cluster/join", "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ready.Store(true)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	for range sig {
		if os.Getenv(fakeNodeIgnoreEnv) != "1" {
			break
		}
	}
	os.WriteFile(filepath.Join(dir, *id+".checks"), []byte(strconv.FormatInt(checks.Load(), 10)), 0o644)
	// The cgroup it ran in (the CPU budget tests): read at the end, since
	// the harness moves a node into its group just after starting it.
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		os.WriteFile(filepath.Join(dir, *id+".cgroup"), b, 0o644)
		shares, _ := os.ReadFile(filepath.Join(proccluster.CgroupCPURoot, cpuGroupLine(b), "cpu.shares"))
		os.WriteFile(filepath.Join(dir, *id+".shares"), bytes.TrimSpace(shares), 0o644)
	}
	return 0
}

// fakeLimitd is an in-process limitd for the --addrs tests: it validates
// every body against the API contract, decides by key number (even allowed,
// odd refused), fails every 10th request with a 503, and counts what it
// answered so the report can be compared exactly.
type fakeLimitd struct {
	notReady   bool
	alwaysFail bool
	prefix     string

	requests, allowed, refused, failed, slotErrs, malformed atomic.Int64
	policyPuts                                              atomic.Int64
	auth, policyBody, policyName                            atomic.Value
}

type fakeCheck struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Limit  *struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Window    string `json:"window"`
		Burst     int64  `json:"burst"`
	} `json:"limit"`
	Cost *int64 `json:"cost"`
}

func (f *fakeLimitd) decodeStrict(r io.Reader, v any) bool {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.malformed.Add(1)
		return false
	}
	return true
}

// decide returns the decision JSON for one check, or "" for a bad check.
func (f *fakeLimitd) decide(c fakeCheck) (string, bool) {
	idx, err := strconv.Atoi(strings.TrimPrefix(c.Key, f.prefix))
	if err != nil || !strings.HasPrefix(c.Key, f.prefix) || c.Cost == nil || (c.Policy == "") == (c.Limit == nil) {
		f.malformed.Add(1)
		return "", false
	}
	if idx%2 == 0 {
		f.allowed.Add(1)
		return `{"allowed":true,"limit":100,"remaining":5,"reset_after_ms":1000,"retry_after_ms":0,"delay_ms":0}`, true
	}
	f.refused.Add(1)
	return `{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":1000,"retry_after_ms":10,"delay_ms":0}`, true
}

func (f *fakeLimitd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/readyz":
		if f.notReady {
			w.WriteHeader(503)
			w.Write([]byte(`{"ready":false,"reason":"no leader"}`))
		}
		return
	case r.URL.Path == "/metrics":
		// No stage histograms here: the bench leaves the budget out.
		w.WriteHeader(http.StatusNotFound)
		return
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/policies/"):
		f.policyPuts.Add(1)
		f.auth.Store(r.Header.Get("Authorization"))
		f.policyName.Store(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/policies/"))
		b, _ := io.ReadAll(r.Body)
		f.policyBody.Store(string(b))
		return
	}
	n := f.requests.Add(1)
	if f.alwaysFail || n%10 == 0 {
		f.failed.Add(1)
		w.WriteHeader(503)
		w.Write([]byte(`{"error":{"code":"unavailable","message":"no leader"}}`))
		return
	}
	switch r.URL.Path {
	case "/v1/check":
		var c fakeCheck
		if !f.decodeStrict(r.Body, &c) {
			w.WriteHeader(400)
			return
		}
		d, ok := f.decide(c)
		if !ok {
			w.WriteHeader(400)
			return
		}
		w.Write([]byte(d))
	case "/v1/check/batch":
		var b struct {
			Checks []fakeCheck `json:"checks"`
		}
		if !f.decodeStrict(r.Body, &b) {
			w.WriteHeader(400)
			return
		}
		var out []string
		for _, c := range b.Checks {
			if idx, _ := strconv.Atoi(strings.TrimPrefix(c.Key, f.prefix)); idx%5 == 0 {
				f.slotErrs.Add(1)
				out = append(out, `{"error":{"code":"invalid_argument","field":"key","message":"multiple of 5"}}`)
				continue
			}
			d, ok := f.decide(c)
			if !ok {
				d = `{"error":{"code":"invalid_argument"}}`
			}
			out = append(out, d)
		}
		w.Write([]byte(`{"results":[` + strings.Join(out, ",") + `]}`))
	default:
		w.WriteHeader(404)
	}
}

func newFakeLimitd(t *testing.T, f *fakeLimitd) string {
	if f.prefix == "" {
		f.prefix = "bench:"
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

func runBenchJSON(t *testing.T, args ...string) (bench.Result, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(append(args, "--json"), &out, &errb); code != 0 {
		t.Fatalf("runBench %v: exit %d\nstdout: %s\nstderr: %s", args, code, out.String(), errb.String())
	}
	if strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("--json printed %q, want one line", out.String())
	}
	rs, err := bench.ReadJSONLines(&out)
	if err != nil || len(rs) != 1 {
		t.Fatalf("reading the JSON line: %v %v", rs, err)
	}
	return rs[0], errb.String()
}

func TestBenchAgainstFakeServersCountsAddUp(t *testing.T) {
	f1, f2 := &fakeLimitd{}, &fakeLimitd{}
	addrs := newFakeLimitd(t, f1) + "," + newFakeLimitd(t, f2)
	r, _ := runBenchJSON(t, "--addrs", addrs, "--duration", "300ms", "--warmup", "0",
		"--concurrency", "8", "--keys", "1000", "--dist", "zipf", "--label", "fake")

	if n := f1.malformed.Load() + f2.malformed.Load(); n != 0 {
		t.Fatalf("%d request bodies broke the API contract", n)
	}
	// No warm-up: every request the servers answered is in the report.
	served := f1.requests.Load() + f2.requests.Load()
	if r.Requests != served || r.Checks != served {
		t.Errorf("report: %d requests / %d checks, servers answered %d", r.Requests, r.Checks, served)
	}
	if r.Allowed != f1.allowed.Load()+f2.allowed.Load() || r.Refused != f1.refused.Load()+f2.refused.Load() {
		t.Errorf("report allowed/refused %d/%d, servers %d/%d", r.Allowed, r.Refused,
			f1.allowed.Load()+f2.allowed.Load(), f1.refused.Load()+f2.refused.Load())
	}
	failed := f1.failed.Load() + f2.failed.Load()
	if r.Errors != failed || r.ErrorsByClass["5xx"] != failed || failed == 0 {
		t.Errorf("report errors %d %v, servers sent %d 503s", r.Errors, r.ErrorsByClass, failed)
	}
	if r.Allowed+r.Refused+r.Errors != r.Checks {
		t.Errorf("allowed %d + refused %d + errors %d != checks %d", r.Allowed, r.Refused, r.Errors, r.Checks)
	}
	// Round robin across the two nodes.
	if d := f1.requests.Load() - f2.requests.Load(); d < -1 || d > 1 {
		t.Errorf("node request counts %d and %d: not round-robin", f1.requests.Load(), f2.requests.Load())
	}
	if r.System != "limitd" || r.Nodes != 2 || r.Label != "fake" || r.Dist != "zipf" || r.Algorithm != "sliding_window" ||
		r.Limit != 100 || r.Window != "1s" || r.Concurrency != 8 || r.Keys != 1000 || r.Batch != 1 {
		t.Errorf("run description wrong: %+v", r)
	}
	if r.ChecksPerSec() <= 0 || r.P99 <= 0 || r.Max < r.P99 {
		t.Errorf("no throughput/latency: %+v", r)
	}
}

// --net-http sends the same checks through net/http's client, and the report
// says which client sent them.
func TestBenchNetHTTP(t *testing.T) {
	for _, netHTTP := range []bool{false, true} {
		f := &fakeLimitd{}
		args := []string{"--addrs", newFakeLimitd(t, f), "--duration", "200ms", "--warmup", "0", "--concurrency", "4", "--keys", "100"}
		want := "http"
		if netHTTP {
			args, want = append(args, "--net-http"), "net/http"
		}
		r, _ := runBenchJSON(t, args...)
		if f.malformed.Load() != 0 || r.Checks == 0 || r.Checks != f.requests.Load() {
			t.Errorf("net-http=%v: %d checks, server answered %d, %d malformed", netHTTP, r.Checks, f.requests.Load(), f.malformed.Load())
		}
		if r.Protocol != want {
			t.Errorf("net-http=%v: protocol %q, want %q", netHTTP, r.Protocol, want)
		}
	}
}

// The open loop through the command: --rate schedules exactly rate ×
// duration measured checks (the scheduler's timing itself is tested with a
// fake clock in package bench), every answer is counted, and the JSON line
// carries the open-loop fields.
func TestBenchOpenLoop(t *testing.T) {
	f := &fakeLimitd{}
	r, _ := runBenchJSON(t, "--addrs", newFakeLimitd(t, f), "--duration", "500ms", "--warmup", "0",
		"--rate", "200", "--arrival", "poisson", "--max-inflight", "16", "--keys", "1000")
	if f.malformed.Load() != 0 {
		t.Fatalf("%d malformed bodies", f.malformed.Load())
	}
	if r.Rate != 200 || r.Arrival != "poisson" || r.Concurrency != 16 {
		t.Errorf("rate %g arrival %q in flight %d, want 200 poisson 16", r.Rate, r.Arrival, r.Concurrency)
	}
	if r.Checks != f.requests.Load() || r.Checks != r.Scheduled || r.Allowed+r.Refused+r.Errors != r.Checks || r.Checks == 0 {
		t.Errorf("checks %d, scheduled %d, server answered %d: %+v", r.Checks, r.Scheduled, f.requests.Load(), r)
	}
	if r.Elapsed != 500*time.Millisecond {
		t.Errorf("measured interval %s, want the scheduled 500ms", r.Elapsed)
	}
	for _, bad := range [][]string{{"--rate", "-1"}, {"--rate", "100", "--arrival", "bursty"}, {"--rate", "100", "--batch", "5"}, {"--rate", "100", "--max-inflight", "0"}} {
		var out, errb bytes.Buffer
		if code := Main(append([]string{"--addrs", "http://127.0.0.1:1"}, bad...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, errb.String())
		}
	}
}

func TestBenchBatchCountsEveryCheck(t *testing.T) {
	f := &fakeLimitd{prefix: `odd"key\`}
	r, _ := runBenchJSON(t, "--addrs", newFakeLimitd(t, f), "--duration", "300ms", "--warmup", "0",
		"--concurrency", "4", "--keys", "100", "--batch", "20", "--key-prefix", `odd"key\`)
	if f.malformed.Load() != 0 {
		t.Fatalf("%d malformed bodies", f.malformed.Load())
	}
	if r.Requests != f.requests.Load() || r.Checks != 20*r.Requests {
		t.Errorf("%d requests (server %d), %d checks: want 20 per request", r.Requests, f.requests.Load(), r.Checks)
	}
	if r.Allowed != f.allowed.Load() || r.Refused != f.refused.Load() {
		t.Errorf("allowed/refused %d/%d, server %d/%d", r.Allowed, r.Refused, f.allowed.Load(), f.refused.Load())
	}
	if r.ErrorsByClass["4xx"] != f.slotErrs.Load() || r.ErrorsByClass["5xx"] != 20*f.failed.Load() {
		t.Errorf("errors %v; server: %d slot errors, %d failed requests of 20", r.ErrorsByClass, f.slotErrs.Load(), f.failed.Load())
	}
	if r.Allowed+r.Refused+r.Errors != r.Checks {
		t.Errorf("counts do not add up: %+v", r)
	}
}

func TestBenchCreatesPolicyAndTable(t *testing.T) {
	f := &fakeLimitd{}
	var out, errb bytes.Buffer
	code := Main([]string{"--addrs", strings.TrimPrefix(newFakeLimitd(t, f), "http://"), "--duration", "200ms", "--warmup", "0",
		"--concurrency", "2", "--policy", "api/v1", "--create-policy", "--algorithm", "token_bucket", "--limit", "7",
		"--window", "1m", "--burst", "9", "--admin-token", "s3cret"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if f.policyPuts.Load() != 1 || f.auth.Load() != "Bearer s3cret" || f.policyName.Load() != "api%2Fv1" {
		t.Errorf("policy PUT: %d puts, auth %v, name %v", f.policyPuts.Load(), f.auth.Load(), f.policyName.Load())
	}
	var pol map[string]any
	json.Unmarshal([]byte(f.policyBody.Load().(string)), &pol)
	if pol["algorithm"] != "token_bucket" || pol["limit"] != 7.0 || pol["window"] != "1m" || pol["burst"] != 9.0 {
		t.Errorf("policy body %v", pol)
	}
	if f.malformed.Load() != 0 || f.allowed.Load() == 0 {
		t.Errorf("checks by policy: %d malformed, %d allowed", f.malformed.Load(), f.allowed.Load())
	}
	for _, want := range []string{"checks/s", "allowed", "refused", "errors", "p50", "p90", "p99", "max", "policy:api/v1 7 per 1m"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(errb.String(), "\r") {
		t.Errorf("progress bar drawn on a non-terminal: %q", errb.String())
	}
}

// Nodes given by address: their CPU is measured by --pids, or by the
// process found listening on each port with --discover-pids (here the fakes
// run in this process, so both name it).
func TestBenchCPUOfNodesByAddress(t *testing.T) {
	addrs := newFakeLimitd(t, &fakeLimitd{}) + "," + newFakeLimitd(t, &fakeLimitd{})
	me := strconv.Itoa(os.Getpid())
	for _, how := range [][]string{{"--pids", me + "," + me}, {"--discover-pids"}} {
		r, _ := runBenchJSON(t, append(how, "--addrs", addrs, "--duration", "200ms", "--warmup", "50ms", "--concurrency", "4")...)
		if len(r.CPU) != 3 || r.CPUError != "" {
			t.Fatalf("%v: CPU %+v, error %q: want 2 nodes and the load generator", how, r.CPU, r.CPUError)
		}
		// (CPU itself is not asserted: over 200 ms on a loaded machine this
		// process may get less than one clock tick.)
		for _, p := range r.CPU {
			if p.PID != os.Getpid() || p.CPU < 0 {
				t.Errorf("%v: %+v, want pid %d", how, p, os.Getpid())
			}
		}
		if r.CPU[2].Role != "load generator" || !strings.HasPrefix(r.CPU[0].Name, "http://127.0.0.1:") {
			t.Errorf("%v: %+v", how, r.CPU)
		}
	}
}

func TestBenchFailures(t *testing.T) {
	old := benchReadyWait
	benchReadyWait = time.Second // long enough for one answer under -race on a loaded machine
	defer func() { benchReadyWait = old }()

	down := newFakeLimitd(t, &fakeLimitd{alwaysFail: true})
	notReady := newFakeLimitd(t, &fakeLimitd{notReady: true})
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"every request fails", []string{"--addrs", down, "--duration", "100ms", "--warmup", "0"}, 1, "no check was decided; last error: HTTP 503 unavailable: no leader"},
		{"node not ready", []string{"--addrs", notReady}, 1, "is not ready: GET /readyz: 503 Service Unavailable"},
		{"nothing listening", []string{"--addrs", "127.0.0.1:1"}, 1, "127.0.0.1:1 is not ready"},
		{"negative cluster", []string{"--cluster", "-1"}, 2, "--cluster must not be negative"},
		{"node procs below -1", []string{"--cluster", "3", "--node-procs", "-2"}, 2, "--node-procs must be -1, 0 or a number of CPUs"},
		{"cluster and addrs", []string{"--cluster", "3", "--addrs", down}, 2, "exclude each other"},
		{"bad dist", []string{"--dist", "pareto"}, 2, "unknown key distribution"},
		{"zero batch", []string{"--batch", "0"}, 2, "batch must be at least 1"},
		{"negative cost", []string{"--cost", "-1"}, 2, "--cost must not be negative"},
		{"create without policy", []string{"--create-policy"}, 2, "--create-policy needs --policy"},
		{"stray argument", []string{"now"}, 2, `unexpected argument "now"`},
		{"unknown flag", []string{"--velocity", "max"}, 2, "limitd bench: unknown flag --velocity; run 'limitd bench --help' for the flags"},
		{"flag typo", []string{"--adrs", "a:1"}, 2, "unknown flag --adrs (did you mean --addrs?)"},
		{"bad duration", []string{"--timeout", "10"}, 2, `invalid duration "10" for --timeout (want e.g. 60s, 1h30m or 500ms)`},
		{"pids for cluster", []string{"--cluster", "2", "--pids", "1,2"}, 2, "--cluster knows its nodes"},
		{"pids and discover", []string{"--pids", "1", "--discover-pids"}, 2, "exclude each other"},
		{"pids count", []string{"--addrs", "a:1,b:2", "--pids", "12"}, 2, "--pids lists 1 process ids for 2 --addrs"},
		{"bad pid", []string{"--pids", "x"}, 2, `--pids: "x" is not a process id`},
		{"unknown target", []string{"--target", "udp"}, 2, `--target must be http, grpc, rls or client, got "udp"`},
		{"grpc without grpc addrs", []string{"--target", "grpc", "--addrs", "a:1"}, 2, "--target grpc needs --grpc-addrs"},
		{"grpc addrs count", []string{"--target", "grpc", "--addrs", "a:1,b:2", "--grpc-addrs", "a:3"}, 2, "--grpc-addrs lists 1 addresses for 2 --addrs"},
		{"grpc addrs for default addr", []string{"--target", "rls", "--grpc-addrs", "a:3,b:4"}, 2, "--grpc-addrs lists 2 addresses for 1 --addrs"},
		{"grpc addrs for http", []string{"--grpc-addrs", "a:3"}, 2, "--grpc-addrs is for --target grpc and rls"},
		{"grpc addrs with cluster", []string{"--cluster", "1", "--target", "grpc", "--grpc-addrs", "a:3"}, 2, "--cluster starts its nodes with gRPC"},
		{"batch over grpc", []string{"--cluster", "1", "--target", "grpc", "--batch", "10"}, 2, "--batch is for --target http"},
		{"net/http over grpc", []string{"--cluster", "1", "--target", "grpc", "--net-http"}, 2, "--net-http is for --target http, not --target grpc"},
		{"rls window", []string{"--cluster", "1", "--target", "rls", "--window", "90s"}, 2, "--target rls: the RLS target needs a window of one rate-limit unit"},
		{"rls policy", []string{"--cluster", "1", "--target", "rls", "--policy", "api"}, 2, "--policy does not apply"},
		{"client peek", []string{"--cluster", "1", "--target", "client", "--cost", "0"}, 2, "cannot peek"},
		{"attack batch", []string{"--hot-keys", "10", "--hot-fraction", "0.9", "--batch", "10"}, 2, "batch must be 1"},
		{"attack without fraction", []string{"--hot-keys", "10"}, 2, "an attack needs both hot keys and a hot fraction"},
		{"attack fraction", []string{"--hot-keys", "10", "--hot-fraction", "1.5"}, 2, "hot fraction must be in [0, 1]"},
		{"attack hot limit", []string{"--hot-keys", "1", "--hot-fraction", "0.5", "--hot-limit", "0"}, 2, "hot limit must be at least 1"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := Main(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(errb.String(), tt.msg) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tt.name, code, errb.String(), tt.code, tt.msg)
		}
	}
}

func TestBenchUsageDocumentsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	fs, _ := newBenchFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(errb.String(), "-"+f.Name+" ") && !strings.Contains(errb.String(), "-"+f.Name+"\n") {
			t.Errorf("usage does not document --%s", f.Name)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no usage text", f.Name)
		}
	})
}

func TestSplitAddrs(t *testing.T) {
	got := splitAddrs(" 127.0.0.1:8080, http://a:1/ ,,https://b:2")
	want := []string{"http://127.0.0.1:8080", "http://a:1", "https://b:2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("splitAddrs = %q, want %q", got, want)
	}
}

// useFakeNodes makes --cluster start this test binary as fake nodes, with the
// cluster's temporary directory under a fresh TMPDIR. It returns the
// directory where the nodes report and the TMPDIR.
func useFakeNodes(t *testing.T) (reports, tmp string) {
	return useTestNodes(t, fakeNodeEnv)
}

func useTestNodes(t *testing.T, env string) (reports, tmp string) {
	reports, tmp = t.TempDir(), t.TempDir()
	t.Setenv(env, "1")
	t.Setenv(fakeNodeDirEnv, reports)
	t.Setenv("TMPDIR", tmp)
	old := proccluster.Serve
	proccluster.Serve = func() (string, []string, error) { return os.Args[0], []string{"serve"}, nil }
	t.Cleanup(func() { proccluster.Serve = old })
	return reports, tmp
}

// assertNodesGone checks that every node that wrote a pid file has exited and
// been reaped, and that the cluster directory was removed.
func assertNodesGone(t *testing.T, reports, tmp string, want int) {
	t.Helper()
	pids, _ := filepath.Glob(filepath.Join(reports, "*.pid"))
	if len(pids) != want {
		t.Errorf("%d nodes started, want %d", len(pids), want)
	}
	for _, p := range pids {
		b, _ := os.ReadFile(p)
		pid, _ := strconv.Atoi(string(b))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node %s (pid %d) still exists: %v", filepath.Base(p), pid, err)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestBenchClusterStartsRunsAndStops(t *testing.T) {
	reports, tmp := useFakeNodes(t)
	r, stderr := runBenchJSON(t, "--cluster", "3", "--duration", "300ms", "--warmup", "0",
		"--concurrency", "6", "--keys", "50", "--policy", "api")
	if r.Errors != 0 {
		t.Errorf("%d errors (%s): the policy was not created before the checks? stderr: %s", r.Errors, r.LastError, stderr)
	}
	if r.Nodes != 3 || strings.Count(r.Target, "http://127.0.0.1:") != 3 {
		t.Errorf("nodes %d target %q, want 3 loopback nodes", r.Nodes, r.Target)
	}
	if r.DiskBytes != 12345 || r.RSSBytes <= 0 {
		t.Errorf("footprint: disk %d bytes (want the fake's 12345), RSS %d", r.DiskBytes, r.RSSBytes)
	}
	if r.Algorithm != "policy:api" || r.Limit != 100 {
		t.Errorf("algorithm %q limit %d, want the created policy", r.Algorithm, r.Limit)
	}
	// The disk under the nodes' directories was timed before the run.
	if r.Fsync == nil || r.Fsync.Appends != bench.FsyncProbeAppends || !strings.HasPrefix(filepath.Base(r.Fsync.Dir), "limitd-bench-") {
		t.Errorf("fsync probe %+v, want %d appends in the cluster's directory", r.Fsync, bench.FsyncProbeAppends)
	}
	// Every node got a third of the checks (round-robin), and the nodes
	// wrote their counts on SIGTERM: they were stopped, not killed.
	var total int64
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.checks", i)))
		if err != nil {
			t.Fatalf("bench%d did not stop gracefully: %v", i, err)
		}
		n, _ := strconv.ParseInt(string(b), 10, 64)
		if n < r.Requests/3-1 || n > r.Requests/3+1 {
			t.Errorf("bench%d answered %d of %d checks", i, n, r.Requests)
		}
		total += n
	}
	if total != r.Requests {
		t.Errorf("nodes answered %d checks, report says %d", total, r.Requests)
	}
	// Each node ran with its share of the machine's CPUs (--node-procs 0).
	for i := 1; i <= 3; i++ {
		b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.procs", i)))
		if want := strconv.Itoa(max(1, runtime.NumCPU()/3)); string(b) != want {
			t.Errorf("bench%d ran with GOMAXPROCS %q, want %s", i, b, want)
		}
	}
	// CPU per check for every node, by role, and for the load generator.
	var roles []string
	for i, p := range r.CPU {
		roles = append(roles, p.Role+" "+p.Name)
		want := os.Getpid()
		if i < 3 {
			b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.pid", i+1)))
			want, _ = strconv.Atoi(string(b))
		}
		if p.PID != want {
			t.Errorf("%s %s: pid %d, want %d", p.Role, p.Name, p.PID, want)
		}
	}
	if got := strings.Join(roles, ", "); got != "leader bench1, follower bench2, follower bench3, load generator limitd bench" || r.CPUError != "" {
		t.Errorf("CPU measured for %q (error %q)", got, r.CPUError)
	}
	assertNodesGone(t, reports, tmp, 3)
}

func TestBenchClusterKillsNodesThatIgnoreSIGTERM(t *testing.T) {
	reports, tmp := useFakeNodes(t)
	t.Setenv(fakeNodeIgnoreEnv, "1")
	old := proccluster.StopTimeout
	proccluster.StopTimeout = 200 * time.Millisecond
	defer func() { proccluster.StopTimeout = old }()
	_, stderr := runBenchJSON(t, "--cluster", "2", "--duration", "100ms", "--warmup", "0", "--concurrency", "2")
	if !strings.Contains(stderr, "killed bench1, bench2: no exit within 200ms of SIGTERM") {
		t.Errorf("stderr %q: want the kill reported", stderr)
	}
	assertNodesGone(t, reports, tmp, 2)
}

func TestBenchClusterStartFailureShowsLogs(t *testing.T) {
	reports, tmp := useFakeNodes(t)
	t.Setenv(fakeNodeFailEnv, "1")
	var out, errb bytes.Buffer
	code := Main([]string{"--cluster", "3", "--duration", "100ms"}, &out, &errb)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"bench1 exited during start-up", "--- bench1 log", "boom: bench1 cannot open"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if out.Len() != 0 {
		t.Errorf("a report was printed for a run that never started: %s", out.String())
	}
	assertNodesGone(t, reports, tmp, 0)
}

func TestBenchClusterReportsCrashedNodes(t *testing.T) {
	reports, tmp := useFakeNodes(t)
	t.Setenv(fakeNodeCrashEnv, "20")
	r, stderr := runBenchJSON(t, "--cluster", "2", "--duration", "300ms", "--warmup", "0", "--concurrency", "2")
	if r.Allowed < 30 || r.Allowed > 40 || r.ErrorsByClass["transport"] == 0 { // the last answer may be cut off by the exit
		t.Errorf("allowed %d, errors %v: want 20 checks per node, then transport errors", r.Allowed, r.ErrorsByClass)
	}
	for _, want := range []string{"bench1 exited during the run", "bench2 exited during the run", "panic: bench2 crashing after 20 checks"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	assertNodesGone(t, reports, tmp, 2)
}

// The bench against real nodes (this test binary running daemon.Main): the API
// contract, forwarding from followers, policy creation and batches end to end.
func TestBenchRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real Raft clusters")
	}
	_, tmp := useTestNodes(t, realNodeEnv)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"3 nodes, policy", []string{"--cluster", "3", "--policy", "api"}},
		{"1 node, batches", []string{"--cluster", "1", "--batch", "20"}},
	} {
		r, stderr := runBenchJSON(t, append(tc.args, "--duration", "1s", "--warmup", "0", "--concurrency", "8",
			"--keys", "100", "--limit", "5", "--window", "1s", "--algorithm", "sliding_window")...)
		if r.Errors != 0 {
			t.Errorf("%s: %d errors, e.g. %s\n%s", tc.name, r.Errors, r.LastError, stderr)
		}
		// The sliding window counter admits at most the limit per key in any
		// aligned window; a run of 1 s (and its last in-flight requests)
		// touches at most 3 of them.
		if r.Allowed == 0 || r.Allowed > 3*5*100 {
			t.Errorf("%s: %d allowed, want 1..1500", tc.name, r.Allowed)
		}
		if r.Checks > 3*5*100 && r.Refused == 0 {
			t.Errorf("%s: %d checks over 100 keys at 5/s and none refused", tc.name, r.Checks)
		}
		if r.DiskBytes == 0 || r.RSSBytes == 0 {
			t.Errorf("%s: footprint not measured: disk %d rss %d", tc.name, r.DiskBytes, r.RSSBytes)
		}
		// One leader, the rest followers, and the load generator; the
		// leader decided every check, so it used CPU.
		roles := map[string]int{}
		for _, p := range r.CPU {
			roles[p.Role]++
			if p.Role == "leader" && p.CPU <= 0 {
				t.Errorf("%s: the leader %s used no CPU", tc.name, p.Name)
			}
		}
		if n := r.Nodes; roles["leader"] != 1 || roles["follower"] != n-1 || roles["load generator"] != 1 || r.CPUError != "" {
			t.Errorf("%s: CPU measured for %v (error %q), want 1 leader, %d followers, the load generator", tc.name, roles, r.CPUError, n-1)
		}
		// The latency budget: every node's HTTP stages and the leader's
		// propose stage were scraped and have the run's samples.
		stages := map[string]int{}
		for _, st := range r.Stages {
			if st.Count > 0 {
				stages[st.Stage]++
			}
		}
		// (The HTTP stages time POST /v1/check: not batches.)
		wantHTTP := r.Nodes
		if r.Batch > 1 {
			wantHTTP = 0
		}
		if stages["HTTP read + decode"] != wantHTTP || stages["propose to result (leader)"] != 1 || stages["batcher wait"] == 0 {
			t.Errorf("%s: stage budget %v, want read+decode on %d nodes, propose on the leader, batcher wait", tc.name, stages, wantHTTP)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// Every --target against a real 1-node cluster (this test binary running
// daemon.Main, with --grpc-addr for grpc and rls), each under the attack
// workload: the checks are decided by the node over the chosen protocol,
// the hot keys by the hot limit, and the report splits the two kinds.
func TestBenchTargetsAndAttackRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real Raft nodes")
	}
	_, tmp := useTestNodes(t, realNodeEnv)
	for _, target := range []string{"http", "grpc", "rls", "client"} {
		began := time.Now()
		// 2 hot keys at 1 per minute: each is allowed exactly once in a
		// fresh node's run; 1,000 normal keys at 100 per minute never refuse.
		r, stderr := runBenchJSON(t, "--cluster", "1", "--target", target, "--duration", "400ms", "--warmup", "0",
			"--concurrency", "8", "--keys", "1000", "--limit", "100", "--window", "1m", "--algorithm", "sliding_window",
			"--hot-keys", "2", "--hot-fraction", "0.5", "--hot-limit", "1")
		t.Logf("%s: %.0f checks/s, run took %s", target, r.ChecksPerSec(), time.Since(began).Round(time.Millisecond))
		if r.Protocol != target || r.Errors != 0 {
			t.Errorf("%s: protocol %q, %d errors (%s)\n%s", target, r.Protocol, r.Errors, r.LastError, stderr)
		}
		if r.Hot == nil || r.Normal == nil {
			t.Fatalf("%s: no attack report: %+v", target, r)
		}
		if r.Hot.Allowed != 2 || r.Hot.Refused == 0 || r.Normal.Refused != 0 || r.Normal.Allowed == 0 {
			t.Errorf("%s: hot %+v normal %+v; want 2 hot allowed, the rest refused, no normal refused", target, *r.Hot, *r.Normal)
		}
		roles := map[string]int{}
		for _, p := range r.CPU {
			roles[p.Role]++
			if p.Role == "load generator" && target == "client" && p.Name != "limitd bench (Go client)" {
				t.Errorf("client: load generator named %q", p.Name)
			}
		}
		if roles["leader"] != 1 || roles["load generator"] != 1 || r.CPUError != "" {
			t.Errorf("%s: CPU measured for %v (%s)", target, roles, r.CPUError)
		}
		if target == "client" && !strings.Contains(stderr, "Go client sent") {
			t.Errorf("client: no coalescing figures on stderr:\n%s", stderr)
		}
		if (target == "grpc" || target == "rls") && strings.HasPrefix(r.Target, "http") {
			t.Errorf("%s: target %q, want the gRPC address", target, r.Target)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// Against running nodes: --addrs for HTTP (readiness, roles, the domain)
// and --grpc-addrs, in the same order, for the RLS calls.
func TestBenchRLSAgainstRunningNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Raft node")
	}
	useTestNodes(t, realNodeEnv)
	c, err := proccluster.StartOpts(t.Context(), t.TempDir(), []string{"n1"}, proccluster.Options{GRPC: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	nd := c.Nodes[0]
	r, stderr := runBenchJSON(t, "--addrs", nd.URL(""), "--grpc-addrs", nd.GRPCAddr, "--pids", strconv.Itoa(nd.PID()),
		"--target", "rls", "--duration", "300ms", "--warmup", "0", "--concurrency", "4", "--keys", "3",
		"--limit", "5", "--window", "1m")
	if r.Errors != 0 || r.Target != nd.GRPCAddr || r.Protocol != "rls" {
		t.Errorf("%d errors (%s), target %q protocol %q\n%s", r.Errors, r.LastError, r.Target, r.Protocol, stderr)
	}
	// 3 keys at 5 per minute (the installed domain's rule): exactly 15 allowed.
	if r.Allowed != 15 || r.Refused == 0 {
		t.Errorf("allowed %d refused %d, want 15 and refusals", r.Allowed, r.Refused)
	}
	if len(r.CPU) != 2 || r.CPU[0].PID != nd.PID() || r.CPU[0].Role != "leader" {
		t.Errorf("CPU %+v", r.CPU)
	}
}

// TestBenchLeaderOnly: --leader-only finds the node that says it leads and
// sends it every request, while CPU is still read for every node.
func TestBenchLeaderOnly(t *testing.T) {
	var hits [3]atomic.Int64
	var urls []string
	for i := range 3 {
		state := "Follower"
		if i == 1 {
			state = "Leader"
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/cluster":
				fmt.Fprintf(w, `{"state":%q}`, state)
			case "/readyz":
				fmt.Fprint(w, `{"ready":true}`)
			case "/v1/check":
				hits[i].Add(1)
				fmt.Fprint(w, `{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":1,"retry_after_ms":0,"delay_ms":0}`)
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	var out, errOut bytes.Buffer
	args := []string{"--addrs", strings.Join(urls, ","), "--leader-only", "--duration", "200ms", "--warmup", "0", "--concurrency", "4", "--json"}
	if code := Main(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if hits[1].Load() == 0 || hits[0].Load() != 0 || hits[2].Load() != 0 {
		t.Fatalf("checks per node %d %d %d: want every check on the leader (node 2)", hits[0].Load(), hits[1].Load(), hits[2].Load())
	}

	// No node leads: a clear error, not a silent round robin.
	old := benchReadyWait
	benchReadyWait = 200 * time.Millisecond
	defer func() { benchReadyWait = old }()
	if _, err := leaderIndex(t.Context(), []string{urls[0], urls[2]}, ""); err == nil || !strings.Contains(err.Error(), "says it leads") {
		t.Fatalf("no leader: %v", err)
	}
}

// --external-rls benches another system's RLS servers: --pids counts them
// (not --addrs), and it needs --target rls with --grpc-addrs.
func TestBenchExternalRLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--target", "rls", "--external-rls", "--grpc-addrs", "127.0.0.1:1", "--pids", "5"}, true},
		{[]string{"--target", "rls", "--external-rls", "--grpc-addrs", "127.0.0.1:1,127.0.0.1:2", "--pids", "5"}, false},
		{[]string{"--target", "rls", "--external-rls", "--cluster", "1"}, false},
		{[]string{"--target", "http", "--external-rls", "--grpc-addrs", "127.0.0.1:1"}, false},
	} {
		fs, f := newBenchFlagSet(io.Discard)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := f.validate(fs); (err == nil) != tc.ok {
			t.Errorf("%v: %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}
