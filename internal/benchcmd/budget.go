package benchcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/limitd/limitd/bench"
	"github.com/limitd/limitd/internal/proccluster"
)

// Capacity per node under a CPU budget: --node-cpu puts every node in a
// cgroup of its own with that share of a CPU (internal/proccluster), and
// --generator-cpu puts this process (the load generator, and the Go client
// with --target client) in one too, so nodes sharing one box stand in for
// machines of a fixed size. --nodes and --target take lists, and --rounds
// repeats them alternated (A B A B A B, never A A A B B B, so a box that
// gets busier halfway hurts both alike), then prints each row's medians.

// listFlag is a repeatable flag: every occurrence adds one value.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// parseNodes reads --nodes: "3" or "3,6".
func parseNodes(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--nodes: %q is not a number of nodes (at least 1)", p)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("--nodes: no node count")
	}
	return out, nil
}

// validateBudget checks the flags of this file; the rows' own flags are
// checked per row by validate.
func (f *benchFlags) validateBudget() error {
	switch {
	case f.nodeCPU < 0 || f.generatorCPU < 0:
		return errors.New("--node-cpu and --generator-cpu must not be negative")
	case f.nodeCPU > 0 && f.cluster == 0:
		return errors.New("--node-cpu is for the nodes the bench starts (--nodes or --cluster)")
	case f.cpuPeriod < time.Millisecond || f.cpuPeriod > time.Second:
		return fmt.Errorf("--cpu-period must be 1ms to 1s, got %s", f.cpuPeriod)
	case f.nodeCPU > 0 && f.nodeCPU*float64(f.cpuPeriod) < float64(time.Millisecond):
		return fmt.Errorf("--node-cpu %g of a %s period is under the kernel's least quota of 1ms: lengthen --cpu-period", f.nodeCPU, f.cpuPeriod)
	case f.generatorCPU > 0 && f.generatorCPU*float64(f.cpuPeriod) < float64(time.Millisecond):
		return fmt.Errorf("--generator-cpu %g of a %s period is under the kernel's least quota of 1ms: lengthen --cpu-period", f.generatorCPU, f.cpuPeriod)
	case f.cpuShares != 0 && (f.cpuShares < 2 || f.cpuShares > 262144):
		return fmt.Errorf("--cpu-shares must be 2 to 262144, got %d", f.cpuShares)
	case f.cpuShares != 0 && f.nodeCPU == 0 && f.generatorCPU == 0:
		return errors.New("--cpu-shares weighs the budgeted groups: give --node-cpu or --generator-cpu")
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be at least 1, got %d", f.rounds)
	case f.idle && f.cluster == 0:
		return errors.New("--idle measures the nodes the bench starts (--nodes or --cluster)")
	case f.idle && f.work.Rate > 0:
		return errors.New("--idle sends no checks: --rate does not apply")
	}
	if f.nodeCPU > 0 || f.generatorCPU > 0 {
		if err := proccluster.CPUGroupsSupported(); err != nil {
			return fmt.Errorf("--node-cpu/--generator-cpu: %w", err)
		}
	}
	return nil
}

// benchRow is one configuration of a multi-row run.
type benchRow struct {
	nodes  int
	serve  []string // this row's own extra serve flags (--row)
	target string
	idle   bool
}

// parseRow reads one --row: a node count, then that row's serve flags,
// space-separated ("3 --data-groups=6").
func parseRow(s string) (benchRow, error) {
	fs := strings.Fields(s)
	if len(fs) == 0 {
		return benchRow{}, errors.New("--row: empty (want a node count, then serve flags)")
	}
	n, err := strconv.Atoi(fs[0])
	if err != nil || n < 1 {
		return benchRow{}, fmt.Errorf("--row %q: %q is not a number of nodes (at least 1)", s, fs[0])
	}
	for _, a := range fs[1:] {
		if !strings.HasPrefix(a, "-") {
			return benchRow{}, fmt.Errorf("--row %q: %q is not a flag (give each as --name=value)", s, a)
		}
	}
	return benchRow{nodes: n, serve: fs[1:]}, nil
}

