package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/proccluster"
)

// bootView is the part of GET /v1/cluster these tests compare.
type bootView struct {
	NodeID   string `json:"node_id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
	Members  []struct {
		ID       string `json:"id"`
		HTTPAddr string `json:"http_addr"`
		Suffrage string `json:"suffrage"`
	} `json:"members"`
}

func getView(t testing.TB, p *proc) (bootView, error) {
	t.Helper()
	var v bootView
	resp, err := http.Get(p.URL("/v1/cluster"))
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// --bootstrap-expect 3 --join a,b,c on three nodes started at once: they
// find each other, exactly one (the lowest node ID) bootstraps with all
// three as voters, and they form one cluster: one leader, three members
// with their HTTP addresses, the same term everywhere. Run with JSON logs:
// every line of every node's log is a JSON object with a level.
func TestProcessBootstrapExpectThree(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	ps := []*proc{newProc(t, "n3", ""), newProc(t, "n1", ""), newProc(t, "n2", "")}
	var join []string
	for _, p := range ps {
		join = append(join, p.HTTPAddr)
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Node.Start("--join", strings.Join(join, ","), "--bootstrap-expect", "3", "--log-format", "json"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, p := range ps {
		t.Cleanup(p.Kill)
	}
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	var views []bootView
	for {
		views = views[:0]
		ok := true
		for _, p := range ps {
			if !p.Running() {
				t.Fatalf("%s exited: %s", p.ID, p.Logs())
			}
			v, err := getView(t, p)
			if err != nil || proccluster.GetReady(context.Background(), p.URL("")) != nil || len(v.Members) != 3 || v.LeaderID == "" {
				ok = false
				break
			}
			for _, m := range v.Members {
				ok = ok && m.HTTPAddr != "" && m.Suffrage == "Voter"
			}
			views = append(views, v)
		}
		if ok && views[0].LeaderID == views[1].LeaderID && views[1].LeaderID == views[2].LeaderID &&
			views[0].Term == views[1].Term && views[1].Term == views[2].Term {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range ps {
				t.Logf("%s log:\n%s", p.ID, p.Logs())
			}
			t.Fatalf("no single 3-node cluster within 30s: %+v", views)
		}
		time.Sleep(100 * time.Millisecond)
	}
	bootstrapped := 0
	for _, p := range ps {
		if strings.Contains(p.Logs(), "bootstrapped the cluster") {
			bootstrapped++
			if p.ID != "n1" {
				t.Errorf("%s bootstrapped; the lowest node ID is n1", p.ID)
			}
		}
	}
	if bootstrapped != 1 {
		t.Errorf("%d nodes bootstrapped, want exactly 1", bootstrapped)
	}
	// Every node of a fresh cluster is a bootstrap peer: none is taken for a
	// wiped data directory and demoted (the bootstrapper waits until every
	// peer agreed).
	for _, p := range ps {
		if strings.Contains(p.Logs(), "new data directory") {
			t.Errorf("%s logged a new data directory in a fresh cluster:\n%s", p.ID, p.Logs())
		}
	}
	for _, p := range ps {
		if err := p.term(); err != nil {
			t.Errorf("stop %s: %v", p.ID, err)
		}
	}
	for _, p := range ps {
		for i, line := range strings.Split(strings.TrimSpace(p.Logs()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%s log line %d is not JSON (%v): %s", p.ID, i+1, err, line)
				continue
			}
			if _, ok := rec["level"].(string); !ok {
				t.Errorf("%s log line %d has no level: %s", p.ID, i+1, line)
			}
		}
	}
}

// A node with --join never bootstraps alone: joining an address nobody
// answers, it keeps retrying (no leader, no members) and exits with an
// error at --join-timeout; with --bootstrap-expect too it waits for peers.
func TestProcessJoinUnreachableDoesNotBootstrap(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	for _, extra := range [][]string{nil, {"--bootstrap-expect", "2"}} {
		p := newProc(t, "alone", "")
		args := append([]string{"--join", freePort(t) + "," + freePort(t), "--join-timeout", "3s"}, extra...)
		p.start(args...)
		sawServing := false
		for p.Running() {
			if v, err := getView(t, p); err == nil {
				sawServing = true
				if len(v.Members) != 0 || v.LeaderID != "" || v.State == "Leader" {
					t.Fatalf("%v: a node joining nobody formed a cluster: %+v\n%s", args, v, p.Logs())
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !sawServing {
			t.Errorf("%v: the node never answered /v1/cluster while joining:\n%s", args, p.Logs())
		}
		if err := p.Wait(); err == nil {
			t.Errorf("%v: exited 0 after failing to join:\n%s", args, p.Logs())
		}
		if !strings.Contains(p.Logs(), "join") || !strings.Contains(p.Logs(), "deadline exceeded") {
			t.Errorf("%v: the exit does not say the join timed out:\n%s", args, p.Logs())
		}
		// Nothing was written as Raft state: started again without --join,
		// the data directory bootstraps as a fresh node would.
		entries, _ := os.ReadDir(p.DataDir)
		for _, e := range entries {
			if e.Name() == "snapshots" {
				if s, _ := os.ReadDir(filepath.Join(p.DataDir, "snapshots")); len(s) > 0 {
					t.Errorf("%v: a snapshot was written: %v", args, s)
				}
			}
		}
		if strings.Contains(p.Logs(), "bootstrapped") || strings.Contains(p.Logs(), "entering leader state") {
			t.Errorf("%v: the node bootstrapped:\n%s", args, p.Logs())
		}
	}
}

// A node with an existing data directory never bootstraps again, whatever
// its flags: restarted with --join to nobody and --bootstrap-expect, it
// resumes as the member it was (no join needed, no timeout) and serves.
func TestProcessRestartWithStateDoesNotBootstrapOrJoin(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	p := newProc(t, "solo", "")
	p.start()
	p.waitReady()
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
	p.start("--join", freePort(t)+","+freePort(t), "--bootstrap-expect", "2", "--join-timeout", "1s")
	p.waitReady()
	if exited, err := p.WaitTimeout(2 * time.Second); exited {
		t.Fatalf("exited past --join-timeout although it has state (%v):\n%s", err, p.Logs())
	}
	v, err := getView(t, p)
	if err != nil || len(v.Members) != 1 || v.LeaderID != "solo" {
		t.Fatalf("after restart: %+v (%v)", v, err)
	}
	if strings.Contains(p.Logs(), "bootstrapped") || !strings.Contains(p.Logs(), "already a member") {
		t.Fatalf("restart log:\n%s", p.Logs())
	}
}
