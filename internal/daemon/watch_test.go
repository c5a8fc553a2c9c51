package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// fakeTarget is the replicated state the watcher writes, in memory; it
// counts writes so tests see that unchanged items are not written again.
type fakeTarget struct {
	mu       sync.Mutex
	policies map[string]fsm.Policy
	domains  map[string][]byte
	writes   int
}

func newFakeTarget() *fakeTarget {
	return &fakeTarget{policies: map[string]fsm.Policy{}, domains: map[string][]byte{}}
}

func (t *fakeTarget) PutPolicies(_ context.Context, ps []fsm.Policy, _ time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range ps {
		if cur, ok := t.policies[p.Name]; ok && cur == p {
			continue
		}
		t.policies[p.Name] = p
		t.writes++
	}
	return nil
}

func (t *fakeTarget) ListPolicies() []fsm.Policy {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []fsm.Policy
	for _, p := range t.policies {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (t *fakeTarget) DeletePolicy(_ context.Context, name string) *service.Error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.policies[name]; !ok {
		return &service.Error{Code: service.CodeNotFound}
	}
	delete(t.policies, name)
	t.writes++
	return nil
}

func (t *fakeTarget) LoadRLSDomains(_ context.Context, ds []*rls.Domain) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range ds {
		if bytes.Equal(t.domains[d.Name()], d.Canonical()) {
			continue
		}
		t.domains[d.Name()] = d.Canonical()
		t.writes++
	}
	return nil
}

