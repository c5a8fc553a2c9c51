package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
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
	cfg := docSnippet(t, "nginx-release")
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:8080", p.HTTPAddr)
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:3000", strings.TrimPrefix(app.URL, "http://"))
	listen := startNginx(t, nginx, cfg)
	get := func(path string) int {
		resp, err := clientFrom("127.0.0.31").Get("http://" + listen + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	held := func() int64 {
		resp, err := http.Post(p.URL("/v1/check"), "application/json", strings.NewReader(`{"key":"ip:127.0.0.31","policy":"workers","cost":0}`))
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
			t.Fatal("the slot is still held 5 s after the response: nginx did not release it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := get("/jobs/again"); code != 200 {
		t.Fatalf("after the release: %d, want 200", code)
	}
}
