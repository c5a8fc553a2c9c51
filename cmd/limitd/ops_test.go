package main

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
)

// opsCluster starts three nodes n1..n3 (n1 bootstraps) of the real binary.
func opsCluster(t *testing.T) *procCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	old := procServe
	procServe = func() (string, []string, error) { return limitdBin, []string{"serve"}, nil }
	defer func() { procServe = old }()
	c, err := startProcCluster(context.Background(), t.TempDir(), []string{"n1", "n2", "n3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop() })
	return c
}

// opsNode is a new node for c on free loopback ports, joining through join.
func opsNode(t *testing.T, c *procCluster, id, join string) *procNode {
	t.Helper()
	ports, err := freeLoopbackAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	nd := &procNode{id: id, httpAddr: ports[0], raftAddr: ports[1], join: join,
		dataDir: filepath.Join(c.dir, id), logPath: filepath.Join(c.dir, id+".log"),
		exe: limitdBin, prefix: []string{"serve"}}
	c.nodes = append(c.nodes, nd) // stopped with the cluster
	return nd
}

// cli runs `limitd ARGS...` and returns its output, failing the test on a
// non-zero exit.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(limitdBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("limitd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitMembers waits until every node in nodes is ready and the cluster
// lists members members.
func waitMembers(t *testing.T, c *procCluster, nodes []*procNode, members int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.waitReady(ctx, nodes, members); err != nil {
		t.Fatalf("%v%s", err, c.logTails(20))
	}
}

// spend checks key once against a fixed window of 1,000,000 per hour
// through nd, retrying with the same request_id (on any node) until it is
// decided; it returns whether the check was allowed.
func spend(t *testing.T, nodes []*procNode, key, requestID string) bool {
	body := fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"},"request_id":%q}`, key, requestID)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		nd := nodes[i%len(nodes)]
		resp, err := http.Post(nd.url("/v1/check"), "application/json", strings.NewReader(body))
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
func remaining(t *testing.T, nd *procNode, key string) int64 {
	t.Helper()
	code, b := postJSON(t, nd.url("/v1/check"), fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"fixed_window","limit":1000000,"window":"1h"},"cost":0}`, key))
	if code != 200 {
		t.Fatalf("peek %s on %s: %d %s", key, nd.id, code, b)
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
		spend(t, c.nodes, "add", fmt.Sprint("add-", i))
	}
	n4 := opsNode(t, c, "n4", c.nodes[0].url(""))
	if err := n4.start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.nodes, 4)
	if got := remaining(t, n4, "add"); got != 1000000-5 {
		t.Fatalf("n4 sees %d remaining, want %d", got, 1000000-5)
	}
	if out := cli(t, "cluster", "members", "--addr", n4.httpAddr); !strings.Contains(out, "n4") {
		t.Fatalf("members lists no n4:\n%s", out)
	}
}

// OPERATIONS.md, "Remove a node": `limitd cluster remove ID`; the removed
// node exits 0 by itself, and the other two keep deciding.
func TestOpsRemoveNode(t *testing.T) {
	c := opsCluster(t)
	n3 := c.nodes[2]
	cli(t, "cluster", "remove", "n3", "--addr", c.nodes[0].httpAddr)
	if exited, err := n3.waitTimeout(20 * time.Second); !exited || err != nil {
		t.Fatalf("removed n3: exited %v, err %v (want exit 0)%s", exited, err, c.logTails(10))
	}
	rest := c.nodes[:2]
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
		spend(t, c.nodes, "replace", fmt.Sprint("rep-", i))
	}
	old := c.nodes[2]
	if err := old.term(procStopTimeout); err != nil {
		t.Fatal(err)
	}
	cli(t, "cluster", "remove", "n3", "--addr", c.nodes[0].httpAddr)
	c.nodes = c.nodes[:2]
	n5 := opsNode(t, c, "n5", c.nodes[1].url(""))
	if err := n5.start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.nodes, 3)
	out := cli(t, "cluster", "members", "--addr", n5.httpAddr, "--output", "json")
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
				nodes := append(append([]*procNode(nil), c.nodes[(i+w)%3:]...), c.nodes[:(i+w)%3]...)
				if spend(t, nodes, "rolling", fmt.Sprintf("w%d-%d", w, i)) {
					acked.Add(1)
				}
			}
		}(w)
	}
	for _, nd := range c.nodes {
		before := acked.Load()
		if err := nd.term(procStopTimeout); err != nil {
			t.Fatalf("stop %s: %v", nd.id, err)
		}
		if err := nd.start(); err != nil {
			t.Fatal(err)
		}
		waitMembers(t, c, c.nodes, 3)
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
	for _, nd := range c.nodes {
		if got := remaining(t, nd, "rolling"); got != 1000000-n {
			t.Errorf("%s: %d remaining after %d acknowledged checks, want %d", nd.id, got, n, 1000000-n)
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
		spend(t, c.nodes, "restore", fmt.Sprint("rs-", i))
	}
	file := filepath.Join(t.TempDir(), "limitd.snap")
	cli(t, "snapshot", "save", file, "--addr", c.nodes[0].httpAddr)
	cli(t, "snapshot", "inspect", file)
	if err := c.stopNodes(); err != nil {
		t.Fatal(err)
	}

	d := &procCluster{dir: t.TempDir()}
	t.Cleanup(func() { d.stopNodes() })
	r1 := opsNode(t, d, "r1", "")
	cli(t, "snapshot", "restore", file, "--data-dir", r1.dataDir, "--node-id", "r1", "--raft-addr", r1.raftAddr)
	if err := r1.start(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, d, d.nodes, 1)
	r2 := opsNode(t, d, "r2", r1.url(""))
	r3 := opsNode(t, d, "r3", r1.url(""))
	for _, nd := range []*procNode{r2, r3} {
		if err := nd.start(); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, d, d.nodes, 3)
	for _, nd := range d.nodes {
		if got := remaining(t, nd, "restore"); got != 1000000-9 {
			t.Errorf("%s: %d remaining after the restore, want %d", nd.id, got, 1000000-9)
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
	c := &procCluster{dir: t.TempDir()}
	t.Cleanup(func() { c.stopNodes() })
	named := func(nd *procNode) []string {
		_, hp, _ := strings.Cut(nd.httpAddr, ":")
		_, rp, _ := strings.Cut(nd.raftAddr, ":")
		return []string{"--http-advertise", "localhost:" + hp, "--raft-advertise", "localhost:" + rp}
	}
	n1 := opsNode(t, c, "n1", "")
	if err := n1.start(named(n1)...); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.nodes, 1)
	_, h1, _ := strings.Cut(n1.httpAddr, ":")
	for _, id := range []string{"n2", "n3"} {
		nd := opsNode(t, c, id, "http://localhost:"+h1)
		if err := nd.start(named(nd)...); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, c, c.nodes, 3)
	out := cli(t, "cluster", "members", "--addr", n1.httpAddr, "--output", "json")
	if strings.Count(out, `"localhost:`) < 3 || strings.Contains(out, `"127.0.0.1:`) {
		t.Fatalf("members do not carry the advertised names:\n%s", out)
	}
	for i := 0; i < 3; i++ {
		spend(t, c.nodes, "names", fmt.Sprint("nm-", i))
	}
	// Restart n1 (the leader first hands leadership over).
	if err := n1.term(procStopTimeout); err != nil {
		t.Fatal(err)
	}
	if err := n1.start(named(n1)...); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, c, c.nodes, 3)
	if got := remaining(t, n1, "names"); got != 1000000-3 {
		t.Fatalf("n1 sees %d remaining after its restart, want %d", got, 1000000-3)
	}
}
