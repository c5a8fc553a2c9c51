package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/internal/cli"
	"github.com/limitd/limitd/internal/testtool"
)

// noonZone is an IANA zone where it is about noon now, so a daily quota in
// it does not roll over during the test.
func noonZone(t *testing.T) string {
	n := time.Now().UTC().Hour() - 12
	if n > 12 {
		n -= 24
	}
	if n < -14 {
		n += 24
	}
	z := fmt.Sprintf("Etc/GMT%+d", n) // Etc/GMT+N is N hours behind UTC
	if _, err := time.LoadLocation(z); err != nil {
		testtool.Missing(t, "time zone %s not available: %v", z, err)
	}
	return z
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runCommand(args, cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	return code, stdout.String(), stderr.String()
}

// Backup and restore round trip at process level: save from a loaded 3-node
// cluster with `limitd snapshot save`, check the file's digest equals the
// source's at the snapshot's index, stop the cluster, `limitd snapshot
// restore` into a new directory as n1, start it: its /v1/cluster/digest
// equals the source's, a daily quota continues where it was, a request_id
// is still remembered, and the cluster grows again by a join. Damaged and
// truncated files are refused with a clear message and leave nothing behind.
func TestProcessSnapshotRoundTrip(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	if testing.Short() {
		t.Skip("starts a 3-node process cluster")
	}
	zone := noonZone(t)
	procs := startCrashCluster(t, crashFlags...)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.HTTPAddr)
	}
	c, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const daily = 1000
	if _, err := c.PutPolicy(ctx, client.Policy{Name: "daily", Limit: client.Limit{Algorithm: "fixed_window", Limit: daily, Calendar: "day", Timezone: zone}}); err != nil {
		t.Fatal(err)
	}
	// Load: 50 keys through the coalescing client, then a quota spent 37
	// times and one check with a known request_id.
	done := make(chan error, 8)
	for w := 0; w < 8; w++ {
		go func(w int) {
			for i := 0; i < 250; i++ {
				if _, err := c.Check(ctx, client.Request{Key: fmt.Sprintf("load:%d", (w*250+i)%50), Policy: "daily"}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}(w)
	}
	for w := 0; w < 8; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 37; i++ {
		if _, err := c.Check(ctx, client.Request{Key: "quota", Policy: "daily"}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := c.Check(ctx, client.Request{Key: "order", Policy: "daily", RequestID: "order-7781"})
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "backup.limitd")
	code, out, errOut := runCLI(t, "snapshot", "save", "--addr", strings.Join(addrs, ","), file)
	if code != 0 {
		t.Fatalf("snapshot save: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(out))
	code, out, errOut = runCLI(t, "snapshot", "inspect", "--output", "json", file)
	if code != 0 {
		t.Fatalf("snapshot inspect: exit %d: %s", code, errOut)
	}
	var sum struct {
		Index      uint64   `json:"index"`
		Digest     string   `json:"digest"`
		StateIndex uint64   `json:"state_index"`
		Keys       int64    `json:"keys"`
		RequestIDs int64    `json:"request_ids"`
		Policies   []string `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	if sum.Keys != 52 || len(sum.Policies) != 1 || sum.RequestIDs < 2038 {
		t.Errorf("inspect: %d keys, policies %v, %d request ids; want 52, [daily], ≥ 2038", sum.Keys, sum.Policies, sum.RequestIDs)
	}
	// Nothing changes the state after the load: the leader's digest now is
	// its digest at the snapshot's index.
	lead, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.NodeDigest(ctx, lead.LeaderHTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	if src.Digest != sum.Digest || src.AppliedIndex > sum.Index {
		t.Fatalf("source digest %s at %d, backup digest %s at %d", src.Digest, src.AppliedIndex, sum.Digest, sum.Index)
	}

	// Damaged files are refused, by inspect and by restore, which leaves no
	// data behind.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x40
	headerFlipped := append([]byte(nil), data...)
	headerFlipped[20] ^= 0x01
	for _, bad := range []struct {
		name, want string
		data       []byte
	}{
		{"truncated", "truncated", data[:len(data)-100]},
		{"truncated-header", "truncated header", data[:10]},
		{"flipped", "checksum mismatch", flipped},
		{"header-flipped", "header checksum mismatch", headerFlipped},
		{"not-a-backup", "not a limitd backup", []byte("hello, this is not a backup at all")},
	} {
		path := filepath.Join(t.TempDir(), bad.name)
		if err := os.WriteFile(path, bad.data, 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, "snapshot", "inspect", path)
		if code != cli.ExitError || !strings.Contains(errOut, bad.want) {
			t.Errorf("inspect %s: exit %d, %q; want exit %d mentioning %q", bad.name, code, errOut, cli.ExitError, bad.want)
		}
		dir := filepath.Join(t.TempDir(), "data")
		code, _, errOut = runCLI(t, "snapshot", "restore", "--data-dir", dir, "--node-id", "x", "--raft-addr", "127.0.0.1:1", path)
		if code != cli.ExitError || !strings.Contains(errOut, bad.want) {
			t.Errorf("restore %s: exit %d, %q; want exit %d mentioning %q", bad.name, code, errOut, cli.ExitError, bad.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("restore %s left %d entries in the data dir", bad.name, len(entries))
		}
	}

	// The source cluster is lost; restore n1 from the backup, same identity.
	for _, p := range procs {
		if err := p.term(); err != nil {
			t.Logf("stop %s: %v", p.ID, err)
		}
	}
	n1 := procs[0]
	restored := newProc(t, n1.ID, "")
	restored.HTTPAddr, restored.RaftAddr, restored.DataDir = n1.HTTPAddr, n1.RaftAddr, filepath.Join(t.TempDir(), "restored")
	code, out, errOut = runCLI(t, "snapshot", "restore", "--data-dir", restored.DataDir, "--node-id", n1.ID, "--raft-addr", n1.RaftAddr, file)
	if code != 0 {
		t.Fatalf("snapshot restore: exit %d: %s%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "snapshot", "restore", "--data-dir", restored.DataDir, "--raft-addr", n1.RaftAddr, file)
	if code != cli.ExitError || !strings.Contains(errOut, "not empty") {
		t.Errorf("restore into a used data dir: exit %d, %q", code, errOut)
	}
	restored.start(crashFlags...)
	restored.waitReady()
	rc, err := client.New([]string{restored.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := rc.NodeDigest(ctx, restored.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	// Same identity: nothing registers, so the node reports inspect's
	// digest at inspect's state index (a reader once saw 231 against the
	// header's 232 and took it for a lost entry).
	if got.Digest != sum.Digest || got.AppliedIndex != sum.StateIndex || sum.StateIndex > sum.Index {
		t.Fatalf("restored digest %s at %d, inspect %s at state index %d (header index %d)", got.Digest, got.AppliedIndex, sum.Digest, sum.StateIndex, sum.Index)
	}
	// The daily quota continues where it was.
	d, err := rc.Peek(ctx, "quota", "daily", nil)
	if err != nil || d.Remaining != daily-37 {
		t.Fatalf("peek quota after restore: %+v %v, want remaining %d", d, err, daily-37)
	}
	d, err = rc.Check(ctx, client.Request{Key: "quota", Policy: "daily"})
	if err != nil || !d.Allowed || d.Remaining != daily-38 {
		t.Fatalf("check quota after restore: %+v %v, want remaining %d", d, err, daily-38)
	}
	// The request_id is still remembered.
	again, err := rc.Check(ctx, client.Request{Key: "order", Policy: "daily", RequestID: "order-7781"})
	if err != nil || !again.Replayed || again.Remaining != first.Remaining {
		t.Fatalf("repeat of order-7781 after restore: %+v %v, first %+v", again, err, first)
	}
	// The cluster grows by a join and converges.
	joiner := newProc(t, "n4", restored.URL(""))
	joiner.start(crashFlags...)
	joiner.waitReady()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a, errA := rc.NodeDigest(ctx, restored.HTTPAddr)
		b, errB := rc.NodeDigest(ctx, joiner.HTTPAddr)
		if errA == nil && errB == nil && a == b {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("joined node did not converge: %+v %v / %+v %v", a, errA, b, errB)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := rc.Cluster(ctx)
	if err != nil || len(st.Members) != 2 {
		t.Fatalf("cluster after join: %+v %v", st, err)
	}
}
