package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testtool"
)

// Disk full on a real file system (a 24 MiB tmpfs, so the Raft WAL cannot
// create its second 16 MiB segment): clients get 200 or 503, never 500; the
// node stops with status 1 and a message naming the cause instead of cycling
// through elections; once space is freed, a restart recovers it.
func TestProcessDiskFullStopsThenRecoversOnRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a tmpfs: not in -short")
	}
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if out, err := exec.Command("mkdir", "-p", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt).CombinedOutput(); err != nil {
		testtool.Missing(t, "cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })

	p := newProc(t, "full", "")
	p.DataDir = filepath.Join(mnt, "data")
	p.start("--min-free-disk-mib", "0") // the full disk itself, not the guard that keeps it from filling
	p.waitReady()
	// Peeks (cost 0) of long keys: every request adds about 1 MB to the Raft
	// log and nothing to the state database.
	var checks []string
	for i := 0; i < 1000; i++ {
		checks = append(checks, fmt.Sprintf(`{"key":"k%d-%s","cost":0,"limit":{"algorithm":"fixed_window","limit":5,"window":"1h"}}`, i, strings.Repeat("x", 900)))
	}
	body := `{"checks":[` + strings.Join(checks, ",") + `]}`
	exited := make(chan error, 1)
	go func() { exited <- p.Wait() }()
	var codes []int
	var exitErr error
loop:
	for i := 0; i < 60; i++ {
		select {
		case exitErr = <-exited:
			break loop
		default:
		}
		resp, err := httpPost(p.URL("/v1/check/batch"), body)
		if err != nil {
			continue // the node went away mid-request
		}
		codes = append(codes, resp.code)
		if resp.code != 200 && resp.code != 503 {
			t.Fatalf("request %d on a filling disk: %d %s", i, resp.code, resp.body)
		}
		if resp.code == 503 {
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if json.Unmarshal([]byte(resp.body), &e); e.Error.Code != "unavailable" && e.Error.Code != "outcome_unknown" {
				t.Fatalf("503 with code %q: %s", e.Error.Code, resp.body)
			}
		}
	}
	if exitErr == nil {
		select {
		case exitErr = <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("node still running on a full disk after %d requests (codes %v); logs:\n%s", len(codes), codes, p.Logs())
		}
	}
	if ee, ok := exitErr.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit on a full disk: %v, want status 1; logs:\n%s", exitErr, p.Logs())
	}
	logs := p.Logs()
	if !strings.Contains(logs, "no space left on device") || !strings.Contains(logs, "fatal:") {
		t.Fatalf("logs do not name the cause:\n%s", logs)
	}
	if n := strings.Count(logs, "starting election"); n > 2 {
		t.Fatalf("%d elections on a full disk:\n%s", n, logs)
	}

	// Free space (grow the file system) and restart: the node recovers.
	if out, err := exec.Command("mount", "-o", "remount,size=96m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	p.start("--min-free-disk-mib", "0") // the full disk itself, not the guard that keeps it from filling
	p.waitReady()
	if d := p.check(`{"key":"after","limit":{"algorithm":"fixed_window","limit":5,"window":"1h"}}`); !d.Allowed {
		t.Fatalf("after restart: %+v", d)
	}
}

type httpResult struct {
	code int
	body string
}

func httpPost(url, body string) (httpResult, error) {
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	return httpResult{resp.StatusCode, string(b[:n])}, nil
}
