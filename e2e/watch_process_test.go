package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProcessWatchesConfigFiles: the binary re-reads --policies and a
// ConfigMap-style --rls-config directory while it runs: an edited policy
// and a swapped "..data" symlink are applied, a bad file is refused and
// counted with the running config kept, and --config-prune removes what the
// files no longer name.
func TestProcessWatchesConfigFiles(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.json")
	writePolicies := func(limits string) {
		t.Helper()
		if err := os.WriteFile(pol+".tmp", []byte(`{"policies": {`+limits+`}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(pol+".tmp", pol); err != nil { // as editors save
			t.Fatal(err)
		}
	}
	writePolicies(`"api": {"algorithm": "fixed_window", "limit": 10, "window": "1m"}, "login": {"algorithm": "fixed_window", "limit": 5, "window": "1m"}`)
	cm := filepath.Join(dir, "rls")
	os.Mkdir(cm, 0o755)
	gen := 0
	swap := func(files map[string]string) { // the kubelet's atomic update of a ConfigMap volume
		t.Helper()
		gen++
		ts := fmt.Sprintf("..2026_12_03_%02d", gen)
		os.Mkdir(filepath.Join(cm, ts), 0o755)
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(cm, ts, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(cm, name)); err != nil {
				os.Symlink(filepath.Join("..data", name), filepath.Join(cm, name))
			}
		}
		os.Symlink(ts, filepath.Join(cm, "..data_tmp"))
		if err := os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	domain := func(name string, n int) string {
		return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", name, n)
	}
	swap(map[string]string{"shop.yaml": domain("shop", 5), "old.yaml": domain("old", 1)})

	p := newProc(t, "w", "")
	// An explicit gRPC address: --rls-config alone would take 127.0.0.1:8081,
	// which another test's node (or envoy ratelimit) may hold.
	p.start("--policies", pol, "--rls-config", cm, "--config-watch-interval", "100ms", "--config-prune", "--grpc-addr", freePort(t))
	p.waitReady()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(p.URL(path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen in 15s; logs:\n%s", what, p.Logs())
			}
		}
	}
	has := func(path, want string) func() bool {
		return func() bool { _, b := get(path); return strings.Contains(b, want) }
	}
	eventually("start-up policies", has("/v1/policies/api", `"limit":10`))
	eventually("start-up domains", has("/v1/rls/domains/shop", `"requests_per_unit":5`))

	writePolicies(`"api": {"algorithm": "fixed_window", "limit": 20, "window": "1m"}, "login": {"algorithm": "fixed_window", "limit": 5, "window": "1m"}`)
	eventually("the edited policy", has("/v1/policies/api", `"limit":20`))

	swap(map[string]string{"shop.yaml": domain("shop", 50), "old.yaml": domain("old", 1)})
	eventually("the swapped ConfigMap", has("/v1/rls/domains/shop", `"requests_per_unit":50`))

	// A bad file: refused, counted, the running domains kept.
	swap(map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "old.yaml": domain("old", 1)})
	eventually("the error counted", has("/metrics", `limitd_config_reload_errors_total{source="rls_config"} 1`))
	if _, b := get("/v1/rls/domains/shop"); !strings.Contains(b, `"requests_per_unit":50`) {
		t.Fatalf("after a bad file: %s, want the running config", b)
	}
	if logs := p.Logs(); !strings.Contains(logs, "shop.yaml:4") || !strings.Contains(logs, "fortnight") {
		t.Fatalf("the refusal is not logged with the file and line:\n%s", logs)
	}

	// --config-prune: a domain and a policy dropped from the files go.
	os.Remove(filepath.Join(cm, "old.yaml"))
	swap(map[string]string{"shop.yaml": domain("shop", 60)})
	writePolicies(`"api": {"algorithm": "fixed_window", "limit": 20, "window": "1m"}`)
	eventually("the pruned domain", func() bool { c, _ := get("/v1/rls/domains/old"); return c == 404 })
	eventually("the pruned policy", func() bool { c, _ := get("/v1/policies/login"); return c == 404 })
	if _, b := get("/v1/rls/domains/shop"); !strings.Contains(b, `"requests_per_unit":60`) {
		t.Fatalf("shop after the prune: %s", b)
	}
	_, mb := get("/metrics")
	lintMetrics(t, []byte(mb))
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
}
