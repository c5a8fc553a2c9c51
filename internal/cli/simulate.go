package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/internal/flagerr"
	sim "github.com/limitd/limitd/simulate"
)

const simulateUsage = `Usage: limitd simulate [flags] [TRACE]

Replays a traffic trace against one limiter algorithm, or all five side by
side with --compare, and prints the decision for every request, then the
admitted and refused counts per key. It runs the same code a limitd node
runs (package algo); nothing is stored and no server is needed.

TRACE (standard input when absent or "-") has one request per line:

    <seconds> <key> [<cost>]

seconds is a decimal time since the epoch (35, 35.25, 0.000000001), read
exactly to the nanosecond; lines must be in time order. cost defaults to 1
(0 is a peek: decided, nothing consumed, not counted as admitted or
refused). Blank lines and anything after #
are ignored. The whole trace is read and checked before anything is
decided: a malformed line is reported with its number and nothing is
printed.

Output (--format table, the default): one row per request with the
decision, remaining, retry_after ("never" when the cost exceeds the limit or
burst), reset_after and, for leaky_bucket, delay. --format jsonl prints one
object per request with t, key, cost, allowed, remaining, retry_after_ms
(-1 for never), reset_after_ms and delay_ms (plus algorithm with --compare),
then one {"summary":true,...} object per key. With --compare the table shows
only the requests on which the algorithms disagree, then the admitted counts
per key for each algorithm.

Examples:
  limitd simulate --algorithm sliding_log --limit 10 --window 60s trace.txt
  printf '59 a\n60 a\n' | limitd simulate --algorithm fixed_window --limit 1 --window 1m --format jsonl
  limitd simulate --compare --limit 10 --window 60s --burst 5 trace.txt
  limitd simulate --algorithm fixed_window --limit 1000 --calendar day --timezone Europe/Paris trace.txt

Flags:
`

type simulateFlags struct {
	cfg     algo.Config
	format  string
	compare bool
}

// SimulateUsage prints `limitd simulate`'s help to out.
func SimulateUsage(out io.Writer) {
	fs, _ := newSimulateFlagSet(out)
	fs.Usage()
}

