package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run's report. Run fills the workload and measured fields; the
// driver fills what it knows about the system and the limit.
type Result struct {
	// Set by the driver.
	System    string // "limitd", "redis"
	Label     string // free text naming the run in a comparison table
	Target    string // addresses
	Protocol  string // how checks were sent: "http", "net/http" (HTTP through net/http's client), "grpc", "rls", "client" (limitd's Go client), "redis"
	Nodes     int    // cluster size, when known
	Algorithm string // or the policy, as "policy:NAME"
	Limit     int64
	Window    string
	Cost      int64

	// Set by Run.
	Concurrency int
	Keys        int
	Dist        string
	Batch       int

	Elapsed       time.Duration    // measured interval
	Requests      int64            // requests counted (a batch is one request)
	Checks        int64            // Allowed + Refused + Errors
	Allowed       int64            //
	Refused       int64            //
	Errors        int64            // checks that got no decision
	ErrorsByClass map[string]int64 // by ErrorClass name
	LastError     string           // one example, to tell what went wrong
	P50, P90, P99 time.Duration    // per request, answered requests only
	P999          time.Duration    //
	Max           time.Duration    //
	Interrupted   bool             // stopped early (Ctrl-C)

	// Set by Run for the open loop (Workload.Rate > 0): the offered rate and
	// its spacing; how many checks were scheduled in the measured interval,
	// how many of them started more than BehindThreshold late, the p99 and
	// max of that start lag, and whether the run fell behind (more than 1%
	// late). Concurrency is then the bound on checks in flight.
	Rate    float64
	Arrival string
	// Set by drivers that scrape the nodes' /metrics around the run: the
	// per-stage latency budget (StageBudget).
	Stages []StageRow
	// RaftEntries is how many Raft entries the cluster committed over the
	// measured interval (RaftEntries), when the nodes showed their commit
	// index; 0 when not measured.
	RaftEntries              uint64
	Scheduled, Late          int64
	StartLagP99, StartLagMax time.Duration
	Behind                   bool

	// Set by drivers that started the servers themselves: the largest
	// node's data directory and resident memory at the end of the run.
	DiskBytes, RSSBytes int64

	// Set by Run with Workload.FsyncProbeDir: the disk's append + fsync
	// time, taken before the run.
	Fsync *FsyncProbe

	// Set by Run when Workload.CPU is set: the CPU time of each measured
	// process over the measured interval (see CPUPerCheck), and what could
	// not be measured.
	CPU      []ProcessCPU
	CPUError string
	// CPUInterval is the wall time the CPU times cover and CPUs the
	// machine's CPU count: together they say how busy the machine was
	// (BusyCPUs), which is what a latency measured on a shared box
	// depends on. Set by Run with CPU.
	CPUInterval time.Duration
	CPUs        int
	// LoadAvg is the box's 1-minute load average when the run began (set
	// by the driver; 0 when not read): a CPU budget caps a process, it does
	// not reserve a CPU for it, so a row is read beside the box's load.
	LoadAvg float64

	// Set by Run for the attack workload (Workload.HotKeys > 0): its mix,
	// and the normal and the hot keys' checks apart.
	HotKeys     int
	HotFraction float64
	HotLimit    int64
	Normal, Hot *KeyClass
}

// KeyClass is one kind of key's share of an attack run: its decided checks
// and errors, and the latency of its answered checks.
type KeyClass struct {
	Allowed, Refused, Errors int64
	P50, P99, Max            time.Duration
}

