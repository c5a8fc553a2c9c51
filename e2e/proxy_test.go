package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testtool"
)

// The forward-auth snippets of docs/API.md, run as written against a limitd
// node: nginx (fail closed and fail open) and HAProxy with the Lua action.
// Only addresses are replaced. Skipped only where the proxy is not
// installed (.ci/run installs both: apt-get install nginx haproxy).

// docSnippet returns the code block that follows "<!-- snippet: name -->"
// in docs/API.md.
func docSnippet(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "API.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- snippet: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)\n```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/API.md has no snippet %q", name)
	}
	return string(m[1])
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so each proxy's requests have their own key under key_source=ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// waitListening waits until something accepts connections on addr.
func waitListening(t *testing.T, addr string, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s; logs:\n%s", addr, logs())
}

// startProxy runs a proxy command until the test ends and waits for listen.
func startProxy(t *testing.T, listen string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListening(t, listen, logs.String)
}

type proxyUnderTest struct {
	name     string
	addr     string // where it listens
	from     string // the client's loopback address: its key
	failOpen bool
}

func TestProxySnippets(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	nginx, nginxErr := exec.LookPath("nginx")
	haproxy, haproxyErr := exec.LookPath("haproxy")
	switch {
	case testtool.InCI():
		// CI installs both: there each one is required.
		nginx = testtool.Path(t, "nginx", "apt-get install -y nginx")
		haproxy = testtool.Path(t, "haproxy", "apt-get install -y haproxy")
	case nginxErr != nil && haproxyErr != nil:
		testtool.Missing(t, "neither nginx nor haproxy is installed (apt-get install -y nginx haproxy)")
	}
	p := newProc(t, "px", "")
	p.start()
	p.waitReady()
	code, body := putJSON(t, p.URL("/v1/policies/api"), `{"algorithm":"sliding_log","limit":2,"window":"1h"}`)
	if code != 200 {
		t.Fatalf("create policy: %d %s", code, body)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/boom" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		io.WriteString(w, "app "+r.URL.Path)
	}))
	defer app.Close()
	appAddr := strings.TrimPrefix(app.URL, "http://")
	addresses := func(s string) string {
		s = strings.ReplaceAll(s, "127.0.0.1:8080", p.HTTPAddr)
		return strings.ReplaceAll(s, "127.0.0.1:3000", appAddr)
	}

	var proxies []proxyUnderTest
	if nginxErr == nil {
		full := docSnippet(t, "nginx")
		open := docSnippet(t, "nginx-fail-open")
		down := regexp.MustCompile(`(?s)    location @limitd_down \{.*?\n    \}`)
		if !down.MatchString(full) {
			t.Fatal("the nginx snippet has no location @limitd_down block to swap for the fail-open one")
		}
		for i, cfg := range []string{full, down.ReplaceAllLiteralString(full, open)} {
			listen := startNginx(t, nginx, addresses(cfg))
			proxies = append(proxies, proxyUnderTest{name: []string{"nginx", "nginx fail-open"}[i], addr: listen, from: fmt.Sprintf("127.0.0.%d", 11+i), failOpen: i == 1})
		}
	} else {
		t.Log("nginx not installed: its snippet is not checked")
	}
	if haproxyErr == nil {
		dir := t.TempDir()
		lua := filepath.Join(dir, "limitd.lua")
		if err := os.WriteFile(lua, []byte(addresses(docSnippet(t, "haproxy-lua"))), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := addresses(docSnippet(t, "haproxy-cfg"))
		// The fail-open variant: the same without the 503 rule.
		rule503 := regexp.MustCompile(`(?m)^\s*http-request return status 503 .*\n`)
		if !rule503.MatchString(cfg) {
			t.Fatal("the HAProxy snippet has no 503 rule to drop for the fail-open variant")
		}
		for i, c := range []string{cfg, rule503.ReplaceAllString(cfg, "")} {
			listen := freePort(t)
			c = strings.Replace(c, "lua-load /etc/haproxy/limitd.lua", "lua-load "+lua, 1)
			c = strings.Replace(c, "bind :80", "bind "+listen, 1)
			path := filepath.Join(dir, fmt.Sprintf("haproxy%d.cfg", i))
			if err := os.WriteFile(path, []byte(c+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			startProxy(t, listen, haproxy, "-db", "-f", path)
			proxies = append(proxies, proxyUnderTest{name: []string{"haproxy", "haproxy fail-open"}[i], addr: listen, from: fmt.Sprintf("127.0.0.%d", 21+i), failOpen: i == 1})
		}
	} else {
		t.Log("haproxy not installed: its snippet is not checked")
	}

	getPath := func(px proxyUnderTest, from, path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+px.addr+path, nil)
		req.Header.Set("X-Forwarded-For", "198.51.100.7") // must not choose the key
		resp, err := clientFrom(from).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", px.name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	get := func(px proxyUnderTest) (*http.Response, string) { return getPath(px, px.from, "/api/x") }
	// The application's own errors pass through untouched (the 500 → 503
	// mapping is for limitd's failures only). From another address: a key of
	// its own.
	for i, px := range proxies {
		resp, b := getPath(px, fmt.Sprintf("127.0.1.%d", i+1), "/api/boom")
		if resp.StatusCode != 500 || b != "app /api/boom" {
			t.Errorf("%s: the app's 500 arrived as %d %q", px.name, resp.StatusCode, b)
		}
	}
	// Limit 2 per client address: 200, 200, then 429 with the headers.
	for _, px := range proxies {
		for i := 1; i <= 3; i++ {
			resp, b := get(px)
			want := 200
			if i == 3 {
				want = 429
			}
			if resp.StatusCode != want {
				t.Fatalf("%s request %d: %d %q, want %d", px.name, i, resp.StatusCode, b, want)
			}
			if want == 200 && b != "app /api/x" {
				t.Errorf("%s request %d: body %q, want the app's", px.name, i, b)
			}
			if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
				t.Errorf("%s request %d: no RateLimit headers: %v", px.name, i, resp.Header)
			}
			if want == 429 && resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s: 429 without Retry-After: %v", px.name, resp.Header)
			}
		}
	}
	// limitd down: fail closed with 503, or fail open to the app.
	p.Kill()
	for _, px := range proxies {
		resp, b := get(px)
		if px.failOpen && (resp.StatusCode != 200 || b != "app /api/x") {
			t.Errorf("%s with limitd down: %d %q, want the app's 200", px.name, resp.StatusCode, b)
		}
		if !px.failOpen && resp.StatusCode != 503 {
			t.Errorf("%s with limitd down: %d %q, want 503", px.name, resp.StatusCode, b)
		}
	}
}

