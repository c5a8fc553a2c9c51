package service_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/limitd/limitd/"

// The service and the front ends reach the cluster only through the Node
// interface service defines: none of them imports cluster (or anything
// under it), directly or through another package of ours, nor the Raft log
// stores it wraps. Nor do they reach hashicorp/raft or bbolt by any path:
// the values they exchange with the node are nodeapi's, so that a front end
// builds, and can be reasoned about, without the replication and storage
// underneath. nodeapi, the leaf they share with cluster and fsm, imports
// only algo (pure functions and value types that import nothing of ours;
// the contract's Check, Decision and Policy carry algo's Spec, Decision and
// Lease), and lease, the node's lease runtime, only algo and nodeapi.
// Checked with go list -deps over the non-test imports, as
// `go list -f '{{.Imports}}' ./service ./api ./grpcapi` would show them.
func TestServiceAndFrontEndsDoNotImportCluster(t *testing.T) {
	imports := goListDeps(t, module+"service", module+"api", module+"grpcapi")
	for _, root := range []string{"service", "api", "grpcapi"} {
		for pkg, path := range reachable(imports, module+root) {
			if pkg == module+"cluster" || strings.HasPrefix(pkg, module+"cluster/") ||
				strings.Contains(pkg, "raft-wal") || strings.Contains(pkg, "raft-boltdb") {
				t.Errorf("%s imports %s (via %s): reach the cluster through service.Node", root, pkg, path)
			}
			if pkg == "github.com/hashicorp/raft" || strings.HasPrefix(pkg, "github.com/hashicorp/raft/") ||
				pkg == "go.etcd.io/bbolt" || strings.HasPrefix(pkg, "go.etcd.io/bbolt/") {
				t.Errorf("%s imports %s (via %s): exchange nodeapi's values with the node, not fsm's", root, pkg, path)
			}
		}
	}
	// What each leaf may import of ours: hashslot, the key-to-slot rule and
	// the slot map, nothing (the client routes by it and must stay light); lease, the node's lease runtime,
	// holds no replicated state, so it stays below fsm and cluster; wire, the
	// HTTP JSON schema, is shared with the client, which must stay light.
	allowed := map[string][]string{"algo": nil, "hashslot": nil, "nodeapi": {"algo", "hashslot"}, "lease": {"algo", "nodeapi"}, "wire": {"algo"}}
	leaf := goListDeps(t, module+"nodeapi", module+"algo", module+"hashslot", module+"lease", module+"wire")
	for pkg, may := range allowed {
		for _, imp := range leaf[module+pkg] {
			if strings.HasPrefix(imp, module) && !slices.Contains(may, strings.TrimPrefix(imp, module)) {
				t.Errorf("%s imports %s: it may import only %v of limitd's", pkg, imp, may)
			}
		}
	}
}

// TestClientStaysLight fails if the Go client reaches, by any import path,
// the server's replication, storage or gRPC (through wire, say): an
// application that imports the client must not build those.
func TestClientStaysLight(t *testing.T) {
	imports := goListDeps(t, module+"client")
	for pkg, path := range reachable(imports, module+"client") {
		for _, heavy := range []string{"github.com/hashicorp/raft", "go.etcd.io/bbolt", "google.golang.org/grpc", module + "cluster", module + "fsm", module + "persist"} {
			if pkg == heavy || strings.HasPrefix(pkg, heavy+"/") {
				t.Errorf("client imports %s (via %s)", pkg, path)
			}
		}
	}
}

// goListDeps returns each package's direct imports, for pkgs and everything
// they depend on.
func goListDeps(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	// go test puts its own GOROOT/bin first in the test's PATH.
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, pkgs...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		m[f[0]] = f[1:]
	}
	if len(m) == 0 {
		t.Fatal("go list listed no packages")
	}
	return m
}

// reachable maps every package root depends on to the import path from root.
func reachable(imports map[string][]string, root string) map[string]string {
	seen := map[string]string{root: root}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range imports[p] {
			if _, ok := seen[imp]; !ok {
				seen[imp] = seen[p] + " → " + imp
				queue = append(queue, imp)
			}
		}
	}
	return seen
}