func (r benchRow) String() string {
	s := fmt.Sprintf("%d nodes", r.nodes)
	if len(r.serve) > 0 {
		s += " " + strings.Join(r.serve, " ")
	}
	if r.idle {
		return s + ", idle"
	}
	return s + ", " + r.target
}

// rows lists the configurations of --nodes (or --row) × --target, in
// that order.
func (f *benchFlags) rows() []benchRow {
	base := f.rowList
	if len(base) == 0 {
		nodes := f.nodeList
		if len(nodes) == 0 {
			nodes = []int{f.cluster}
		}
		for _, n := range nodes {
			base = append(base, benchRow{nodes: n})
		}
	}
	targets := f.targets
	if f.idle { // no checks: the target makes no row of its own
		targets = targets[:1]
	}
	var out []benchRow
	for _, b := range base {
		for _, t := range targets {
			out = append(out, benchRow{nodes: b.nodes, serve: b.serve, target: t, idle: f.idle})
		}
	}
	return out
}

// forRow is a copy of f for one row, validated as a run of its own.
func (f *benchFlags) forRow(fs *flag.FlagSet, r benchRow) (*benchFlags, error) {
	c := *f
	c.cluster, c.target = r.nodes, r.target
	c.serveArgs = append(slices.Clone(f.serveArgs), r.serve...)
	if c.label == "" && len(f.rows()) > 1 {
		c.label = r.String()
	}
	if err := c.validate(fs); err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	return &c, nil
}

// generatorGroup puts this process in a CPU group of --generator-cpu for
// the measured run, and returns how to take it out and the group (nil
// without --generator-cpu). The process joins only after its nodes have
// started: a child forked inside the group would be born in it.
func (f *benchFlags) generatorGroup() (*proccluster.CPUGroup, func() error, error) {
	if f.generatorCPU <= 0 {
		return nil, func() error { return nil }, nil
	}
	from, err := proccluster.CPUGroupOf(os.Getpid())
	if err != nil {
		return nil, nil, fmt.Errorf("--generator-cpu: %w", err)
	}
	g, err := proccluster.NewCPUGroup(proccluster.GroupRunName()+"-gen", f.generatorCPU, f.cpuPeriod)
	if err != nil {
		return nil, nil, fmt.Errorf("--generator-cpu: %w", err)
	}
	if f.cpuShares > 0 {
		if err := g.SetShares(f.cpuShares); err != nil {
			g.Remove()
			return nil, nil, fmt.Errorf("--generator-cpu: %w", err)
		}
	}
	if err := g.Add(os.Getpid()); err != nil {
		g.Remove()
		return nil, nil, fmt.Errorf("--generator-cpu: %w", err)
	}
	leave := func() error {
		return errors.Join(g.Release(os.Getpid(), from), g.Remove())
	}
	return g, leave, nil
}

// throttleOf reads a group's counters for bench.CPUMeter.
func throttleOf(g *proccluster.CPUGroup) func() (bench.Throttle, error) {
	return func() (bench.Throttle, error) {
		st, err := g.Stat()
		return bench.Throttle{Periods: st.Periods, Throttled: st.Throttled}, err
	}
}

// loadAvg1 is the box's 1-minute load average (0 where unreadable).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fs := strings.Fields(string(b))
	if len(fs) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(fs[0], 64)
	return v
}

// runRows runs every row --rounds times, alternated, each run printed as
// it ends, then each row's medians (writeSummary). A run that fails ends
// the whole: the medians of rows with missing rounds would mislead.
func (f *benchFlags) runRows(ctx context.Context, runs []*benchFlags, stdout, stderr io.Writer) error {
	rows := f.rows()
	results := make([][]bench.Result, len(rows))
	for round := 1; round <= f.rounds; round++ {
		for i, c := range runs {
			fmt.Fprintf(stderr, "limitd bench: round %d of %d, %s\n", round, f.rounds, rows[i])
			res, err := c.runOne(ctx, stdout, stderr)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, rows[i], err)
			}
			results[i] = append(results[i], res)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if len(rows) == 1 && f.rounds == 1 {
		return nil
	}
	return writeSummary(stdout, f.jsonOut, rows, results)
}