func newSimulateFlagSet(out io.Writer) (*flag.FlagSet, *simulateFlags) {
	f := &simulateFlags{}
	fs := flag.NewFlagSet("limitd simulate", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.cfg.Algorithm, "algorithm", "", "fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket or concurrency (required unless --compare)")
	fs.Int64Var(&f.cfg.Limit, "limit", 0, "requests (total cost) allowed per window (required)")
	fs.StringVar(&f.cfg.Window, "window", "", "window: a duration such as 60s, 1h30m, 500ms or 7d (required unless --calendar)")
	fs.Int64Var(&f.cfg.Burst, "burst", 0, "bucket capacity for token_bucket and leaky_bucket (default: = limit)")
	fs.BoolVar(&f.cfg.CountRefused, "count-refused", false, "sliding_log only: log refused requests too (a client that keeps sending too fast gets nothing through)")
	fs.StringVar(&f.cfg.Calendar, "calendar", "", "fixed_window only: day, week (from Monday) or month windows in --timezone, instead of --window")
	fs.StringVar(&f.cfg.Timezone, "timezone", "", "IANA time zone of --calendar windows, e.g. Europe/Paris (default UTC)")
	fs.StringVar(&f.cfg.Hold, "hold", "", "concurrency only: how long each admitted request holds its slot (a trace has no releases)")
	fs.StringVar(&f.cfg.MaxHold, "max-hold", "", "concurrency only: max_hold (default 10 × --hold)")
	fs.StringVar(&f.format, "format", "table", "output format: table or jsonl")
	fs.BoolVar(&f.compare, "compare", false, "run all five algorithms on the trace (--burst applies to the buckets, --count-refused to sliding_log)")
	fs.Usage = func() {
		fmt.Fprint(out, simulateUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// simRequest, simRun and simulate are the engine (package simulate) in this
// command's own terms, which its tests were written against.
type simRequest struct {
	t    int64 // ns since the epoch
	key  string
	cost int64
}

type simRun struct {
	decisions []algo.Decision // one per request
}

func simulate(s algo.Spec, trace []simRequest) (simRun, error) {
	reqs := make([]sim.Request, len(trace))
	for i, r := range trace {
		reqs[i] = sim.Request{Time: r.t, Key: r.key, Cost: r.cost}
	}
	run, err := sim.Replay(s, reqs)
	return simRun{decisions: run.Decisions}, err
}

// Simulate is `limitd simulate` with args, the words after its name. Exit status: 0 after printing the
// decisions, 2 for bad flags or a malformed trace, 1 when the trace cannot be
// read.
func Simulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, f := newSimulateFlagSet(stderr)
	// Flags may follow the trace path: parse, take one argument, repeat.
	var paths []string
	for {
		if err := flagerr.Parse(fs, args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return 0
			}
			fmt.Fprintf(stderr, "limitd simulate: %v; run 'limitd simulate --help' for the flags\n", err)
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "limitd simulate: "+format+"\n", a...)
		return code
	}
	if len(paths) > 1 {
		return fail(2, "one trace at most, got %d: %s", len(paths), strings.Join(paths, " "))
	}
	specs, err := f.specs()
	if err != nil {
		return fail(2, "%v", err)
	}

	in, name := stdin, "standard input"
	if len(paths) == 1 && paths[0] != "-" {
		file, err := os.Open(paths[0])
		if err != nil {
			return fail(1, "%v", err)
		}
		defer file.Close()
		in, name = file, paths[0]
	}
	trace, err := sim.ParseTrace(in, 0)
	if err != nil {
		var le *sim.LineError
		if errors.As(err, &le) {
			return fail(2, "%s: %v", name, err)
		}
		return fail(1, "read %s: %v", name, err)
	}

	runs := make([]sim.Run, len(specs))
	for i, s := range specs {
		if runs[i], err = sim.Replay(s, trace); err != nil {
			return fail(1, "%v", err)
		}
	}
	w := bufio.NewWriter(stdout)
	switch {
	case f.format == "jsonl":
		err = writeJSONL(w, trace, runs, f.compare)
	case f.compare:
		err = writeCompareTable(w, trace, runs)
	default:
		err = writeTable(w, trace, runs[0])
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return fail(1, "write: %v", err)
	}
	return 0
}

// specs validates the flags into one spec, or five with --compare. Errors
// name the flag.
func (f *simulateFlags) specs() ([]algo.Spec, error) {
	if f.format != "table" && f.format != "jsonl" {
		return nil, fmt.Errorf("--format: want table or jsonl, got %q", f.format)
	}
	if !f.compare {
		if f.cfg.Algorithm == "" {
			return nil, errors.New("--algorithm is required (or --compare to run them all)")
		}
		s, err := f.cfg.Spec()
		if err != nil {
			return nil, flagError(err)
		}
		return []algo.Spec{s}, nil
	}
	switch {
	case f.cfg.Algorithm != "":
		return nil, errors.New("--algorithm and --compare are exclusive: --compare runs every algorithm")
	case f.cfg.Calendar != "":
		return nil, errors.New("--calendar cannot be used with --compare: calendar windows exist only for fixed_window")
	}
	specs, err := sim.Specs(f.cfg, algo.Algorithms)
	if err != nil {
		return nil, flagError(err)
	}
	return specs, nil
}

// flagError renames a spec error's JSON field to its flag.
func flagError(err error) error {
	var fe *algo.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("--%s: %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Message)
	}
	return err
}

func formatDuration(d time.Duration) string {
	switch {
	case d == algo.Never:
		return "never"
	case d == 0:
		return "-"
	}
	return d.String()
}

func allowedWord(d algo.Decision) string {
	if d.Allowed {
		return "allowed"
	}
	return "refused"
}

func writeTable(w io.Writer, trace []sim.Request, run sim.Run) error {
	leaky := run.Spec.Algorithm == algo.LeakyBucket
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s\n", sim.Describe(run.Spec))
	fmt.Fprint(tw, "TIME\tKEY\tCOST\tDECISION\tREMAINING\tRETRY_AFTER\tRESET_AFTER")
	if leaky {
		fmt.Fprint(tw, "\tDELAY")
	}
	fmt.Fprintln(tw)
	for i, r := range trace {
		d := run.Decisions[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s", sim.FormatSeconds(r.Time), r.Key, r.Cost, allowedWord(d),
			d.Remaining, formatDuration(d.RetryAfter), formatDuration(d.ResetAfter))
		if leaky {
			fmt.Fprintf(tw, "\t%s", formatDuration(d.Delay))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "KEY\tADMITTED\tREFUSED")
	var admitted, refused int
	for _, c := range run.Summary(trace) {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", c.Key, c.Admitted, c.Refused)
		admitted += c.Admitted
		refused += c.Refused
	}
	fmt.Fprintf(tw, "(all keys)\t%d\t%d\n", admitted, refused)
	return tw.Flush()
}

func writeCompareTable(w io.Writer, trace []sim.Request, runs []sim.Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, run := range runs {
		fmt.Fprintf(tw, "# %s\n", sim.Describe(run.Spec))
	}
	header := func(first string) {
		fmt.Fprint(tw, first)
		for _, run := range runs {
			fmt.Fprintf(tw, "\t%s", run.Spec.Algorithm)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "\nRequests on which the algorithms disagree:")
	disagree := 0
	for i, r := range trace {
		same := true
		for _, run := range runs[1:] {
			same = same && run.Decisions[i].Allowed == runs[0].Decisions[i].Allowed
		}
		if same {
			continue
		}
		if disagree == 0 {
			header("TIME\tKEY\tCOST")
		}
		disagree++
		fmt.Fprintf(tw, "%s\t%s\t%d", sim.FormatSeconds(r.Time), r.Key, r.Cost)
		for _, run := range runs {
			fmt.Fprintf(tw, "\t%s", allowedWord(run.Decisions[i]))
		}
		fmt.Fprintln(tw)
	}
	if disagree == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	fmt.Fprintf(tw, "\nAdmitted per key (%d requests decided differently):\n", disagree)
	header("KEY\tREQUESTS")
	sums := make([][]sim.KeyCounts, len(runs))
	for i, run := range runs {
		sums[i] = run.Summary(trace)
	}
	totals := make([]int, len(runs))
	requests := 0
	for k, c := range sums[0] {
		fmt.Fprintf(tw, "%s\t%d", c.Key, c.Admitted+c.Refused)
		requests += c.Admitted + c.Refused
		for i := range runs {
			fmt.Fprintf(tw, "\t%d", sums[i][k].Admitted)
			totals[i] += sums[i][k].Admitted
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "(all keys)\t%d", requests)
	for _, n := range totals {
		fmt.Fprintf(tw, "\t%d", n)
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

type jsonSummary struct {
	Summary   bool   `json:"summary"`
	Algorithm string `json:"algorithm,omitempty"`
	Key       string `json:"key"`
	Admitted  int    `json:"admitted"`
	Refused   int    `json:"refused"`
}

func writeJSONL(w io.Writer, trace []sim.Request, runs []sim.Run, compare bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	name := func(run sim.Run) string {
		if compare {
			return run.Spec.Algorithm.String()
		}
		return ""
	}
	for i, r := range trace {
		for _, run := range runs {
			d := run.Decisions[i]
			err := enc.Encode(sim.NewJSONDecision(name(run), r, d))
			if err != nil {
				return err
			}
		}
	}
	for _, run := range runs {
		for _, c := range run.Summary(trace) {
			if err := enc.Encode(jsonSummary{Summary: true, Algorithm: name(run), Key: c.Key, Admitted: c.Admitted, Refused: c.Refused}); err != nil {
				return err
			}
		}
	}
	return nil
}