func (t *fakeTarget) RLSDomains() ([]fsm.Domain, *service.Error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []fsm.Domain
	for n, c := range t.domains {
		out = append(out, fsm.Domain{Name: n, Config: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (t *fakeTarget) DeleteRLSDomain(_ context.Context, name string) *service.Error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.domains[name]; !ok {
		return &service.Error{Code: service.CodeNotFound}
	}
	delete(t.domains, name)
	t.writes++
	return nil
}

func (t *fakeTarget) policyNames() string {
	var names []string
	for _, p := range t.ListPolicies() {
		names = append(names, fmt.Sprintf("%s=%d", p.Name, p.Spec.Limit))
	}
	return strings.Join(names, ",")
}

func (t *fakeTarget) domainNames() string {
	ds, _ := t.RLSDomains()
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
	}
	return strings.Join(names, ",")
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func policiesJSON(limits map[string]int) string {
	var parts []string
	for name, n := range limits {
		parts = append(parts, fmt.Sprintf(`%q: {"algorithm": "fixed_window", "limit": %d, "window": "1m"}`, name, n))
	}
	sort.Strings(parts)
	return `{"policies": {` + strings.Join(parts, ", ") + `}}`
}

func domainYAML(name string, perMinute int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", name, perMinute)
}

type watchRig struct {
	w      *configWatcher
	target *fakeTarget
	m      *configMetrics
	logs   *bytes.Buffer
}

func newWatchRig(t *testing.T, policies, rlsConfig string, prune bool) *watchRig {
	t.Helper()
	f := &serveFlags{policies: policies}
	f.grpc.rlsConfig = rlsConfig
	f.watch.prune = prune
	r := &watchRig{target: newFakeTarget(), m: newConfigMetrics(), logs: &bytes.Buffer{}}
	r.w = newConfigWatcher(f, r.target, r.m, slog.New(slog.NewTextHandler(r.logs, nil)))
	return r
}

func (r *watchRig) errors(source string) float64 {
	return testutil.ToFloat64(r.m.errors.WithLabelValues(source))
}

func (r *watchRig) reloads(source string) float64 {
	return testutil.ToFloat64(r.m.reloads.WithLabelValues(source))
}

// An edited policies file is applied at the next poll, only the changed
// policy is written, and an unchanged file writes nothing.
func TestWatchPoliciesEdit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, policiesJSON(map[string]int{"api": 10, "login": 5}))
	r := newWatchRig(t, path, "", false)
	ctx := context.Background()
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.target.policyNames(); got != "api=10,login=5" || r.target.writes != 2 {
		t.Fatalf("after start: %s (%d writes)", got, r.target.writes)
	}
	r.w.poll(ctx)
	if r.target.writes != 2 || r.reloads(sourcePolicies) != 1 {
		t.Fatalf("an unchanged file was applied again: %d writes, %v reloads", r.target.writes, r.reloads(sourcePolicies))
	}
	writeFile(t, path, policiesJSON(map[string]int{"api": 20, "login": 5}))
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.target.policyNames(); got != "api=20,login=5" || r.target.writes != 3 {
		t.Fatalf("after the edit: %s (%d writes, want 3: only api rewritten)", got, r.target.writes)
	}
	// Without --config-prune a policy dropped from the file stays.
	writeFile(t, path, policiesJSON(map[string]int{"api": 20}))
	r.w.poll(ctx)
	if got := r.target.policyNames(); got != "api=20,login=5" {
		t.Fatalf("without prune: %s, want login kept", got)
	}
}

// A bad edit is refused whole: logged with the flag, file and error,
// counted once however many polls see it, and the running config kept;
// fixing the file applies it.
func TestWatchBadFileKeepsRunningConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, policiesJSON(map[string]int{"api": 10}))
	r := newWatchRig(t, path, "", false)
	ctx := context.Background()
	r.w.poll(ctx)
	// One good policy and one bad: nothing of it applies.
	writeFile(t, path, `{"policies": {"api": {"algorithm": "fixed_window", "limit": 99, "window": "1m"}, "bad": {"algorithm": "fixed_window", "limit": 1, "window": "60"}}}`)
	err := r.w.poll(ctx)
	if err == nil || !strings.Contains(err.Error(), "--policies "+path) || !strings.Contains(err.Error(), `policy "bad": window`) {
		t.Fatalf("poll error %v, want one naming the flag, the file and the field", err)
	}
	r.w.poll(ctx)
	r.w.poll(ctx)
	if got := r.target.policyNames(); got != "api=10" {
		t.Fatalf("after a bad edit: %s, want the running api=10", got)
	}
	if n := r.errors(sourcePolicies); n != 1 {
		t.Fatalf("limitd_config_reload_errors_total = %v, want 1 (one bad version)", n)
	}
	if logs := r.logs.String(); strings.Count(logs, "configuration not applied") != 1 || !strings.Contains(logs, path) || !strings.Contains(logs, `window`) {
		t.Fatalf("logs:\n%s", logs)
	}
	// A deleted file is an error too, not an empty configuration, counted
	// and logged once however many polls find it missing.
	os.Remove(path)
	r.w.poll(ctx)
	r.w.poll(ctx)
	if got := r.target.policyNames(); got != "api=10" || r.errors(sourcePolicies) != 2 {
		t.Fatalf("after removing the file: %s, %v errors", got, r.errors(sourcePolicies))
	}
	writeFile(t, path, policiesJSON(map[string]int{"api": 30}))
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.target.policyNames(); got != "api=30" {
		t.Fatalf("after the fix: %s", got)
	}
}

// configMapDir lays out dir as the kubelet does a ConfigMap volume: each key
// a symlink through "..data" to a timestamped directory; update swaps
// "..data" atomically (a rename over it), as the kubelet does.
type configMapDir struct {
	t   *testing.T
	dir string
	gen int
}

func (c *configMapDir) update(files map[string]string) {
	c.t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_12_03_11_00_%02d.%d", c.gen, c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, body := range files {
		writeFile(c.t, filepath.Join(c.dir, ts, name), body)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			c.t.Fatal(err)
		}
	}
}

