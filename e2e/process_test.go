package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/proccluster"
)

// Process-level tests: the real binary, real TCP, real kill -9.

var limitdBin string

// TestMain builds the limitd the tests start. The longest of them (crash,
// fault, snapshot, proxy, bootstrap and damage runs: 2-19 s each, most of it
// waiting on their own processes' starts, fsyncs and timeouts) call
// t.Parallel, so two run at a time after the package's other tests (issue
// 24: the suite's time on 2 cores; this package 150 -> 104 s in full). Each
// has its own temporary directories and random loopback ports
// (proccluster.FreeLoopbackAddrs) and changes no process-wide setting (no
// t.Setenv), as running beside another requires.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "limitd-bin")
	if err != nil {
		panic(err)
	}
	limitdBin = filepath.Join(dir, "limitd")
	build := []string{"build", "-o", limitdBin}
	races := func(io.Writer, string) bool { return false }
	if raceEnabled {
		// The processes run under the race detector as well; they write
		// their reports to files (the tests do not read their stderr),
		// and any report fails the run below.
		build = append(build, "-race")
		races = proccluster.ChildRaces(dir)
	}
	out, err := exec.Command("go", append(build, "github.com/limitd/limitd/cmd/limitd")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build limitd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if races(os.Stderr, "a limitd process") {
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort is a free loopback address (proccluster.FreeLoopbackAddrs).
func freePort(t testing.TB) string {
	t.Helper()
	addrs, err := proccluster.FreeLoopbackAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// proc is one limitd process (the shared proccluster.Node) bound to a test: start
// and waitReady fail the test, and the process is killed at its end.
type proc struct {
	*proccluster.Node
	t testing.TB
}

// newProc makes a node on free loopback ports with its data in a fresh
// temporary directory; join is the address of a node to join, or "".
func newProc(t testing.TB, id, join string) *proc {
	return &proc{t: t, Node: &proccluster.Node{
		ID: id, HTTPAddr: freePort(t), RaftAddr: freePort(t), DataDir: t.TempDir(),
		LogPath: filepath.Join(t.TempDir(), id+".log"), Join: join,
		Exe: limitdBin, Prefix: []string{"serve"},
	}}
}

func (p *proc) start(extra ...string) {
	p.t.Helper()
	if err := p.Node.Start(extra...); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(p.Kill)
}

func (p *proc) term() error { return p.Node.Term(15 * time.Second) }

func (p *proc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !p.Running() {
			p.t.Fatalf("%s exited: %s", p.ID, p.Logs())
		}
		if proccluster.GetReady(context.Background(), p.URL("")) == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("%s not ready after 20s; logs:\n%s", p.ID, p.Logs())
}

type decision struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

func postJSON(t testing.TB, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (p *proc) check(body string) decision {
	p.t.Helper()
	code, b := postJSON(p.t, p.URL("/v1/check"), body)
	if code != 200 {
		p.t.Fatalf("check on %s: %d %s", p.ID, code, b)
	}
	var d decision
	if err := json.Unmarshal(b, &d); err != nil {
		p.t.Fatalf("decode %s: %v", b, err)
	}
	return d
}

// The embedded default: a fresh node bootstraps itself, and a spent quota
// survives kill -9 (the decisions are in the fsynced Raft log even though the
// state database is written without fsync).
func TestProcessKill9KeepsSpentQuota(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	p := newProc(t, "solo", "")
	p.start()
	p.waitReady()
	// A fixed window with no boundary in the next 30 minutes: an hour-long
	// window aligned to the clock would reset mid-test near the hour.
	body := `{"key":"user:42","limit":{"algorithm":"fixed_window","limit":5,"window":"` + crashWindow(30*time.Minute) + `"},"cost":1}`
	for i := 0; i < 5; i++ {
		if d := p.check(body); !d.Allowed {
			t.Fatalf("request %d refused: %+v", i+1, d)
		}
	}
	p.Kill()
	p.start()
	p.waitReady()
	if d := p.check(body); d.Allowed {
		t.Fatal("6th request allowed after kill -9: the quota reset")
	}
	if !strings.Contains(p.Logs(), "unclean") {
		t.Errorf("restart after kill -9 did not report an unclean stop; logs:\n%s", p.Logs())
	}
	// A clean stop and start keeps it too, without a rebuild.
	if err := p.term(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.Logs())
	}
	p.start()
	p.waitReady()
	if d := p.check(body); d.Allowed {
		t.Fatal("request allowed after a clean restart: the quota reset")
	}
	if strings.Contains(p.Logs(), "unclean") {
		t.Errorf("clean restart reported an unclean stop; logs:\n%s", p.Logs())
	}
}

func TestProcessCorruptDataDirFailsLoudly(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	p := newProc(t, "c", "")
	p.start()
	p.waitReady()
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.DataDir, "fsm.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	err := p.Wait()
	if err == nil {
		t.Fatalf("started on a corrupted state database; logs:\n%s", p.Logs())
	}
	if !strings.Contains(p.Logs(), path) {
		t.Fatalf("error does not name the corrupted file %s:\n%s", path, p.Logs())
	}
}

func TestProcessHelpDocumentsFlags(t *testing.T) {
	out, err := exec.Command(limitdBin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, flag := range []string{"--node-id", "--http-addr", "--raft-addr", "--data-dir", "--join", "--admin-token", "--tls-cert", "--policies", "LIMITD_"} {
		if !strings.Contains(string(out), strings.TrimPrefix(flag, "-")) {
			t.Errorf("serve --help does not mention %s", flag)
		}
	}
}
