package proccluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testtool"
)

func TestParseCPUStat(t *testing.T) {
	st, err := parseCPUStat("nr_periods 185\nnr_throttled 183\nthrottled_time 1613637398\nnr_bursts 0\nburst_time 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUStat{Periods: 185, Throttled: 183, ThrottledTime: 1613637398}); st != want {
		t.Fatalf("parsed %+v, want %+v", st, want)
	}
	if d := st.Sub(CPUStat{Periods: 85, Throttled: 3, ThrottledTime: 13637398}); d != (CPUStat{100, 180, 1600000000}) {
		t.Fatalf("Sub: %+v", d)
	}
	for _, bad := range []string{"nr_periods 1\nnr_throttled 2\n", "nr_periods x\nnr_throttled 2\nthrottled_time 3"} {
		if _, err := parseCPUStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// needCPUGroups skips (fails under CI) where cgroup v1 cpu groups cannot be
// made: the budgets are the point of the tests that call it.
func needCPUGroups(t *testing.T) {
	t.Helper()
	if err := CPUGroupsSupported(); err != nil {
		testtool.Missing(t, "CPU budgets: %v", err)
	}
}

// The budget holds a process that wants a whole CPU to its quota: a busy
// loop under 0.1 CPU shows throttled periods in cpu.stat, and its CPU time
// never exceeds the quota of the periods it ran in (plus one period).
func TestNodeUnderCPUBudgetIsThrottled(t *testing.T) {
	needCPUGroups(t)
	g, err := NewCPUGroup(GroupRunName()+"-test", 0.1, DefaultCPUPeriod)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(g.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("group %s left behind: %v", g.Path, err)
		}
	}()
	if err := g.SetShares(1); err == nil {
		t.Error("cpu.shares 1 accepted")
	}
	if err := g.SetShares(4096); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"cpu.cfs_period_us": "10000", "cpu.cfs_quota_us": "1000", "cpu.shares": "4096"} {
		b, err := os.ReadFile(filepath.Join(g.Path, file))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}
	dir := t.TempDir()
	nd := &Node{ID: "busy", DataDir: dir, LogPath: filepath.Join(dir, "log"), Exe: "/bin/sh",
		Prefix: []string{"-c", "while :; do :; done"}, CPUGroup: g}
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	defer nd.Kill()
	if in, err := CPUGroupOf(nd.PID()); err != nil || in != "/"+filepath.Base(g.Path) {
		t.Fatalf("the node is in cpu group %q (%v), want /%s", in, err, filepath.Base(g.Path))
	}
	// Wait for throttling, bounded; on a box so loaded that the loop never
	// got its 1 ms of a period this would say so rather than pass.
	var st CPUStat
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err = g.Stat(); err != nil {
			t.Fatal(err)
		}
		if st.Throttled >= 20 {
			break
		}
	}
	if st.Throttled < 20 || st.ThrottledTime <= 0 {
		t.Fatalf("a busy loop under 0.1 CPU: %+v, want throttled periods", st)
	}
	// The quota is per period: no more than 1 ms of CPU in any period it ran
	// in. Measured over an interval that starts once the loop is throttled,
	// so the CPU it had before it joined the group (the start writes its pid
	// to the group after the fork) is not counted against the quota.
	cpu0, p0 := processCPU(t, nd.PID()), st.Periods
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err = g.Stat(); err != nil {
			t.Fatal(err)
		}
		if st.Periods >= p0+20 {
			break
		}
	}
	cpu := processCPU(t, nd.PID()) - cpu0
	st, _ = g.Stat()
	if n := st.Periods - p0; cpu > time.Duration(n+2)*time.Millisecond+5*time.Millisecond {
		t.Errorf("the loop used %s of CPU in %d periods of 1 ms quota each", cpu, n)
	}
	nd.Kill()
	// Remove (deferred) succeeds once the process is gone.
}

// A cluster's nodes each get a group of their own, named after the run,
// GOMAXPROCS 1 by default, and Stop removes the groups; a start that fails
// removes them too.
func TestClusterCPUGroups(t *testing.T) {
	needCPUGroups(t)
	old := Serve
	t.Cleanup(func() { Serve = old })
	// A node that never becomes ready: StartOpts fails after starting it.
	Serve = func() (string, []string, error) { return "/bin/sh", []string{"-c", "sleep 30"}, nil }
	oldTimeout := StartTimeout
	StartTimeout = 300 * time.Millisecond
	t.Cleanup(func() { StartTimeout = oldTimeout })
	before := groupsOfThisProcess(t)
	if _, err := StartOpts(t.Context(), t.TempDir(), []string{"a", "b"}, Options{NodeCPU: 0.25}); err == nil {
		t.Fatal("a node that is never ready: started")
	}
	if after := groupsOfThisProcess(t); len(after) != len(before) {
		t.Errorf("groups left after a failed start: %v", after)
	}
}

// groupsOfThisProcess lists the cpu groups named after this process's runs.
func groupsOfThisProcess(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(CgroupCPURoot, fmt.Sprintf("limitd-%d-*", os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// processCPU is utime + stime of pid, from /proc/PID/stat in USER_HZ
// ticks (100 per second on Linux's common architectures).
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime and stime: fields 14 and 15
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}