// A ConfigMap-style "..data" swap is seen through the keys' symlinks, the
// dot-entries are not read as configuration, and a bad domain file keeps
// the running domains.
func TestWatchRLSConfigMapSwap(t *testing.T) {
	cm := &configMapDir{t: t, dir: t.TempDir()}
	cm.update(map[string]string{"shop.yaml": domainYAML("shop", 5), "api.yaml": domainYAML("api", 7)})
	r := newWatchRig(t, "", cm.dir, false)
	ctx := context.Background()
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.target.domainNames(); got != "api,shop" {
		t.Fatalf("domains %s", got)
	}
	cm.update(map[string]string{"shop.yaml": domainYAML("shop", 50), "api.yaml": domainYAML("api", 7)})
	writes := r.target.writes
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.target.domains["shop"]), `"requests_per_unit":50`) || r.target.writes != writes+1 {
		t.Fatalf("after the swap: shop %s, %d writes (want one more)", r.target.domains["shop"], r.target.writes-writes)
	}
	// A bad file: nothing applies, the other file's edit included.
	cm.update(map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "api.yaml": domainYAML("api", 70)})
	err := r.w.poll(ctx)
	if err == nil || !strings.Contains(err.Error(), "shop.yaml:4") || !strings.Contains(err.Error(), "fortnight") {
		t.Fatalf("poll error %v, want the file, line and field", err)
	}
	if !strings.Contains(string(r.target.domains["api"]), `"requests_per_unit":7}`) || r.errors(sourceRLSConfig) != 1 {
		t.Fatalf("after a bad swap: api %s, %v errors", r.target.domains["api"], r.errors(sourceRLSConfig))
	}
}

// --config-prune: what the files no longer name is deleted, API-made items
// included; the files are the whole set.
func TestWatchPrune(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.json")
	rlsDir := filepath.Join(dir, "rls")
	os.Mkdir(rlsDir, 0o755)
	writeFile(t, pol, policiesJSON(map[string]int{"api": 1, "login": 2}))
	writeFile(t, filepath.Join(rlsDir, "a.yaml"), domainYAML("a", 1))
	writeFile(t, filepath.Join(rlsDir, "b.yaml"), domainYAML("b", 1))
	r := newWatchRig(t, pol, rlsDir, true)
	ctx := context.Background()
	r.target.policies["made-by-api"] = fsm.Policy{Name: "made-by-api"}
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.target.policyNames(); got != "api=1,login=2" {
		t.Fatalf("policies %s: want the API-made one pruned", got)
	}
	writeFile(t, pol, policiesJSON(map[string]int{"api": 1}))
	os.Remove(filepath.Join(rlsDir, "b.yaml"))
	if err := r.w.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if p, d := r.target.policyNames(), r.target.domainNames(); p != "api=1" || d != "a" {
		t.Fatalf("after removing login and b: policies %s, domains %s", p, d)
	}
	if r.reloads(sourcePolicies) != 2 || r.reloads(sourceRLSConfig) != 2 {
		t.Fatalf("reloads %v %v", r.reloads(sourcePolicies), r.reloads(sourceRLSConfig))
	}
}

// The content hash follows symlinks and ignores dot-entries and
// subdirectories, and sees a change in any file's content or name.
func TestContentHash(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "x")
	h1, err := contentHash(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ".hidden"), "y")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if h, _ := contentHash(dir); h != h1 {
		t.Fatal("a dot-file or a subdirectory changed the hash")
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), "z")
	h2, _ := contentHash(dir)
	if h2 == h1 {
		t.Fatal("an edit did not change the hash")
	}
	os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"))
	if h, _ := contentHash(dir); h == h2 {
		t.Fatal("a rename did not change the hash")
	}
	if _, err := contentHash(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing path hashed")
	}
}

