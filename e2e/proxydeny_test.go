package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/testtool"
)

// TestProxyDenySnippets: the nginx and HAProxy forward-auth snippets of
// docs/API.md, run as written (addresses replaced) with the real proxies,
// answer 403 for a key a deny list matches (limitd's 403 passed on, not
// turned into a 429 or a 503), while a key the list does not match is let
// through and its limit still answers 429. With CI set, a missing proxy
// fails the test.
func TestProxyDenySnippets(t *testing.T) {
	t.Parallel()
	type px struct{ name, bin string }
	var proxies []px
	for _, name := range []string{"nginx", "haproxy"} {
		bin, err := exec.LookPath(name)
		if testtool.InCI() {
			bin = testtool.Path(t, name, "apt-get install -y "+name)
		} else if err != nil {
			t.Logf("%s not installed: its snippet is not checked", name)
			continue
		}
		proxies = append(proxies, px{name, bin})
	}
	if len(proxies) == 0 {
		testtool.Missing(t, "neither nginx nor haproxy is installed (apt-get install -y nginx haproxy)")
	}
	p := newProc(t, "pxd", "")
	p.start()
	p.waitReady()
	if code, body := putJSON(t, p.URL("/v1/policies/api"), `{"algorithm":"fixed_window","limit":1,"window":"1h"}`); code != 200 {
		t.Fatalf("create policy: %d %s", code, body)
	}
	const denied = "127.0.0.41"
	if code, body := putJSON(t, p.URL("/v1/lists/block"), `{"kind":"deny","entries":[{"cidr":"`+denied+`/32"}]}`); code != 200 {
		t.Fatalf("create list: %d %s", code, body)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
	defer app.Close()
	addresses := func(s string) string {
		s = strings.ReplaceAll(s, "127.0.0.1:8080", p.HTTPAddr)
		return strings.ReplaceAll(s, "127.0.0.1:3000", strings.TrimPrefix(app.URL, "http://"))
	}
	for i, x := range proxies {
		var listen string
		switch x.name {
		case "nginx":
			listen = startNginx(t, x.bin, addresses(docSnippet(t, "nginx")))
		case "haproxy":
			dir := t.TempDir()
			lua := filepath.Join(dir, "limitd.lua")
			if err := os.WriteFile(lua, []byte(addresses(docSnippet(t, "haproxy-lua"))), 0o644); err != nil {
				t.Fatal(err)
			}
			listen = freePort(t)
			c := addresses(docSnippet(t, "haproxy-cfg"))
			c = strings.Replace(c, "lua-load /etc/haproxy/limitd.lua", "lua-load "+lua, 1)
			c = strings.Replace(c, "bind :80", "bind "+listen, 1)
			path := filepath.Join(dir, "haproxy.cfg")
			if err := os.WriteFile(path, []byte(c+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			startProxy(t, listen, x.bin, "-db", "-f", path)
		}
		get := func(from string) (int, string) {
			t.Helper()
			resp, err := clientFrom(from).Get("http://" + listen + "/api/x")
			if err != nil {
				t.Fatalf("%s: %v", x.name, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		for j := range 2 {
			if code, b := get(denied); code != 403 || !strings.Contains(b, "denied") {
				t.Errorf("%s: deny-listed client, request %d: %d %q, want 403 denied", x.name, j+1, code, b)
			}
		}
		other := fmt.Sprintf("127.0.0.%d", 51+i)
		for j, want := range []int{200, 429} {
			if code, b := get(other); code != want {
				t.Errorf("%s: a client the list does not match, request %d: %d %q, want %d", x.name, j+1, code, b, want)
			}
		}
	}
}