// rowSummary is one row's medians over its rounds.
type rowSummary struct {
	Summary        string  `json:"summary"` // "median of N alternated rounds"
	Label          string  `json:"label"`
	Nodes          int     `json:"nodes"`
	Protocol       string  `json:"protocol"`
	Rounds         int     `json:"rounds"`
	ChecksPerSec   float64 `json:"checks_per_sec"`
	VsFirst        float64 `json:"vs_first,omitempty"` // checks/s ÷ the first row's of the same protocol
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	LeaderUS       float64 `json:"leader_cpu_per_check_us,omitempty"`
	FollowerUS     float64 `json:"follower_cpu_per_check_us,omitempty"` // the followers' mean
	NodesUS        float64 `json:"nodes_cpu_per_check_us"`              // Σ over the nodes
	GeneratorUS    float64 `json:"generator_cpu_per_check_us"`
	IdleLeader     float64 `json:"idle_leader_core,omitempty"`   // --idle: the leader's share of a core
	IdleFollower   float64 `json:"idle_follower_core,omitempty"` // --idle: the followers' mean share of a core
	ThrottledNodes float64 `json:"throttled_nodes,omitempty"`
	BudgetedNodes  int     `json:"budgeted_nodes,omitempty"`
	GeneratorUsed  float64 `json:"generator_budget_used,omitempty"` // the largest share of the rounds
	Void           int     `json:"void_rounds,omitempty"`           // rounds whose generator saturated
	LoadAvg        float64 `json:"load_avg_1m,omitempty"`
}