// keyClassJSON is KeyClass in the JSON line, latencies in milliseconds.
type keyClassJSON struct {
	Allowed int64   `json:"allowed"`
	Refused int64   `json:"refused"`
	Errors  int64   `json:"errors"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

func (k *KeyClass) toJSON() *keyClassJSON {
	if k == nil {
		return nil
	}
	return &keyClassJSON{Allowed: k.Allowed, Refused: k.Refused, Errors: k.Errors, P50ms: ms(k.P50), P99ms: ms(k.P99), MaxMs: ms(k.Max)}
}

func (j *keyClassJSON) toKeyClass() *KeyClass {
	if j == nil {
		return nil
	}
	return &KeyClass{Allowed: j.Allowed, Refused: j.Refused, Errors: j.Errors, P50: fromMs(j.P50ms), P99: fromMs(j.P99ms), Max: fromMs(j.MaxMs)}
}

// summary is "12,345 checks/s (allowed 1, refused 2, errors 0), p50 1ms p99 2ms".
func (k *KeyClass) summary(elapsed time.Duration) string {
	return fmt.Sprintf("%s checks/s (allowed %s, refused %s, errors %s), p50 %s p99 %s max %s",
		formatInt(int64(math.Round(perSec(k.Allowed+k.Refused, elapsed)))),
		formatInt(k.Allowed), formatInt(k.Refused), formatInt(k.Errors),
		fmtDuration(k.P50), fmtDuration(k.P99), fmtDuration(k.Max))
}

// Answered is the checks that got a decision (allowed + refused): the
// divisor of CPU per check.
func (r Result) Answered() int64 { return r.Allowed + r.Refused }

func (r *Result) setLatencies(h *Histogram) {
	r.P50 = h.Quantile(0.50)
	r.P90 = h.Quantile(0.90)
	r.P99 = h.Quantile(0.99)
	r.P999 = h.Quantile(0.999)
	r.Max = h.Max()
}

// The judgement of a run under CPU budgets (ProcessCPU.Budget).
const (
	// ThrottledAt: a process counts as throttled, held to its budget,
	// when at least this share of the CFS periods it ran in ended with
	// its quota used up.
	ThrottledAt = 0.1
	// GeneratorSaturatedAt: a load generator that used more than this
	// share of its own budget was the bottleneck, so the run measures the
	// generator and is void.
	GeneratorSaturatedAt = 0.8
)

// BudgetedNodes counts the servers (every process but the load generator)
// that ran under a CPU budget, and those of them that were throttled
// (ThrottledAt). All of them throttled: the row measured the nodes' CPU.
func (r Result) BudgetedNodes() (throttled, budgeted int) {
	for _, p := range r.CPU {
		if p.Role == "load generator" || p.Budget <= 0 {
			continue
		}
		budgeted++
		if p.Throttle.ThrottledFraction() >= ThrottledAt {
			throttled++
		}
	}
	return throttled, budgeted
}

// GeneratorSaturated reports whether a load generator with a budget used
// more than GeneratorSaturatedAt of it: then the row is void.
func (r Result) GeneratorSaturated() bool {
	for _, p := range r.CPU {
		if p.Role == "load generator" && p.BudgetUsed(r.CPUInterval) > GeneratorSaturatedAt {
			return true
		}
	}
	return false
}

// BusyCPUs is how many CPUs the measured processes kept busy on average:
// their CPU time over the interval it was measured in (0 if not measured).
// Near the machine's CPU count, checks queue for a core at every hop.
func (r Result) BusyCPUs() float64 {
	if r.CPUInterval <= 0 {
		return 0
	}
	var sum time.Duration
	for _, p := range r.CPU {
		sum += p.CPU
	}
	return sum.Seconds() / r.CPUInterval.Seconds()
}

// ChecksPerSec is decided checks (allowed + refused) per second of the
// measured interval; errors do not count as throughput.
func (r Result) ChecksPerSec() float64 {
	return perSec(r.Allowed+r.Refused, r.Elapsed)
}

// RequestsPerSec counts HTTP requests (or Redis calls), answered or not.
func (r Result) RequestsPerSec() float64 { return perSec(r.Requests, r.Elapsed) }

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// resultJSON is the one-line machine-readable form: flat, rates and latencies
// as numbers (latencies in milliseconds) so jq and spreadsheets need no parsing.
type resultJSON struct {
	System         string           `json:"system"`
	Label          string           `json:"label,omitempty"`
	Target         string           `json:"target"`
	Protocol       string           `json:"protocol,omitempty"`
	Nodes          int              `json:"nodes,omitempty"`
	Algorithm      string           `json:"algorithm"`
	Limit          int64            `json:"limit"`
	Window         string           `json:"window"`
	Cost           int64            `json:"cost"`
	Concurrency    int              `json:"concurrency"`
	Keys           int              `json:"keys"`
	Dist           string           `json:"dist"`
	Batch          int              `json:"batch"`
	DurationSec    float64          `json:"duration_s"`
	ChecksPerSec   float64          `json:"checks_per_sec"`
	RequestsPerSec float64          `json:"requests_per_sec"`
	Requests       int64            `json:"requests"`
	Checks         int64            `json:"checks"`
	Allowed        int64            `json:"allowed"`
	Refused        int64            `json:"refused"`
	Errors         int64            `json:"errors"`
	ErrorsByClass  map[string]int64 `json:"errors_by_class,omitempty"`
	LastError      string           `json:"last_error,omitempty"`
	P50ms          float64          `json:"p50_ms"`
	P90ms          float64          `json:"p90_ms"`
	P99ms          float64          `json:"p99_ms"`
	P999ms         float64          `json:"p999_ms"`
	MaxMs          float64          `json:"max_ms"`
	Rate           float64          `json:"rate,omitempty"`
	Arrival        string           `json:"arrival,omitempty"`
	Scheduled      int64            `json:"scheduled,omitempty"`
	Late           int64            `json:"late,omitempty"`
	StartLagP99ms  float64          `json:"start_lag_p99_ms,omitempty"`
	StartLagMaxMs  float64          `json:"start_lag_max_ms,omitempty"`
	Behind         bool             `json:"behind,omitempty"`
	Stages         []StageRow       `json:"stages,omitempty"`
	RaftEntries    uint64           `json:"raft_entries,omitempty"`
	Interrupted    bool             `json:"interrupted,omitempty"`
	DiskBytes      int64            `json:"disk_bytes,omitempty"`
	RSSBytes       int64            `json:"rss_bytes,omitempty"`
	FsyncDir       string           `json:"fsync_dir,omitempty"`
	FsyncAppends   int              `json:"fsync_appends,omitempty"`
	FsyncP50ms     float64          `json:"fsync_p50_ms,omitempty"`
	FsyncP99ms     float64          `json:"fsync_p99_ms,omitempty"`
	FsyncMaxMs     float64          `json:"fsync_max_ms,omitempty"`
	CPU            []processCPUJSON `json:"cpu,omitempty"`
	CPUError       string           `json:"cpu_error,omitempty"`
	CPUIntervalSec float64          `json:"cpu_interval_s,omitempty"`
	CPUs           int              `json:"cpus,omitempty"`
	BusyCPUs       float64          `json:"busy_cpus,omitempty"`
	HotKeys        int              `json:"hot_keys,omitempty"`
	HotFraction    float64          `json:"hot_fraction,omitempty"`
	HotLimit       int64            `json:"hot_limit,omitempty"`
	Normal         *keyClassJSON    `json:"normal,omitempty"`
	Hot            *keyClassJSON    `json:"hot,omitempty"`
	LoadAvg        float64          `json:"load_avg_1m,omitempty"`
	// Under CPU budgets: nodes with one, those throttled, and whether the
	// generator saturated its own (the row is then void).
	BudgetedNodes      int  `json:"budgeted_nodes,omitempty"`
	ThrottledNodes     int  `json:"throttled_nodes,omitempty"`
	GeneratorSaturated bool `json:"generator_saturated,omitempty"`
}

// processCPUJSON is one process's CPU: seconds over the run and
// microseconds per answered check.
type processCPUJSON struct {
	Role          string  `json:"role"`
	Name          string  `json:"name,omitempty"`
	PID           int     `json:"pid"`
	CPUSec        float64 `json:"cpu_s"`
	PerCheckMicro float64 `json:"cpu_per_check_us"`
	// Under a CPU budget: the budget, the share of it used, the CFS
	// periods run and throttled over the measured interval.
	BudgetCPUs       float64 `json:"budget_cpus,omitempty"`
	BudgetUsed       float64 `json:"budget_used,omitempty"`
	Periods          int64   `json:"periods,omitempty"`
	ThrottledPeriods int64   `json:"throttled_periods,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMs(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

// MarshalJSON writes the flat form described by resultJSON.
func (r Result) MarshalJSON() ([]byte, error) {
	errs := r.ErrorsByClass
	if len(errs) == 0 {
		errs = nil
	}
	j := resultJSON{
		System: r.System, Label: r.Label, Target: r.Target, Protocol: r.Protocol, Nodes: r.Nodes,
		Algorithm: r.Algorithm, Limit: r.Limit, Window: r.Window, Cost: r.Cost,
		Concurrency: r.Concurrency, Keys: r.Keys, Dist: r.Dist, Batch: r.Batch,
		HotKeys: r.HotKeys, HotFraction: r.HotFraction, HotLimit: r.HotLimit,
		Normal: r.Normal.toJSON(), Hot: r.Hot.toJSON(),
		DurationSec:    r.Elapsed.Seconds(),
		ChecksPerSec:   math.Round(r.ChecksPerSec()*10) / 10,
		RequestsPerSec: math.Round(r.RequestsPerSec()*10) / 10,
		Requests:       r.Requests, Checks: r.Checks, Allowed: r.Allowed, Refused: r.Refused,
		Errors: r.Errors, ErrorsByClass: errs, LastError: r.LastError,
		P50ms: ms(r.P50), P90ms: ms(r.P90), P99ms: ms(r.P99), P999ms: ms(r.P999), MaxMs: ms(r.Max),
		Rate: r.Rate, Arrival: r.Arrival, Scheduled: r.Scheduled, Late: r.Late,
		StartLagP99ms: ms(r.StartLagP99), StartLagMaxMs: ms(r.StartLagMax), Behind: r.Behind, Stages: r.Stages,
		RaftEntries: r.RaftEntries, Interrupted: r.Interrupted, DiskBytes: r.DiskBytes, RSSBytes: r.RSSBytes,
		CPU: cpuJSON(r), CPUError: r.CPUError,
		CPUIntervalSec: math.Round(r.CPUInterval.Seconds()*1e6) / 1e6, CPUs: r.CPUs,
		BusyCPUs: math.Round(r.BusyCPUs()*1000) / 1000,
		LoadAvg:  r.LoadAvg, GeneratorSaturated: r.GeneratorSaturated(),
	}
	j.ThrottledNodes, j.BudgetedNodes = r.BudgetedNodes()
	if p := r.Fsync; p != nil {
		j.FsyncDir, j.FsyncAppends = p.Dir, p.Appends
		j.FsyncP50ms, j.FsyncP99ms, j.FsyncMaxMs = ms(p.P50), ms(p.P99), ms(p.Max)
	}
	return json.Marshal(j)
}

func cpuJSON(r Result) []processCPUJSON {
	var out []processCPUJSON
	for _, p := range r.CPU {
		out = append(out, processCPUJSON{Role: p.Role, Name: p.Name, PID: p.PID,
			CPUSec:        math.Round(p.CPU.Seconds()*1e6) / 1e6,
			PerCheckMicro: math.Round(float64(p.PerCheck(r.Answered()))/1e3*100) / 100,
			BudgetCPUs:    p.Budget, BudgetUsed: math.Round(p.BudgetUsed(r.CPUInterval)*1000) / 1000,
			Periods: p.Throttle.Periods, ThrottledPeriods: p.Throttle.Throttled})
	}
	return out
}

// UnmarshalJSON reads what MarshalJSON wrote (rates are recomputed).
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result{
		System: j.System, Label: j.Label, Target: j.Target, Protocol: j.Protocol, Nodes: j.Nodes,
		Algorithm: j.Algorithm, Limit: j.Limit, Window: j.Window, Cost: j.Cost,
		Concurrency: j.Concurrency, Keys: j.Keys, Dist: j.Dist, Batch: j.Batch,
		HotKeys: j.HotKeys, HotFraction: j.HotFraction, HotLimit: j.HotLimit,
		Normal: j.Normal.toKeyClass(), Hot: j.Hot.toKeyClass(),
		Elapsed:  time.Duration(math.Round(j.DurationSec * float64(time.Second))),
		Requests: j.Requests, Checks: j.Checks, Allowed: j.Allowed, Refused: j.Refused,
		Errors: j.Errors, ErrorsByClass: j.ErrorsByClass, LastError: j.LastError,
		P50: fromMs(j.P50ms), P90: fromMs(j.P90ms), P99: fromMs(j.P99ms), P999: fromMs(j.P999ms), Max: fromMs(j.MaxMs),
		Rate: j.Rate, Arrival: j.Arrival, Scheduled: j.Scheduled, Late: j.Late,
		StartLagP99: fromMs(j.StartLagP99ms), StartLagMax: fromMs(j.StartLagMaxMs), Behind: j.Behind, Stages: j.Stages,
		RaftEntries: j.RaftEntries, Interrupted: j.Interrupted, DiskBytes: j.DiskBytes, RSSBytes: j.RSSBytes,
		CPUError: j.CPUError, CPUs: j.CPUs, LoadAvg: j.LoadAvg,
		CPUInterval: time.Duration(math.Round(j.CPUIntervalSec * float64(time.Second))),
	}
	if j.FsyncAppends > 0 {
		r.Fsync = &FsyncProbe{Dir: j.FsyncDir, Appends: j.FsyncAppends,
			P50: fromMs(j.FsyncP50ms), P99: fromMs(j.FsyncP99ms), Max: fromMs(j.FsyncMaxMs)}
	}
	for _, p := range j.CPU {
		r.CPU = append(r.CPU, ProcessCPU{Role: p.Role, Name: p.Name, PID: p.PID,
			CPU:    time.Duration(math.Round(p.CPUSec * float64(time.Second))),
			Budget: p.BudgetCPUs, Throttle: Throttle{Periods: p.Periods, Throttled: p.ThrottledPeriods}})
	}
	return nil
}

