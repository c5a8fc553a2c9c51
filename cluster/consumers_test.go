package cluster_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/backup"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/service"
)

// The interfaces the layers above define for what they need of the node
// (consumer-defined, so that service does not import cluster), each checked
// against the cluster type that provides it: service.Deps has one field per
// capability, and a failure here names the one a changed signature broke
// (the over-limit cache, leases, ...).
var (
	_ service.Node          = (*cluster.Node)(nil)      // checks, key resets, membership, status, readiness
	_ service.LeaderLocator = (*cluster.Node)(nil)      // the Limitd-Leader hint (leader.go)
	_ service.Leaser        = (*cluster.Node)(nil)      // quota leases and their hook (lease.go)
	_ service.Degrader      = (*cluster.Node)(nil)      // degraded mode: the charge and the voters (degraded.go)
	_ service.Refuser       = (*cluster.OverLimit)(nil) // the over-limit cache (overlimit.go)
	_ service.Policies      = (*cluster.Catalog)(nil)   // policies (service.go)
	_ service.Plans         = (*cluster.Catalog)(nil)   // plans, rules, assignments, overrides (plans.go)
	_ service.Domains       = (*cluster.Catalog)(nil)   // Envoy RLS domains (rls.go)
	_ service.Lists         = (*cluster.Catalog)(nil)   // allow and deny lists (lists.go)
	_ service.Bans          = (*cluster.Catalog)(nil)   // bans: the read path and unban (lists.go)
	_ service.Inventory     = (*cluster.Catalog)(nil)   // GET /v1/keys, the usage inventory (inventory.go)
	_ service.Digester      = (*cluster.Catalog)(nil)   // GET /v1/cluster/digest (status.go)
	_ service.Backuper      = (*backup.Taker)(nil)      // GET /v1/cluster/snapshot (Node.Backups)
	_ service.Alerts        = (*cluster.Catalog)(nil)   // webhooks, the outbox, the event stream (webhooks.go)
	_ service.UsageHistory  = (*cluster.Catalog)(nil)   // GET /v1/usage, /v1/usage/export (usage.go)
)

var _ api.Store = (*cluster.Node)(nil) // /healthz: whether the node can serve at all

// TestConsumersServiceDepsComplete: the harness's wiring (the daemon's, in
// internal/daemon/frontends.go) gives service.New every capability; New
// panics on a nil one.
func TestConsumersServiceDepsComplete(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	service.New(clustertest.ServiceDeps(c.Node(0)), service.Config{})
}

// maxNodeMethods bounds the methods (exported and unexported) on *Node in
// the package's non-test files: half of the 109 it once had.
const maxNodeMethods = 54

// TestNodeMethodBound: *cluster.Node keeps proposing, membership, leases
// and its own lifecycle; every other job is a type of its own that holds
// only what it needs.
func TestNodeMethodBound(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "cluster" {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Node" {
					methods = append(methods, fd.Name.Name)
				}
			}
		}
	}
	if len(methods) == 0 {
		t.Fatal("found no methods on *Node: is the package still named cluster?")
	}
	if len(methods) > maxNodeMethods {
		sort.Strings(methods)
		t.Fatalf("*cluster.Node has %d methods, at most %d (%s).\n"+
			"New cluster-wide configuration (policies, plans, lists, domains, bans, ...) goes on Catalog (catalog.go), proposed through c.propose; "+
			"a self-contained job (like discovery, promotions, diskWatch, vitals, OverLimit) gets a type of its own holding only what it needs; "+
			"a new capability the service uses is an interface in service, a field of service.Deps, and checked above.",
			len(methods), maxNodeMethods, strings.Join(methods, ", "))
	}
}
