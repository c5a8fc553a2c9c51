package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testtool"
)

// The nginx release snippet of docs/API.md, run as written (addresses
// replaced) against a limitd node with a concurrency policy of one slot:
// a request holds the slot while the app answers, a second one meanwhile is
// refused, and after the response nginx's post_action has released it (the
// slot is free long before its 30 s hold). With CI set a missing nginx
// fails the test.
func TestNginxReleasesTheSlotAfterTheResponse(t *testing.T) {
	t.Parallel()
	nginx, err := exec.LookPath("nginx")
	if testtool.InCI() {
		nginx = testtool.Path(t, "nginx", "apt-get install -y nginx")
	} else if err != nil {
		testtool.Missing(t, "nginx is not installed (apt-get install -y nginx)")
	}
	releaseThroughProxy(t, "127.0.0.31", func(limitd, app string) string {
		cfg := docSnippet(t, "nginx-release")
		cfg = strings.ReplaceAll(cfg, "127.0.0.1:8080", limitd)
		cfg = strings.ReplaceAll(cfg, "127.0.0.1:3000", app)
		return startNginx(t, nginx, cfg)
	})
}

// The HAProxy release snippets of docs/API.md, run as written (addresses,
// paths and the listen port replaced), the same way.
func TestHAProxyReleasesTheSlotWhenTheBackendAnswered(t *testing.T) {
	t.Parallel()
	haproxy, err := exec.LookPath("haproxy")
	if testtool.InCI() {
		haproxy = testtool.Path(t, "haproxy", "apt-get install -y haproxy")
	} else if err != nil {
		testtool.Missing(t, "haproxy is not installed (apt-get install -y haproxy)")
	}
	releaseThroughProxy(t, "127.0.0.32", func(limitd, app string) string {
		dir := t.TempDir()
		lua := filepath.Join(dir, "limitd_slots.lua")
		if err := os.WriteFile(lua, []byte(strings.ReplaceAll(docSnippet(t, "haproxy-release-lua"), "127.0.0.1:8080", limitd)), 0o644); err != nil {
			t.Fatal(err)
		}
		listen := freePort(t)
		cfg := strings.ReplaceAll(docSnippet(t, "haproxy-release-cfg"), "127.0.0.1:3000", app)
		cfg = strings.Replace(cfg, "lua-load /etc/haproxy/limitd_slots.lua", "lua-load "+lua, 1)
		cfg = strings.Replace(cfg, "bind :80", "bind "+listen, 1)
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(cfg+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		startProxy(t, listen, haproxy, "-db", "-f", path)
		return listen
	})
}

// releaseThroughProxy runs a one-slot concurrency policy behind the proxy
// that start configures (given limitd's and the app's addresses; it returns
// where the proxy listens), for a client at loopback address from.
func releaseThroughProxy(t *testing.T, from string, start func(limitd, app string) string) {
	p := newProc(t, "rl", "")
	p.start()
	p.waitReady()
	if code, body := putJSON(t, p.URL("/v1/policies/workers"), `{"algorithm":"concurrency","limit":1,"hold":"30s"}`); code != 200 {
		t.Fatalf("create policy: %d %s", code, body)
	}
	inApp := make(chan struct{})
	proceed := make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/jobs/slow" {
			inApp <- struct{}{}
			<-proceed
		}
		io.WriteString(w, "app "+r.URL.Path)
	}))
	defer app.Close()
	listen := start(p.HTTPAddr, strings.TrimPrefix(app.URL, "http://"))
	get := func(path string) int {
		resp, err := clientFrom(from).Get("http://" + listen + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	held := func() int64 {
		resp, err := http.Post(p.URL("/v1/check"), "application/json", strings.NewReader(`{"key":"ip:`+from+`","policy":"workers","cost":0}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d struct{ Limit, Remaining int64 }
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d.Limit - d.Remaining
	}
	done := make(chan int)
	go func() { done <- get("/jobs/slow") }()
	<-inApp
	if h := held(); h != 1 {
		t.Fatalf("while the app works: %d slots held, want 1", h)
	}
	if code := get("/jobs/other"); code != 429 {
		t.Fatalf("a second request while the slot is held: %d, want 429", code)
	}
	close(proceed)
	if code := <-done; code != 200 {
		t.Fatalf("the slow request: %d", code)
	}
	deadline := time.Now().Add(5 * time.Second) // post_action runs after the response
	for held() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slot is still held 5 s after the response: the proxy did not release it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := get("/jobs/again"); code != 200 {
		t.Fatalf("after the release: %d, want 200", code)
	}
}