// startNginx runs nginx with a server block (listening on port 80) until
// the test ends, and returns the address it listens on instead.
func startNginx(t *testing.T, nginx, server string) string {
	t.Helper()
	dir := t.TempDir()
	listen := freePort(t)
	server = strings.Replace(server, "listen 80;", "listen "+listen+";", 1)
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, server)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startProxy(t, listen, nginx, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
	return listen
}

// TestProxyForgedURIHeader: the nginx snippet of docs/API.md keyed by a
// query parameter (query:api_key), with real nginx, which passes the
// client's own headers to the auth subrequest. A client that adds
// X-Forwarded-Uri naming a victim's key spends its own key, not the
// victim's (a forged header must not choose the key): limitd reads only X-Original-URI, which
// the snippet sets.
func TestProxyForgedURIHeader(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx is not installed (apt-get install -y nginx)")
	}
	p := newProc(t, "pxq", "")
	p.start()
	p.waitReady()
	if code, body := putJSON(t, p.URL("/v1/policies/api"), `{"algorithm":"sliding_log","limit":2,"window":"1h"}`); code != 200 {
		t.Fatalf("create policy: %d %s", code, body)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
	defer app.Close()
	cfg := docSnippet(t, "nginx")
	if !strings.Contains(cfg, "key_source=ip&") {
		t.Fatal("the nginx snippet no longer asks with key_source=ip&")
	}
	cfg = strings.Replace(cfg, "key_source=ip&", "key_source=query:api_key&", 1)
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:8080", p.HTTPAddr)
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:3000", strings.TrimPrefix(app.URL, "http://"))
	listen := startNginx(t, nginx, cfg)

	get := func(key, forged string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/api/x?api_key="+key, nil)
		if forged != "" {
			req.Header.Set("X-Forwarded-Uri", "/?api_key="+forged)
		}
		resp, err := clientFrom("127.0.0.31").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if got := get("mine", "VICTIM"); got != want {
			t.Fatalf("request %d with a forged X-Forwarded-Uri: %d, want %d (its own key, limit 2)", i+1, got, want)
		}
	}
	if got := get("VICTIM", ""); got != 200 {
		t.Fatalf("the victim's first request: %d, want 200: the forged header spent the victim's key", got)
	}
}

func putJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
