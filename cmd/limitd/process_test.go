package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process-level tests: the real binary, real TCP, real kill -9.

var limitdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "limitd-bin")
	if err != nil {
		panic(err)
	}
	limitdBin = filepath.Join(dir, "limitd")
	out, err := exec.Command("go", "build", "-o", limitdBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build limitd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is one limitd process.
type proc struct {
	t        testing.TB
	id       string
	httpAddr string
	raftAddr string
	dataDir  string
	join     string
	cmd      *exec.Cmd
	logs     *bytes.Buffer
}

func newProc(t testing.TB, id, join string) *proc {
	return &proc{t: t, id: id, httpAddr: freePort(t), raftAddr: freePort(t), dataDir: t.TempDir(), join: join}
}

func (p *proc) start(extra ...string) {
	p.t.Helper()
	args := []string{"serve", "--node-id", p.id, "--http-addr", p.httpAddr, "--raft-addr", p.raftAddr, "--data-dir", p.dataDir}
	if p.join != "" {
		args = append(args, "--join", p.join)
	}
	args = append(args, extra...)
	p.cmd = exec.Command(limitdBin, args...)
	p.logs = &bytes.Buffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { p.kill() })
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

func (p *proc) term() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		p.kill()
		return fmt.Errorf("%s did not stop on SIGTERM", p.id)
	}
}

func (p *proc) url(path string) string { return procScheme + "://" + p.httpAddr + path }

func (p *proc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p.cmd.ProcessState != nil {
			p.t.Fatalf("%s exited: %s", p.id, p.logs)
		}
		resp, err := http.Get(p.url("/readyz"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("%s not ready after 20s; logs:\n%s", p.id, p.logs)
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
	code, b := postJSON(p.t, p.url("/v1/check"), body)
	if code != 200 {
		p.t.Fatalf("check on %s: %d %s", p.id, code, b)
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
	p := newProc(t, "solo", "")
	p.start()
	p.waitReady()
	const body = `{"key":"user:42","limit":{"algorithm":"fixed_window","limit":5,"window":"1h"},"cost":1}`
	for i := 0; i < 5; i++ {
		if d := p.check(body); !d.Allowed {
			t.Fatalf("request %d refused: %+v", i+1, d)
		}
	}
	p.kill()
	p.start()
	p.waitReady()
	if d := p.check(body); d.Allowed {
		t.Fatal("6th request allowed after kill -9: the quota reset")
	}
	if !strings.Contains(p.logs.String(), "unclean") {
		t.Errorf("restart after kill -9 did not report an unclean stop; logs:\n%s", p.logs)
	}
	// A clean stop and start keeps it too, without a rebuild.
	if err := p.term(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.logs)
	}
	p.start()
	p.waitReady()
	if d := p.check(body); d.Allowed {
		t.Fatal("request allowed after a clean restart: the quota reset")
	}
	if strings.Contains(p.logs.String(), "unclean") {
		t.Errorf("clean restart reported an unclean stop; logs:\n%s", p.logs)
	}
}

func TestProcessCorruptDataDirFailsLoudly(t *testing.T) {
	p := newProc(t, "c", "")
	p.start()
	p.waitReady()
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.dataDir, "fsm.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	err := p.cmd.Wait()
	if err == nil {
		t.Fatalf("started on a corrupted state database; logs:\n%s", p.logs)
	}
	if !strings.Contains(p.logs.String(), path) {
		t.Fatalf("error does not name the corrupted file %s:\n%s", path, p.logs)
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