// run with interval 0 applies once and returns; a negative interval is
// refused at start.
func TestWatchRunOnceAndFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.json")
	writeFile(t, path, policiesJSON(map[string]int{"api": 10}))
	r := newWatchRig(t, path, "", false)
	if err := r.w.run(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if r.target.policyNames() != "api=10" {
		t.Fatal(r.target.policyNames())
	}
	f, err := loadServeFlags([]string{"--config-watch-interval", "-1s"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadStartInputs(f); err == nil || !strings.Contains(err.Error(), "--config-watch-interval") {
		t.Fatalf("negative interval: %v", err)
	}
}

// The xDS flags are checked at start, each mistake naming its flag.
func TestXDSFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rls-xds-server", "127.0.0.1:18000", "--rls-config", t.TempDir()}, "--rls-xds-server and --rls-config"},
		{[]string{"--rls-xds-ca", "ca.pem"}, "need --rls-xds-server"},
		{[]string{"--rls-xds-server", "127.0.0.1:18000", "--rls-xds-cert", "c.pem"}, "--rls-xds-cert and --rls-xds-key go together"},
		{[]string{"--rls-xds-server", "127.0.0.1:18000", "--rls-xds-ca", filepath.Join(t.TempDir(), "none.pem")}, "--rls-xds-ca: open"},
		{[]string{"--rls-xds-server", "127.0.0.1:18000", "--rls-xds-server-name", "x"}, "--rls-xds-server-name needs TLS"},
		{[]string{"--rls-xds-server", "127.0.0.1:18000", "--rls-xds-node-id", ""}, "--rls-xds-node-id must not be empty"},
		{[]string{"--rls-xds-server", "xds.example:18000"}, "--rls-xds-server xds.example:18000 is not a loopback address and the connection has no TLS"},
	} {
		f, err := loadServeFlags(c.args, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loadStartInputs(f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{{"--rls-xds-server", "xds.example:18000", "--insecure"}, {"--rls-xds-server", "localhost:18000"}} {
		f, _ := loadServeFlags(args, envOf(nil), io.Discard)
		if _, err := loadStartInputs(f); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	f, _ := loadServeFlags([]string{"--rls-xds-server", "xds.example:18000", "--rls-xds-tls"}, envOf(nil), io.Discard)
	if _, err := loadStartInputs(f); err != nil {
		t.Fatal(err)
	}
	if tc, _ := xdsTLS(&f.watch.xds); tc == nil || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("--rls-xds-tls: %+v", tc)
	}
}

// Content that changes while it is read (a swap under the load) is
// neither applied nor reported: the next poll reads the settled version.
func TestWatchChangedWhileRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cfg")
	writeFile(t, path, "v1")
	r := newWatchRig(t, "", "", false)
	var applied []string
	loads := 0
	r.w.files = []*watchedFile{{flag: "--x", source: "x", path: path,
		load: func(p string) (func(context.Context) error, error) {
			loads++
			b, _ := os.ReadFile(p)
			if loads == 1 {
				writeFile(t, p, "v2") // the swap lands mid-load
				return nil, fmt.Errorf("half of each version")
			}
			return func(context.Context) error { applied = append(applied, string(b)); return nil }, nil
		}}}
	if err := r.w.poll(context.Background()); err != nil || len(applied) != 0 || r.errors("x") != 0 {
		t.Fatalf("first poll: %v, applied %v, %v errors", err, applied, r.errors("x"))
	}
	if err := r.w.poll(context.Background()); err != nil || strings.Join(applied, ",") != "v2" {
		t.Fatalf("second poll: %v, applied %v", err, applied)
	}
}

// --policies naming one key of a ConfigMap volume (a symlink through
// "..data") sees the swap: the file's own inode never changes.
func TestWatchPoliciesConfigMapKey(t *testing.T) {
	cm := &configMapDir{t: t, dir: t.TempDir()}
	cm.update(map[string]string{"policies.json": policiesJSON(map[string]int{"api": 1})})
	r := newWatchRig(t, filepath.Join(cm.dir, "policies.json"), "", false)
	r.w.poll(context.Background())
	cm.update(map[string]string{"policies.json": policiesJSON(map[string]int{"api": 2})})
	if err := r.w.poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.target.policyNames(); got != "api=2" {
		t.Fatalf("after the swap: %s", got)
	}
}
