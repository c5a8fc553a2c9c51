package daemon

import (
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// --gc-percent and --memory-limit-mib apply unless GOGC / GOMEMLIMIT are set.
func TestTuneGC(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(prevGC)
		debug.SetMemoryLimit(prevLimit)
	})
	current := func() (int, int64) {
		gc := debug.SetGCPercent(-1)
		debug.SetGCPercent(gc)
		return gc, debug.SetMemoryLimit(-1) // a negative limit only reads it
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}

	tuneGC(400, 512, env(nil))
	if gc, limit := current(); gc != 400 || limit != 512<<20 {
		t.Fatalf("flags: GC %d limit %d, want 400 and 512 MiB", gc, limit)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC(400, 512, env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}))
	if gc, limit := current(); gc != 100 || limit != math.MaxInt64 {
		t.Fatalf("with GOGC and GOMEMLIMIT set: GC %d limit %d, want both left alone", gc, limit)
	}

	tuneGC(0, 0, env(nil))
	if gc, limit := current(); gc != 100 || limit != math.MaxInt64 {
		t.Fatalf("zero flags: GC %d limit %d, want Go's defaults left alone", gc, limit)
	}
}

// serveTest runs newHTTPServer behind limitListener on loopback with the
// given limits; the handler reads the whole body.
func serveTest(t *testing.T, read time.Duration, maxConns int) string {
	t.Helper()
	f := &serveFlags{readTimeout: read, idleTimeout: time.Minute, maxConnections: maxConns, applyTimeout: time.Second}
	hs := newHTTPServer(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "ok")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(limitListener(ln, f.maxConnections))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// waitClosedOrAnswered reads from c until the server answers or closes it;
// it fails if that takes longer than bound (the server held the client).
func waitClosedOrAnswered(t *testing.T, c net.Conn, bound time.Duration, what string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(bound))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the server still held the connection after %v", what, bound)
	}
	return string(b)
}

// A client that sends its headers or body too slowly is cut off at
// --read-timeout instead of holding a connection indefinitely.
func TestHTTPServerCutsOffSlowClients(t *testing.T) {
	addr := serveTest(t, 300*time.Millisecond, 100)
	slowHeader, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slowHeader.Close()
	io.WriteString(slowHeader, "POST /v1/check HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	waitClosedOrAnswered(t, slowHeader, 5*time.Second, "slow headers")

	slowBody, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slowBody.Close()
	io.WriteString(slowBody, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"key\":")
	got := waitClosedOrAnswered(t, slowBody, 5*time.Second, "slow body")
	if strings.Contains(got, "200 OK") {
		t.Fatalf("slow body answered 200: %q", got)
	}
}

// --max-connections: while the cap is reached a further client waits; it is
// served once a connection closes.
func TestHTTPServerCapsConnections(t *testing.T) {
	addr := serveTest(t, time.Minute, 2)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // a request in progress
		held = append(held, c)
	}
	c := &http.Client{Timeout: 300 * time.Millisecond}
	if resp, err := c.Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served while two were held at a cap of 2 (%s)", resp.Status)
	}
	for _, h := range held {
		h.Close()
	}
	c.Timeout = 5 * time.Second
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("after the held connections closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the held connections closed: %s", resp.Status)
	}
}