// WriteJSONLine writes r as one line of JSON.
func WriteJSONLine(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadJSONLines reads results written by WriteJSONLine, skipping blank lines.
func ReadJSONLines(rd io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// WriteTable prints one run as a two-column table.
func WriteTable(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	target := r.System
	if r.Nodes > 0 {
		target += fmt.Sprintf(" (%d node%s)", r.Nodes, plural(r.Nodes))
	}
	if r.Protocol != "" {
		target += " over " + r.Protocol
	}
	if r.Target != "" {
		target += " " + r.Target
	}
	row("target", target)
	row("workload", workloadString(r))
	dur := fmtDuration(r.Elapsed)
	if r.Interrupted {
		dur += " (interrupted)"
	}
	row("duration", dur)
	row("checks/s", formatInt(int64(math.Round(r.ChecksPerSec()))))
	if r.Batch > 1 {
		row("requests/s", formatInt(int64(math.Round(r.RequestsPerSec()))))
	}
	row("checks", formatInt(r.Checks))
	row("allowed", formatInt(r.Allowed)+percent(r.Allowed, r.Checks))
	row("refused", formatInt(r.Refused)+percent(r.Refused, r.Checks))
	row("errors", formatInt(r.Errors)+percent(r.Errors, r.Checks)+errorClasses(r.ErrorsByClass))
	if r.LastError != "" {
		row("last error", r.LastError)
	}
	per := "latency"
	if r.Batch > 1 {
		per = "latency/request"
	}
	if r.Rate > 0 {
		per = "latency from schedule"
	}
	row(per, fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s",
		fmtDuration(r.P50), fmtDuration(r.P90), fmtDuration(r.P99), fmtDuration(r.P999), fmtDuration(r.Max)))
	if r.Rate > 0 {
		row("schedule", r.behindSummary())
	}
	if r.Fsync != nil {
		row("disk", r.Fsync.summary())
	}
	if r.Normal != nil {
		row("normal keys", r.Normal.summary(r.Elapsed))
	}
	if r.Hot != nil {
		row("hot keys", r.Hot.summary(r.Elapsed))
	}
	if len(r.CPU) > 0 {
		row("CPU per check", cpuString(r, ", "))
	}
	if busy := r.BusyCPUs(); busy > 0 && r.CPUs > 0 {
		row("CPU busy", fmt.Sprintf("%.2f of %d CPUs (%.0f%%): the processes above, over the measured interval",
			busy, r.CPUs, 100*busy/float64(r.CPUs)))
	}
	if b := budgetString(r); b != "" {
		row("CPU budget", b)
	}
	if r.LoadAvg > 0 {
		row("box load", fmt.Sprintf("%.2f (1-minute load average at the start)", r.LoadAvg))
	}
	if r.CPUError != "" {
		row("CPU not measured", r.CPUError)
	}
	if r.RaftEntries > 0 {
		row("Raft entries", fmt.Sprintf("%s (%.1f per 1,000 checks)", formatInt(int64(r.RaftEntries)),
			1000*float64(r.RaftEntries)/float64(max(r.Checks, 1))))
	}
	if r.DiskBytes > 0 || r.RSSBytes > 0 {
		row("largest node", fmt.Sprintf("%s on disk (%s bytes per key of --keys), RSS %s",
			fmtBytes(r.DiskBytes), formatInt(r.DiskBytes/int64(max(r.Keys, 1))), fmtBytes(r.RSSBytes)))
	}
	return tw.Flush()
}

// WriteComparison prints several runs as one table. Every run of another
// system gets the ratio of its checks/s to the baseline system's single-check
// run with the same key distribution (the targets are stated that way).
func WriteComparison(w io.Writer, results []Result, baseline string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system\trun\tproto\tnodes\tdist\tbatch\trate\tchecks/s\tp50\tp90\tp99\tp99.9\tmax\tnormal p99\tallowed\trefused\terrors\tvs %s\tCPU per check\tfsync p50/p99\t\n", baseline)
	for _, r := range results {
		ratio := "-"
		if r.System != baseline {
			b, ok := findBaseline(results, baseline, r)
			switch {
			case ok && r.Rate > 0 && b.P50 > 0 && b.P99 > 0:
				// At a fixed rate both do the same work: compare latency.
				ratio = fmt.Sprintf("p50 %.1fx p99 %.1fx", float64(r.P50)/float64(b.P50), float64(r.P99)/float64(b.P99))
			case ok && r.Rate == 0 && b.ChecksPerSec() > 0:
				ratio = fmt.Sprintf("%.2fx", r.ChecksPerSec()/b.ChecksPerSec())
			}
		}
		nodes := "-"
		if r.Nodes > 0 {
			nodes = strconv.Itoa(r.Nodes)
		}
		label := r.Label
		if label == "" {
			label = "-"
		}
		cpu := cpuString(r, " ")
		if busy := r.BusyCPUs(); busy > 0 && r.CPUs > 0 && cpu != "" {
			cpu += fmt.Sprintf(" busy=%.2f/%d", busy, r.CPUs)
		}
		if cpu == "" {
			cpu = "-"
		}
		proto, normalP99 := r.Protocol, "-"
		if proto == "" {
			proto = "-"
		}
		if r.Normal != nil {
			normalP99 = fmtDuration(r.Normal.P99)
		}
		rate := "closed"
		if r.Rate > 0 {
			rate = formatInt(int64(math.Round(r.Rate))) + "/s"
			if r.Behind {
				rate += " BEHIND"
			}
		}
		fsync := "-"
		if r.Fsync != nil {
			fsync = fmtDuration(r.Fsync.P50) + "/" + fmtDuration(r.Fsync.P99)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.System, label, proto, nodes, r.Dist, r.Batch, rate,
			formatInt(int64(math.Round(r.ChecksPerSec()))),
			fmtDuration(r.P50), fmtDuration(r.P90), fmtDuration(r.P99), fmtDuration(r.P999), fmtDuration(r.Max), normalP99,
			formatInt(r.Allowed), formatInt(r.Refused), formatInt(r.Errors), ratio, cpu, fsync)
	}
	return tw.Flush()
}

// budgetString says how each budgeted process used its budget and what
// that makes of the row: "bench1 0.25 CPU: used 99%, throttled in 87% of
// periods; ...; 3 of 3 nodes throttled; load generator used 41% of 0.6
// CPU" (VOID when it saturated). "" when nothing ran under a budget.
func budgetString(r Result) string {
	var parts []string
	for _, p := range r.CPU {
		if p.Budget <= 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %g CPU: used %.0f%%, throttled in %.0f%% of %s periods",
			p.label(), p.Budget, 100*p.BudgetUsed(r.CPUInterval), 100*p.Throttle.ThrottledFraction(), formatInt(p.Throttle.Periods)))
	}
	if len(parts) == 0 {
		return ""
	}
	if th, n := r.BudgetedNodes(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d nodes throttled", th, n))
	}
	if r.GeneratorSaturated() {
		parts = append(parts, fmt.Sprintf("VOID: the load generator used over %.0f%% of its budget", 100*GeneratorSaturatedAt))
	}
	return strings.Join(parts, "; ")
}

