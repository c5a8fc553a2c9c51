package benchcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/bench"
	"github.com/limitd/limitd/internal/proccluster"
	"github.com/limitd/limitd/internal/testtool"
)

// needCPUGroups skips (fails under CI) where cgroup v1 cpu groups cannot be
// made.
func needCPUGroups(t *testing.T) {
	t.Helper()
	if err := proccluster.CPUGroupsSupported(); err != nil {
		testtool.Missing(t, "CPU budgets: %v", err)
	}
}

// ourGroups lists the cpu groups this test process made and left.
func ourGroups(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(proccluster.CgroupCPURoot, fmt.Sprintf("limitd-%d-*", os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cpuGroupLine is the cpu controller's line of a /proc/PID/cgroup dump.
func cpuGroupLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && strings.Contains(","+parts[1]+",", ",cpu,") {
			return parts[2]
		}
	}
	return ""
}

// --nodes with --node-cpu and --generator-cpu: every node in a group of its
// own from its start, GOMAXPROCS 1, the --serve-arg flags passed to every
// node; the report carries each budget and its CFS periods; this process
// is back in its own group and no group is left at the end.
func TestBenchNodeCPUBudgets(t *testing.T) {
	needCPUGroups(t)
	reports, tmp := useFakeNodes(t)
	home, err := proccluster.CPUGroupOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// One node: on a 2-CPU box its share would be GOMAXPROCS 2, so 1 is the budget's.
	r, stderr := runBenchJSON(t, "--nodes", "1", "--node-cpu", "0.25", "--generator-cpu", "0.5",
		"--serve-arg=--data-groups=3", "--cpu-shares", "3072", "--duration", "300ms", "--warmup", "0", "--concurrency", "4", "--keys", "50")
	for i := 1; i <= 1; i++ {
		b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.cgroup", i)))
		if g := cpuGroupLine(b); !strings.HasPrefix(g, fmt.Sprintf("/limitd-%d-", os.Getpid())) || !strings.HasSuffix(g, fmt.Sprintf("-n%d", i)) {
			t.Errorf("bench%d ran in cpu group %q, want /limitd-%d-<run>-n%d", i, g, os.Getpid(), i)
		}
		if b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.shares", i))); string(b) != "3072" {
			t.Errorf("bench%d: its group's cpu.shares %q, want --cpu-shares 3072", i, b)
		}
		if b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.procs", i))); string(b) != "1" {
			t.Errorf("bench%d: GOMAXPROCS %q, want 1 under a budget", i, b)
		}
		if b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.data-groups", i))); string(b) != "3" {
			t.Errorf("bench%d: --data-groups %q, want the --serve-arg's 3", i, b)
		}
	}
	if len(r.CPU) != 2 {
		t.Fatalf("CPU of %d processes, want the node and the generator: %+v (%s)\n%s", len(r.CPU), r.CPU, r.CPUError, stderr)
	}
	for _, p := range r.CPU {
		want := 0.25
		if p.Role == "load generator" {
			want = 0.5
		}
		if p.Budget != want || p.Throttle.Periods <= 0 {
			t.Errorf("%s %s: budget %g, %d periods; want %g and the periods it ran", p.Role, p.Name, p.Budget, p.Throttle.Periods, want)
		}
	}
	if _, n := r.BudgetedNodes(); n != 1 || r.LoadAvg <= 0 {
		t.Errorf("%d budgeted nodes, load average %g", n, r.LoadAvg)
	}
	if now, _ := proccluster.CPUGroupOf(os.Getpid()); now != home {
		t.Errorf("the bench is left in cpu group %q, was in %q", now, home)
	}
	if left := ourGroups(t); len(left) != 0 {
		t.Errorf("groups left behind: %v", left)
	}
	assertNodesGone(t, reports, tmp, 1)
}

