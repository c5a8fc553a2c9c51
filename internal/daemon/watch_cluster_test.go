package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/service"
)

// Every node of a cluster watches its own copy of the same files: the node
// that sees a change first writes it through the leader (forwarded from a
// follower), and the others, once they hold the replicated change, find
// nothing to write. The log's applied index is the witness: it moves only
// for the first node's writes.
func TestWatchClusterAppliesOnce(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: clustertest.SteadyTimers, SkipShort: true})
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies.json")
	rlsDir := filepath.Join(dir, "rls")
	os.Mkdir(rlsDir, 0o755)
	writeFile(t, pol, policiesJSON(map[string]int{"api": 10}))
	writeFile(t, filepath.Join(rlsDir, "shop.yaml"), domainYAML("shop", 5))
	f := &serveFlags{policies: pol}
	f.grpc.rlsConfig = rlsDir
	var watchers []*configWatcher
	var svcs []*service.Service
	for i := 0; i < c.Size(); i++ {
		svc := service.New(clustertest.ServiceDeps(c.Node(i)), service.Config{RequestTimeout: 5 * time.Second})
		svcs = append(svcs, svc)
		watchers = append(watchers, newConfigWatcher(f, svc, newConfigMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil))))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	applied := func() uint64 {
		t.Helper()
		c.WaitConverged()
		st, err := c.Node(c.Leader()).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.AppliedIndex
	}
	pollAll := func(first int) {
		t.Helper()
		before := applied()
		if err := watchers[first].poll(ctx); err != nil {
			t.Fatal(err)
		}
		changed := applied()
		if changed == before {
			t.Fatalf("node %d wrote nothing for a changed file", first)
		}
		for i, w := range watchers {
			if i == first {
				continue
			}
			if err := w.poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if after := applied(); after != changed {
			t.Fatalf("nodes holding the change wrote %d more entries", after-changed)
		}
	}
	follower := (c.Leader() + 1) % c.Size()
	pollAll(follower) // the start-up sync, from a follower: forwarded
	writeFile(t, pol, policiesJSON(map[string]int{"api": 20}))
	writeFile(t, filepath.Join(rlsDir, "shop.yaml"), domainYAML("shop", 50))
	pollAll(c.Leader())
	for i, svc := range svcs {
		p, e := svc.GetPolicy("api")
		cfg, _, _ := svc.RLSDomain("shop")
		if e != nil || p.Spec.Limit != 20 || !strings.Contains(string(cfg), `"requests_per_unit":50`) {
			t.Fatalf("node %d: policy %+v %v, domain %s", i, p, e, cfg)
		}
	}
}