// cpuString lists each process's CPU per answered check in the order
// measured: for one run "leader bench1 53.1µs, ..." (sep ", "); in the
// comparison table (sep " ") "leader=53.1µs follower=25.0µs ... Σ=78.1µs
// loadgen=35.0µs", where Σ is the servers' total (all but the load
// generator) when there are several.
func cpuString(r Result, sep string) string {
	parts := make([]string, 0, len(r.CPU)+1)
	var servers time.Duration
	nServers := 0
	for _, p := range r.CPU {
		per := p.PerCheck(r.Answered())
		if sep != " " {
			who := p.Role
			if p.Name != "" && p.Name != p.Role {
				who += " " + p.Name
			}
			parts = append(parts, who+" "+fmtDuration(per))
			continue
		}
		role := p.Role
		if role == "load generator" {
			if nServers > 1 {
				parts = append(parts, "Σ="+fmtDuration(servers))
			}
			nServers = -1 // reported
			role = "loadgen"
		} else {
			servers += per
			nServers++
		}
		parts = append(parts, role+"="+fmtDuration(per))
	}
	if nServers > 1 {
		parts = append(parts, "Σ="+fmtDuration(servers))
	}
	return strings.Join(parts, sep)
}

// findBaseline is the baseline system's single-check run of the same
// workload as of: the same key distribution, and the attack run for an
// attack run.
func findBaseline(results []Result, system string, of Result) (Result, bool) {
	for _, r := range results {
		if r.System == system && r.Dist == of.Dist && r.Batch <= 1 && (r.HotKeys > 0) == (of.HotKeys > 0) && r.Rate == of.Rate {
			return r, true
		}
	}
	return Result{}, false
}