// With --pprof the profiling endpoints are served and every other path
// reaches the API as it is: no redirect of a path a mux deems unclean
// (keys may hold "//" or "/./").
func TestPprofLeavesOtherPathsAlone(t *testing.T) {
	h := withPprof(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "api "+r.URL.Path)
	}))
	srv := httptestServer(t, h)
	for path, want := range map[string]string{
		"/v1/keys/a//b": "api /v1/keys/a//b", "/v1/keys/./x": "api /v1/keys/./x", "/v1/check": "api /v1/check",
		"/debug/pprofx": "api /debug/pprofx",
	} {
		req, _ := http.NewRequest("GET", srv+path, nil)
		req.URL.Opaque = path // sent as written, not cleaned by the client
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, body, want)
		}
	}
	for _, path := range []string{"/debug/pprof/goroutine?debug=1", "/debug/pprof"} {
		resp, err := http.Get(srv + path) // the second is redirected to the index
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine") {
			t.Fatalf("GET %s: %d %.80q, want the profiler's answer", path, resp.StatusCode, body)
		}
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// --rls-config without --grpc-addr listens on 127.0.0.1:8081, envoy
// ratelimit's gRPC port, as its users expect; a --grpc-addr given (by flag,
// environment or --config file) wins, an empty one meaning no listener;
// without --rls-config there is no default listener.
func TestRLSConfigDefaultsGRPCAddr(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644))
	conf := filepath.Join(t.TempDir(), "limitd.yaml")
	must(os.WriteFile(conf, []byte("grpc-addr: \"\"\n"), 0o644))
	for _, c := range []struct {
		name      string
		args      []string
		env       map[string]string
		addr      string
		defaulted bool
		warn      bool
	}{
		{name: "rls-config alone", args: []string{"--rls-config", dir}, addr: DefaultRLSGRPCAddr, defaulted: true},
		{name: "environment", env: map[string]string{"LIMITD_RLS_CONFIG": dir}, addr: DefaultRLSGRPCAddr, defaulted: true},
		{name: "explicit", args: []string{"--rls-config", dir, "--grpc-addr", "127.0.0.1:9081"}, addr: "127.0.0.1:9081"},
		{name: "explicit empty", args: []string{"--rls-config", dir, "--grpc-addr", ""}, addr: ""},
		{name: "empty in the environment", args: []string{"--rls-config", dir}, env: map[string]string{"LIMITD_GRPC_ADDR": ""}, addr: ""},
		{name: "empty in the file", args: []string{"--rls-config", dir, "--config", conf}, addr: ""},
		{name: "no rls-config", addr: ""},
		{name: "public http", args: []string{"--rls-config", dir, "--http-addr", "0.0.0.0:8080", "--insecure"}, addr: DefaultRLSGRPCAddr, defaulted: true, warn: true},
		{name: "public http, public grpc", args: []string{"--rls-config", dir, "--http-addr", "0.0.0.0:8080", "--grpc-addr", "0.0.0.0:8081", "--insecure"}, addr: "0.0.0.0:8081"},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		f, err := loadServeFlags(c.args, lookup, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := loadStartInputs(f); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if f.grpc.addr != c.addr || f.grpc.addrDefaulted != c.defaulted {
			t.Errorf("%s: --grpc-addr %q (defaulted %v), want %q (%v)", c.name, f.grpc.addr, f.grpc.addrDefaulted, c.addr, c.defaulted)
		}
		w := startWarnings(f)
		if got := len(w) == 1 && strings.Contains(w[0], "loopback only") && strings.Contains(w[0], "--grpc-addr"); got != c.warn || len(w) > 1 {
			t.Errorf("%s: warnings %q, want a loopback-only gRPC warning: %v", c.name, w, c.warn)
		}
		if err := checkSecureDefaults(f); err != nil {
			t.Errorf("%s: the default refused by the secure-default rule: %v", c.name, err)
		}
	}
}

// A taken gRPC port refuses the start before the data directory is touched
// (checkListenPorts runs beside the Raft port's check), and for the
// defaulted address the error says where it came from and how to change it.
func TestTakenGRPCPortFailsClearly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, defaulted := range []bool{true, false} {
		f := &serveFlags{raftAddr: "127.0.0.1:0"}
		f.grpc = grpcFlags{rlsConfig: "rls/", addr: taken.Addr().String(), addrDefaulted: defaulted}
		err := checkListenPorts(f)
		if err == nil || !strings.Contains(err.Error(), "listen grpc "+taken.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("defaulted %v: %v", defaulted, err)
		}
		hint := strings.Contains(err.Error(), "the --grpc-addr default with --rls-config") && strings.Contains(err.Error(), "or to '' for no gRPC listener")
		if hint != defaulted {
			t.Errorf("defaulted %v: %v; want the default's hint: %v", defaulted, err, defaulted)
		}
	}
	f := &serveFlags{raftAddr: "127.0.0.1:0"}
	if err := checkListenPorts(f); err != nil {
		t.Fatalf("no --grpc-addr: %v", err)
	}
}
