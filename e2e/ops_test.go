package e2e

// The procedures of docs/OPERATIONS.md, step by step, on real processes on
// loopback: add a node, remove one, replace one with a new id and data
// directory, restore from a snapshot, and a rolling restart of all three
// nodes under load with no acknowledged decision lost.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/proccluster"
)

// opsCluster starts three nodes n1..n3 (n1 bootstraps) of the real binary.
func opsCluster(t *testing.T) *proccluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	old := proccluster.Serve
	proccluster.Serve = func() (string, []string, error) { return limitdBin, []string{"serve"}, nil }
	defer func() { proccluster.Serve = old }()
	c, err := proccluster.Start(context.Background(), t.TempDir(), []string{"n1", "n2", "n3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

// opsNode is a new node for c on free loopback ports, joining through join.
func opsNode(t *testing.T, c *proccluster.Cluster, id, join string) *proccluster.Node {
	t.Helper()
	ports, err := proccluster.FreeLoopbackAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	nd := &proccluster.Node{ID: id, HTTPAddr: ports[0], RaftAddr: ports[1], Join: join,
		DataDir: filepath.Join(c.Dir, id), LogPath: filepath.Join(c.Dir, id+".log"),
		Exe: limitdBin, Prefix: []string{"serve"}}
	c.Nodes = append(c.Nodes, nd) // stopped with the cluster
	return nd
}

// limitdCLI runs `limitd ARGS...` and returns its output, failing the test on a
// non-zero exit.
func limitdCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(limitdBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("limitd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitMembers waits until every node in nodes is ready and the cluster
// lists members members.
func waitMembers(t *testing.T, c *proccluster.Cluster, nodes []*proccluster.Node, members int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, nodes, members); err != nil {
		t.Fatalf("%v%s", err, c.LogTails(20))
	}
}

// spend checks key once against a fixed window of 1,000,000 per hour
// through nd, retrying with the same request_id (on any node) until it is
// decided; it returns whether the check was allowed.
func spend(t *testing.T, nodes []*proccluster.Node, key, requestID string) bool {
	body := fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"},"request_id":%q}`, key, requestID)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		nd := nodes[i%len(nodes)]
		resp, err := http.Post(nd.URL("/v1/check"), "application/json", strings.NewReader(body))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				var d decision
				if err := json.Unmarshal(b, &d); err != nil {
					t.Errorf("decode %s: %v", b, err)
					return false
				}
				return d.Allowed
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("request %s was not decided within 30 s", requestID)
	return false
}

// remaining peeks key's remaining quota (cost 0) through nd.
func remaining(t *testing.T, nd *proccluster.Node, key string) int64 {
	t.Helper()
	code, b := postJSON(t, nd.URL("/v1/check"), fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"},"cost":0}`, key))
	if code != 200 {
		t.Fatalf("peek %s on %s: %d %s", key, nd.ID, code, b)
	}
	var d decision
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// OPERATIONS.md, "Add a node": start it with --join; it is a voter once
// ready, and serves decisions made before it joined.
func TestOpsAddNode(t *testing.T) {
	c := opsCluster(t)
	for i := 0; i < 5; i++ {
		spend(t, c.Nodes, "add", fmt.Sprint("add-", i))
	}
	n4 := opsNode(t, c, "n4", c.Nodes[0].URL(""))
	if err := n4.Start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.Nodes, 4)
	if got := remaining(t, n4, "add"); got != 1000000-5 {
		t.Fatalf("n4 sees %d remaining, want %d", got, 1000000-5)
	}
	if out := limitdCLI(t, "cluster", "members", "--addr", n4.HTTPAddr); !strings.Contains(out, "n4") {
		t.Fatalf("members lists no n4:\n%s", out)
	}
}

// OPERATIONS.md, "Remove a node": `limitd cluster remove ID`; the removed
// node exits 0 by itself, and the other two keep deciding.
func TestOpsRemoveNode(t *testing.T) {
	c := opsCluster(t)
	n3 := c.Nodes[2]
	limitdCLI(t, "cluster", "remove", "n3", "--addr", c.Nodes[0].HTTPAddr)
	if exited, err := n3.WaitTimeout(20 * time.Second); !exited || err != nil {
		t.Fatalf("removed n3: exited %v, err %v (want exit 0)%s", exited, err, c.LogTails(10))
	}
	rest := c.Nodes[:2]
	waitMembers(t, c, rest, 2)
	if !spend(t, rest, "remove", "r1") {
		t.Fatal("check refused after the removal")
	}
}

// OPERATIONS.md, "Replace a node": stop it, remove it, start the
// replacement with a new id and an empty data directory; it catches up
// (spent quota included) and the cluster is back to three voters.
func TestOpsReplaceNode(t *testing.T) {
	c := opsCluster(t)
	for i := 0; i < 7; i++ {
		spend(t, c.Nodes, "replace", fmt.Sprint("rep-", i))
	}
	old := c.Nodes[2]
	if err := old.Term(proccluster.StopTimeout); err != nil {
		t.Fatal(err)
	}
	limitdCLI(t, "cluster", "remove", "n3", "--addr", c.Nodes[0].HTTPAddr)
	c.Nodes = c.Nodes[:2]
	n5 := opsNode(t, c, "n5", c.Nodes[1].URL(""))
	if err := n5.Start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.Nodes, 3)
	out := limitdCLI(t, "cluster", "members", "--addr", n5.HTTPAddr, "--output", "json")
	if !strings.Contains(out, `"n5"`) || strings.Contains(out, `"n3"`) {
		t.Fatalf("members after the replacement: %s", out)
	}
	if got := remaining(t, n5, "replace"); got != 1000000-7 {
		t.Fatalf("n5 sees %d remaining, want %d", got, 1000000-7)
	}
}

// OPERATIONS.md, "Rolling restart (and upgrade)": restart each node in
// turn, waiting for it to be ready, while clients check with request_ids
// and retry on 503. Every acknowledged decision is kept: the quota spent is
// exactly the number of allowed answers.
func TestOpsRollingRestartLosesNoDecision(t *testing.T) {
	c := opsCluster(t)
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Rotate the first node tried, so that some requests meet the
				// node being restarted.
				nodes := append(append([]*proccluster.Node(nil), c.Nodes[(i+w)%3:]...), c.Nodes[:(i+w)%3]...)
				if spend(t, nodes, "rolling", fmt.Sprintf("w%d-%d", w, i)) {
					acked.Add(1)
				}
			}
		}(w)
	}
	for _, nd := range c.Nodes {
		before := acked.Load()
		if err := nd.Term(proccluster.StopTimeout); err != nil {
			t.Fatalf("stop %s: %v", nd.ID, err)
		}
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
		waitMembers(t, c, c.Nodes, 3)
		// Traffic went on: at least some checks were decided meanwhile.
		deadline := time.Now().Add(10 * time.Second)
		for acked.Load() == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	n := acked.Load()
	if n == 0 {
		t.Fatal("no check was decided during the rolling restart")
	}
	for _, nd := range c.Nodes {
		if got := remaining(t, nd, "rolling"); got != 1000000-n {
			t.Errorf("%s: %d remaining after %d acknowledged checks, want %d", nd.ID, got, n, 1000000-n)
		}
	}
	t.Logf("%d checks acknowledged across the rolling restart of 3 nodes", n)
}

// OPERATIONS.md, "Restore from a snapshot": save from the running cluster,
// restore into a fresh data directory, start that node alone, grow it with
// --join; the spent quota is there.
func TestOpsRestoreFromSnapshot(t *testing.T) {
	c := opsCluster(t)
	for i := 0; i < 9; i++ {
		spend(t, c.Nodes, "restore", fmt.Sprint("rs-", i))
	}
	file := filepath.Join(t.TempDir(), "limitd.snap")
	limitdCLI(t, "snapshot", "save", file, "--addr", c.Nodes[0].HTTPAddr)
	limitdCLI(t, "snapshot", "inspect", file)
	if err := c.StopNodes(); err != nil {
		t.Fatal(err)
	}

	d := &proccluster.Cluster{Dir: t.TempDir()}
	t.Cleanup(func() { d.StopNodes() })
	r1 := opsNode(t, d, "r1", "")
	limitdCLI(t, "snapshot", "restore", file, "--data-dir", r1.DataDir, "--node-id", "r1", "--raft-addr", r1.RaftAddr)
	if err := r1.Start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, d, d.Nodes, 1)
	// The restored directory is named for what it is, at info: a directory
	// with Raft state and no incarnation is a restore, the one case that
	// keeps its vote, not a legacy directory and not a warning.
	restored := false
	for _, l := range strings.Split(r1.Logs(), "\n") {
		if strings.Contains(l, "data directory restored from a backup") {
			restored = true
		}
		if strings.Contains(l, "incarnation") && (strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") || strings.Contains(l, "predates")) {
			t.Errorf("the restored node's log: %s", l)
		}
	}
	if !restored {
		t.Errorf("the restored node does not say its directory was restored from a backup:\n%s", r1.Logs())
	}
	r2 := opsNode(t, d, "r2", r1.URL(""))
	r3 := opsNode(t, d, "r3", r1.URL(""))
	for _, nd := range []*proccluster.Node{r2, r3} {
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, d, d.Nodes, 3)
	for _, nd := range d.Nodes {
		if got := remaining(t, nd, "restore"); got != 1000000-9 {
			t.Errorf("%s: %d remaining after the restore, want %d", nd.ID, got, 1000000-9)
		}
	}
}