// A real node under 0.1 CPU, closed loop: held to its budget, so most of
// its periods end throttled and the report counts it throttled.
func TestBenchRealNodeUnderBudgetIsThrottled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	needCPUGroups(t)
	useTestNodes(t, realNodeEnv)
	r, stderr := runBenchJSON(t, "--nodes", "1", "--node-cpu", "0.1", "--duration", "1s", "--warmup", "300ms",
		"--concurrency", "16", "--keys", "1000")
	if th, n := r.BudgetedNodes(); th != 1 || n != 1 {
		t.Errorf("throttled %d of %d nodes under 0.1 CPU: %+v\n%s", th, n, r.CPU, stderr)
	}
	// The quota caps what it used: 0.1 CPU per period it ran in.
	for _, p := range r.CPU {
		if p.Role != "load generator" && p.BudgetUsed(r.CPUInterval) > 1.2 {
			t.Errorf("%s used %.2f of its budget", p.Name, p.BudgetUsed(r.CPUInterval))
		}
	}
	if left := ourGroups(t); len(left) != 0 {
		t.Errorf("groups left behind: %v", left)
	}
}

// --nodes 1,2 --rounds 2: runs alternated (1, 2, 1, 2), one line each,
// then each row's medians, the second row against the first.
func TestBenchRowsAlternatedWithMedians(t *testing.T) {
	useFakeNodes(t)
	var out, errb bytes.Buffer
	if code := Main([]string{"--nodes", "1,2", "--rounds", "2", "--duration", "200ms", "--warmup", "0",
		"--concurrency", "2", "--keys", "20", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 4 runs and 2 summaries:\n%s", len(lines), out.String())
	}
	runs, err := bench.ReadJSONLines(strings.NewReader(strings.Join(lines[:4], "\n")))
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for _, r := range runs {
		order = append(order, r.Nodes)
	}
	if fmt.Sprint(order) != "[1 2 1 2]" {
		t.Errorf("runs in order %v, want alternated [1 2 1 2]", order)
	}
	if runs[0].Label != "1 nodes, http" || runs[1].Label != "2 nodes, http" {
		t.Errorf("labels %q, %q", runs[0].Label, runs[1].Label)
	}
	var sums []rowSummary
	for _, l := range lines[4:] {
		var s rowSummary
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, s)
	}
	for i, s := range sums {
		a, b := runs[i].ChecksPerSec(), runs[i+2].ChecksPerSec()
		if want := (a + b) / 2; s.Rounds != 2 || s.Nodes != i+1 || s.ChecksPerSec < want*0.999 || s.ChecksPerSec > want*1.001 {
			t.Errorf("summary %d: %+v, want 2 rounds of %d nodes at the median %.1f checks/s", i, s, i+1, want)
		}
	}
	if want := sums[1].ChecksPerSec / sums[0].ChecksPerSec; sums[1].VsFirst < want-0.001 || sums[1].VsFirst > want+0.001 || sums[0].VsFirst != 0 {
		t.Errorf("vs first: %g, %g; want -, %.3f", sums[0].VsFirst, sums[1].VsFirst, want)
	}
	if !strings.Contains(errb.String(), "round 2 of 2, 2 nodes, http") {
		t.Errorf("stderr does not say which round runs:\n%s", errb.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %g, want %g", c.in, got, c.want)
		}
	}
}