// summarize takes one row's medians. CPU per check is read by role:
// which node leads changes from run to run.
func summarize(row benchRow, rs []bench.Result) rowSummary {
	s := rowSummary{Nodes: row.nodes, Protocol: row.target, Rounds: len(rs),
		Summary: fmt.Sprintf("median of %d alternated rounds", len(rs))}
	var cps, p50, p99, leader, follower, nodes, gen, idleL, idleF, throttled, load []float64
	for _, r := range rs {
		s.Label = r.Label
		cps = append(cps, r.ChecksPerSec())
		p50, p99 = append(p50, ms(r.P50)), append(p99, ms(r.P99))
		var l, fsum, sum, il, ifsum float64
		nf := 0
		for _, p := range r.CPU {
			us := float64(p.PerCheck(r.Answered())) / 1e3
			switch p.Role {
			case "load generator":
				gen = append(gen, us)
				s.GeneratorUsed = max(s.GeneratorUsed, p.BudgetUsed(r.CPUInterval))
				continue
			}
			core := 0.0
			if r.CPUInterval > 0 {
				core = p.CPU.Seconds() / r.CPUInterval.Seconds()
			}
			if p.Role == "leader" {
				l, il = us, core
			} else {
				fsum, ifsum = fsum+us, ifsum+core
				nf++
			}
			sum += us
		}
		leader, nodes = append(leader, l), append(nodes, sum)
		idleL = append(idleL, il)
		if nf > 0 {
			follower = append(follower, fsum/float64(nf))
			idleF = append(idleF, ifsum/float64(nf))
		}
		th, n := r.BudgetedNodes()
		throttled, s.BudgetedNodes = append(throttled, float64(th)), n
		if r.GeneratorSaturated() {
			s.Void++
		}
		load = append(load, r.LoadAvg)
	}
	s.ChecksPerSec, s.P50ms, s.P99ms = median(cps), median(p50), median(p99)
	s.LeaderUS, s.FollowerUS, s.NodesUS, s.GeneratorUS = median(leader), median(follower), median(nodes), median(gen)
	s.ThrottledNodes, s.LoadAvg = median(throttled), median(load)
	if rs[0].Checks == 0 { // --idle
		s.IdleLeader, s.IdleFollower = median(idleL), median(idleF)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of vs (0 for none); the mean of the middle two for an even count.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// writeSummary prints each row's medians: a table, or one JSON line each.
func writeSummary(w io.Writer, jsonOut bool, rows []benchRow, results [][]bench.Result) error {
	sums := make([]rowSummary, len(rows))
	first := map[string]float64{}
	for i, row := range rows {
		sums[i] = summarize(row, results[i])
		if f, ok := first[row.target]; ok && f > 0 {
			sums[i].VsFirst = math.Round(sums[i].ChecksPerSec/f*1000) / 1000
		} else if !ok {
			first[row.target] = sums[i].ChecksPerSec
		}
	}
	if jsonOut {
		for _, s := range sums {
			b, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(w, "\nmedians of %d alternated rounds\n", sums[0].Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "nodes\tvia\tchecks/s\tvs first\tp50\tp99\tCPU per check: leader\tfollowers (mean)\tΣ nodes\tgenerator\tidle, of a core\tthrottled nodes\tgenerator budget used\tvoid rounds\tload")
	for _, s := range sums {
		vs, idle := "-", "-"
		if s.VsFirst > 0 {
			vs = fmt.Sprintf("%.2fx", s.VsFirst)
		}
		if s.IdleLeader > 0 || s.IdleFollower > 0 {
			idle = fmt.Sprintf("leader %.1f%%, followers %.1f%%", 100*s.IdleLeader, 100*s.IdleFollower)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%.2f ms\t%.2f ms\t%.1f µs\t%.1f µs\t%.1f µs\t%.1f µs\t%s\t%g of %d\t%.0f%%\t%d\t%.2f\n",
			s.Nodes, s.Protocol, s.ChecksPerSec, vs, s.P50ms, s.P99ms, s.LeaderUS, s.FollowerUS, s.NodesUS, s.GeneratorUS,
			idle, s.ThrottledNodes, s.BudgetedNodes, 100*s.GeneratorUsed, s.Void, s.LoadAvg)
	}
	return tw.Flush()
}

// idleRun measures the nodes with no checks: each one's CPU over the
// measured interval, as a share of a core (a node's fixed cost: heartbeats,
// timers, flushes).
func idleRun(ctx context.Context, w bench.Workload) (bench.Result, error) {
	r := bench.Result{Concurrency: 0, Keys: w.Keys, Dist: w.Dist}
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(w.Warmup); err != nil {
		return r, err
	}
	w.CPU.Begin()
	began := time.Now()
	if err := wait(w.Duration); err != nil {
		r.Interrupted = true
	}
	r.Elapsed = time.Since(began)
	cpu, err := w.CPU.End()
	r.CPU = cpu
	if err != nil {
		r.CPUError = err.Error()
	}
	r.CPUInterval = w.CPU.Interval()
	return r, nil
}

// writeIdle prints an --idle run: each node's share of a core.
func writeIdle(w io.Writer, r bench.Result) error {
	var parts []string
	for _, p := range r.CPU {
		share := 0.0
		if r.CPUInterval > 0 {
			share = p.CPU.Seconds() / r.CPUInterval.Seconds()
		}
		who := p.Role + " " + p.Name
		parts = append(parts, fmt.Sprintf("%s %.2f%% of a core", who, 100*share))
	}
	_, err := fmt.Fprintf(w, "idle CPU over %s (%d nodes, box load %.2f): %s\n",
		r.CPUInterval.Round(time.Millisecond), r.Nodes, r.LoadAvg, strings.Join(parts, ", "))
	if err == nil && r.CPUError != "" {
		_, err = fmt.Fprintf(w, "CPU not measured: %s\n", r.CPUError)
	}
	return err
}