// The deploy files make nodes advertise DNS names (compose service names,
// Kubernetes pod names): a cluster whose nodes advertise "localhost" forms,
// keeps the names (not the IPs they resolved to) in its configuration, and
// serves on after a restart. (That a new IP behind the name is found again
// follows from dialing the name; loopback cannot move a node's IP.)
func TestOpsNodesAdvertiseNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	c := &proccluster.Cluster{Dir: t.TempDir()}
	t.Cleanup(func() { c.StopNodes() })
	named := func(nd *proccluster.Node) []string {
		_, hp, _ := strings.Cut(nd.HTTPAddr, ":")
		_, rp, _ := strings.Cut(nd.RaftAddr, ":")
		return []string{"--http-advertise", "localhost:" + hp, "--raft-advertise", "localhost:" + rp}
	}
	n1 := opsNode(t, c, "n1", "")
	if err := n1.Start(named(n1)...); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.Nodes, 1)
	_, h1, _ := strings.Cut(n1.HTTPAddr, ":")
	for _, id := range []string{"n2", "n3"} {
		nd := opsNode(t, c, id, "http://localhost:"+h1)
		if err := nd.Start(named(nd)...); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, c, c.Nodes, 3)
	out := limitdCLI(t, "cluster", "members", "--addr", n1.HTTPAddr, "--output", "json")
	if strings.Count(out, `"localhost:`) < 3 || strings.Contains(out, `"127.0.0.1:`) {
		t.Fatalf("members do not carry the advertised names:\n%s", out)
	}
	for i := 0; i < 3; i++ {
		spend(t, c.Nodes, "names", fmt.Sprint("nm-", i))
	}
	// Restart n1 (the leader first hands leadership over).
	if err := n1.Term(proccluster.StopTimeout); err != nil {
		t.Fatal(err)
	}
	if err := n1.Start(named(n1)...); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.Nodes, 3)
	if got := remaining(t, n1, "names"); got != 1000000-3 {
		t.Fatalf("n1 sees %d remaining after its restart, want %d", got, 1000000-3)
	}
}