func workloadString(r Result) string {
	s := fmt.Sprintf("concurrency %d, %s keys %s", r.Concurrency, formatInt(int64(r.Keys)), r.Dist)
	if r.Rate > 0 {
		s = fmt.Sprintf("open loop %s checks/s %s, up to %d in flight, %s keys %s",
			formatInt(int64(math.Round(r.Rate))), r.Arrival, r.Concurrency, formatInt(int64(r.Keys)), r.Dist)
	}
	if r.Batch > 1 {
		s += fmt.Sprintf(", batches of %d", r.Batch)
	}
	if r.Algorithm != "" {
		s += ", " + r.Algorithm
		if r.Limit > 0 {
			s += fmt.Sprintf(" %d per %s", r.Limit, r.Window)
		}
	}
	if r.Cost != 1 {
		s += fmt.Sprintf(", cost %d", r.Cost)
	}
	if r.HotKeys > 0 {
		s += fmt.Sprintf(", attack: %g of checks on %d hot keys limited to %d per window", r.HotFraction, r.HotKeys, r.HotLimit)
	}
	return s
}

func errorClasses(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + " " + formatInt(m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func percent(n, of int64) string {
	if of == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(of))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// formatInt groups thousands: 1234567 → "1,234,567".
func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtBytes prints a size in binary units.
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return sig3(float64(n)/(1<<30)) + " GiB"
	case n >= 1<<20:
		return sig3(float64(n)/(1<<20)) + " MiB"
	case n >= 1<<10:
		return sig3(float64(n)/(1<<10)) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// fmtDuration prints three significant figures in a unit that suits the value.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