// --idle: no checks, each node's CPU over the interval; exit 0.
func TestBenchIdle(t *testing.T) {
	reports, tmp := useFakeNodes(t)
	var out, errb bytes.Buffer
	if code := Main([]string{"--nodes", "2", "--idle", "--duration", "200ms", "--warmup", "0"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "idle CPU over ") || !strings.Contains(s, "leader bench1 ") || !strings.Contains(s, "follower bench2 ") || !strings.Contains(s, "% of a core") {
		t.Errorf("idle report %q", s)
	}
	for i := 1; i <= 2; i++ {
		if b, _ := os.ReadFile(filepath.Join(reports, fmt.Sprintf("bench%d.checks", i))); string(b) != "0" {
			t.Errorf("bench%d answered %q checks in an idle run", i, b)
		}
	}
	assertNodesGone(t, reports, tmp, 2)
}

func TestBenchBudgetFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "0"}, `--nodes: "0" is not a number of nodes`},
		{[]string{"--nodes", "3", "--cluster", "3"}, "--nodes and --cluster are the same flag"},
		{[]string{"--node-cpu", "0.25"}, "--node-cpu is for the nodes the bench starts"},
		{[]string{"--nodes", "3", "--node-cpu", "-1"}, "must not be negative"},
		{[]string{"--nodes", "3", "--node-cpu", "0.05"}, "under the kernel's least quota of 1ms"},
		{[]string{"--nodes", "3", "--cpu-period", "100us"}, "--cpu-period must be 1ms to 1s"},
		{[]string{"--nodes", "3", "--rounds", "0"}, "--rounds must be at least 1"},
		{[]string{"--nodes", "3", "--cpu-shares", "4096"}, "--cpu-shares weighs the budgeted groups"},
		{[]string{"--nodes", "3", "--node-cpu", "0.25", "--cpu-shares", "1"}, "--cpu-shares must be 2 to 262144"},
		{[]string{"--idle"}, "--idle measures the nodes the bench starts"},
		{[]string{"--nodes", "3", "--target", "client,smtp"}, `3 nodes, smtp: --target must be http, grpc, rls or client, got "smtp"`},
		{[]string{"--nodes", "3", "--target", "smtp"}, `limitd bench: --target must be http, grpc, rls or client, got "smtp"`},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// An idle row's summary: the leader's and the followers' mean share of a
// core, medians over the rounds; the load generator is not a node.
func TestSummarizeIdle(t *testing.T) {
	run := func(leader, f1, f2 time.Duration) bench.Result {
		return bench.Result{CPUInterval: 10 * time.Second, CPU: []bench.ProcessCPU{
			{Role: "follower", CPU: f1}, {Role: "leader", CPU: leader}, {Role: "follower", CPU: f2},
			{Role: "load generator", CPU: time.Second}}}
	}
	s := summarize(benchRow{nodes: 3, idle: true}, []bench.Result{
		run(350*time.Millisecond, 100*time.Millisecond, 120*time.Millisecond),
		run(300*time.Millisecond, 80*time.Millisecond, 80*time.Millisecond),
		run(900*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond),
	})
	if math.Abs(s.IdleLeader-0.035) > 1e-9 || math.Abs(s.IdleFollower-0.011) > 1e-9 {
		t.Errorf("idle leader %g, followers %g; want the medians 0.035 and 0.011", s.IdleLeader, s.IdleFollower)
	}
	if r := (benchRow{nodes: 3, target: "http", idle: true}); r.String() != "3 nodes, idle" {
		t.Errorf("row %q", r)
	}
}

// --row: each row's own serve flags reach that row's nodes only, after the
// shared --serve-arg ones; the rows alternate like --nodes'.
func TestBenchRowsWithTheirOwnServeFlags(t *testing.T) {
	reports, _ := useFakeNodes(t)
	var out, errb bytes.Buffer
	if code := Main([]string{"--row", "2 --data-groups=5", "--row", "1", "--duration", "200ms", "--warmup", "0",
		"--concurrency", "2", "--keys", "20", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 2 runs and 2 summaries:\n%s", len(lines), out.String())
	}
	runs, err := bench.ReadJSONLines(strings.NewReader(strings.Join(lines[:2], "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].Label != "2 nodes --data-groups=5, http" || runs[0].Nodes != 2 || runs[1].Label != "1 nodes, http" || runs[1].Nodes != 1 {
		t.Errorf("runs %q (%d nodes), %q (%d nodes)", runs[0].Label, runs[0].Nodes, runs[1].Label, runs[1].Nodes)
	}
	// bench1 ran last in the 1-node row, without the flag; bench2 only in the first.
	for id, want := range map[string]string{"bench1": "", "bench2": "5"} {
		if b, _ := os.ReadFile(filepath.Join(reports, id+".data-groups")); string(b) != want {
			t.Errorf("%s's last run had --data-groups %q, want %q", id, b, want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--row", "3", "--nodes", "3"}, "--row names each row's nodes: not with --nodes or --cluster"},
		{[]string{"--row", "x --data-groups=3"}, `"x" is not a number of nodes`},
		{[]string{"--row", "3 data-groups=3"}, `"data-groups=3" is not a flag`},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
