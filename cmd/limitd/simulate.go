package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/limitd/limitd/algo"
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

func newSimulateFlagSet(out io.Writer) (*flag.FlagSet, *simulateFlags) {
	f := &simulateFlags{}
	fs := flag.NewFlagSet("limitd simulate", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.cfg.Algorithm, "algorithm", "", "fixed_window, sliding_log, sliding_window, token_bucket or leaky_bucket (required unless --compare)")
	fs.Int64Var(&f.cfg.Limit, "limit", 0, "requests (total cost) allowed per window (required)")
	fs.StringVar(&f.cfg.Window, "window", "", "window: a duration such as 60s, 1h30m, 500ms or 7d (required unless --calendar)")
	fs.Int64Var(&f.cfg.Burst, "burst", 0, "bucket capacity for token_bucket and leaky_bucket (default: = limit)")
	fs.BoolVar(&f.cfg.CountRefused, "count-refused", false, "sliding_log only: log refused requests too (a client that keeps sending too fast gets nothing through)")
	fs.StringVar(&f.cfg.Calendar, "calendar", "", "fixed_window only: day, week (from Monday) or month windows in --timezone, instead of --window")
	fs.StringVar(&f.cfg.Timezone, "timezone", "", "IANA time zone of --calendar windows, e.g. Europe/Paris (default UTC)")
	fs.StringVar(&f.format, "format", "table", "output format: table or jsonl")
	fs.BoolVar(&f.compare, "compare", false, "run all five algorithms on the trace (--burst applies to the buckets, --count-refused to sliding_log)")
	fs.Usage = func() {
		fmt.Fprint(out, simulateUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// simRequest is one line of a trace.
type simRequest struct {
	t    int64 // ns since the epoch
	key  string
	cost int64
}

// simRun is one algorithm's decisions over the whole trace.
type simRun struct {
	spec      algo.Spec
	decisions []algo.Decision // one per request
}

// runSimulate is `limitd simulate`. Exit status: 0 after printing the
// decisions, 2 for bad flags or a malformed trace, 1 when the trace cannot be
// read.
func runSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, f := newSimulateFlagSet(stderr)
	// Flags may follow the trace path: parse, take one argument, repeat.
	var paths []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
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
	trace, err := parseTrace(in)
	if err != nil {
		var le *traceLineError
		if errors.As(err, &le) {
			return fail(2, "%s: %v", name, err)
		}
		return fail(1, "read %s: %v", name, err)
	}

	runs := make([]simRun, len(specs))
	for i, s := range specs {
		if runs[i], err = simulate(s, trace); err != nil {
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
	var specs []algo.Spec
	for _, a := range algo.Algorithms {
		c := f.cfg
		c.Algorithm = a.String()
		if !a.HasBurst() {
			c.Burst = 0
		}
		if !a.HasCountRefused() {
			c.CountRefused = false
		}
		s, err := c.Spec()
		if err != nil {
			return nil, flagError(err)
		}
		specs = append(specs, s)
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

// traceLineError is a malformed trace line.
type traceLineError struct {
	line int
	msg  string
}

func (e *traceLineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// parseTrace reads a whole trace, so that a malformed line is reported before
// anything is decided.
func parseTrace(r io.Reader) ([]simRequest, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var trace []simRequest
	prevLine := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, a ...any) ([]simRequest, error) {
			return nil, &traceLineError{line: n, msg: fmt.Sprintf(format, a...)}
		}
		if len(fields) > 3 {
			return bad("%d fields, want <seconds> <key> [<cost>]", len(fields))
		}
		if len(fields) < 2 {
			return bad("missing key, want <seconds> <key> [<cost>]")
		}
		t, err := parseSeconds(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		req := simRequest{t: t, key: fields[1], cost: 1}
		if len(fields) == 3 {
			if req.cost, err = strconv.ParseInt(fields[2], 10, 64); err != nil || req.cost < 0 {
				return bad("invalid cost %q: want a whole number ≥ 0", fields[2])
			}
		}
		if len(trace) > 0 && t < trace[len(trace)-1].t {
			return bad("time %s is before line %d's %s: the trace must be in time order",
				fields[0], prevLine, formatSeconds(trace[len(trace)-1].t))
		}
		trace = append(trace, req)
		prevLine = n
	}
	return trace, sc.Err()
}

// parseSeconds reads a decimal number of seconds exactly: whole seconds and
// up to nine decimal places.
func parseSeconds(s string) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(d string) bool { return d != "" && strings.Trim(d, "0123456789") == "" }
	if !digits(whole) || dot && !digits(frac) {
		return 0, fmt.Errorf("invalid time %q: want seconds since the epoch such as 35 or 35.25", s)
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("invalid time %q: more than 9 decimal places (nanoseconds)", s)
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec > algo.MaxTime/int64(time.Second) {
		return 0, fmt.Errorf("time %q is too late: at most %d seconds", s, algo.MaxTime/int64(time.Second))
	}
	ns := int64(0)
	if frac != "" {
		ns, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return sec*int64(time.Second) + ns, nil
}

// formatSeconds prints ns as exact decimal seconds: "59", "35.25".
func formatSeconds(ns int64) string {
	s := strconv.FormatInt(ns/int64(time.Second), 10)
	if frac := ns % int64(time.Second); frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", frac), "0")
	}
	return s
}

// formatMillis prints ns as exact decimal milliseconds; Never is -1.
func formatMillis(ns int64) string {
	if ns < 0 {
		return "-1"
	}
	s := strconv.FormatInt(ns/int64(time.Millisecond), 10)
	if frac := ns % int64(time.Millisecond); frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%06d", frac), "0")
	}
	return s
}

// simulate decides every request of the trace under s, one state per key.
// Each state is this function's own, so it is updated in place: a long
// sliding_log is not copied at every request.
func simulate(s algo.Spec, trace []simRequest) (simRun, error) {
	run := simRun{spec: s, decisions: make([]algo.Decision, len(trace))}
	states := map[string][]byte{}
	for i, r := range trace {
		d, next, err := algo.DecideInPlace(&s, states[r.key], r.t, r.cost)
		if err != nil {
			return simRun{}, fmt.Errorf("%v at %s, key %q: %w", s.Algorithm, formatSeconds(r.t), r.key, err)
		}
		if next == nil {
			delete(states, r.key)
		} else {
			states[r.key] = next
		}
		run.decisions[i] = d
	}
	return run, nil
}

// keyCounts is the per-key summary of one run, keys in order of first
// appearance.
type keyCounts struct {
	key               string
	admitted, refused int
}

func (run simRun) summary(trace []simRequest) []keyCounts {
	index := map[string]int{}
	var out []keyCounts
	for i, r := range trace {
		k, ok := index[r.key]
		if !ok {
			k = len(out)
			index[r.key] = k
			out = append(out, keyCounts{key: r.key})
		}
		switch {
		case r.cost == 0: // a peek admits nothing
		case run.decisions[i].Allowed:
			out[k].admitted++
		default:
			out[k].refused++
		}
	}
	return out
}

func formatDuration(ns int64) string {
	switch {
	case ns == algo.Never:
		return "never"
	case ns == 0:
		return "-"
	}
	return time.Duration(ns).String()
}

func allowedWord(d algo.Decision) string {
	if d.Allowed {
		return "allowed"
	}
	return "refused"
}

func writeTable(w io.Writer, trace []simRequest, run simRun) error {
	leaky := run.spec.Algorithm == algo.LeakyBucket
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s\n", describeSpec(run.spec))
	fmt.Fprint(tw, "TIME\tKEY\tCOST\tDECISION\tREMAINING\tRETRY_AFTER\tRESET_AFTER")
	if leaky {
		fmt.Fprint(tw, "\tDELAY")
	}
	fmt.Fprintln(tw)
	for i, r := range trace {
		d := run.decisions[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s", formatSeconds(r.t), r.key, r.cost, allowedWord(d),
			d.Remaining, formatDuration(d.RetryAfter), formatDuration(d.ResetAfter))
		if leaky {
			fmt.Fprintf(tw, "\t%s", formatDuration(d.Delay))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "KEY\tADMITTED\tREFUSED")
	var admitted, refused int
	for _, c := range run.summary(trace) {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", c.key, c.admitted, c.refused)
		admitted += c.admitted
		refused += c.refused
	}
	fmt.Fprintf(tw, "(all keys)\t%d\t%d\n", admitted, refused)
	return tw.Flush()
}

func writeCompareTable(w io.Writer, trace []simRequest, runs []simRun) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, run := range runs {
		fmt.Fprintf(tw, "# %s\n", describeSpec(run.spec))
	}
	header := func(first string) {
		fmt.Fprint(tw, first)
		for _, run := range runs {
			fmt.Fprintf(tw, "\t%s", run.spec.Algorithm)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "\nRequests on which the algorithms disagree:")
	disagree := 0
	for i, r := range trace {
		same := true
		for _, run := range runs[1:] {
			same = same && run.decisions[i].Allowed == runs[0].decisions[i].Allowed
		}
		if same {
			continue
		}
		if disagree == 0 {
			header("TIME\tKEY\tCOST")
		}
		disagree++
		fmt.Fprintf(tw, "%s\t%s\t%d", formatSeconds(r.t), r.key, r.cost)
		for _, run := range runs {
			fmt.Fprintf(tw, "\t%s", allowedWord(run.decisions[i]))
		}
		fmt.Fprintln(tw)
	}
	if disagree == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	fmt.Fprintf(tw, "\nAdmitted per key (%d requests decided differently):\n", disagree)
	header("KEY\tREQUESTS")
	sums := make([][]keyCounts, len(runs))
	for i, run := range runs {
		sums[i] = run.summary(trace)
	}
	totals := make([]int, len(runs))
	requests := 0
	for k, c := range sums[0] {
		fmt.Fprintf(tw, "%s\t%d", c.key, c.admitted+c.refused)
		requests += c.admitted + c.refused
		for i := range runs {
			fmt.Fprintf(tw, "\t%d", sums[i][k].admitted)
			totals[i] += sums[i][k].admitted
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

// describeSpec is the spec in its flag form, for table headers.
func describeSpec(s algo.Spec) string {
	c := s.Config()
	out := fmt.Sprintf("%s --limit %d", c.Algorithm, c.Limit)
	if c.Calendar != "" {
		out += " --calendar " + c.Calendar
		if c.Timezone != "" {
			out += " --timezone " + c.Timezone
		}
	} else {
		out += " --window " + c.Window
	}
	if c.Burst != 0 {
		out += fmt.Sprintf(" --burst %d", c.Burst)
	}
	if c.CountRefused {
		out += " --count-refused"
	}
	return out
}

type jsonDecision struct {
	Algorithm    string      `json:"algorithm,omitempty"`
	T            json.Number `json:"t"`
	Key          string      `json:"key"`
	Cost         int64       `json:"cost"`
	Allowed      bool        `json:"allowed"`
	Remaining    int64       `json:"remaining"`
	RetryAfterMs json.Number `json:"retry_after_ms"`
	ResetAfterMs json.Number `json:"reset_after_ms"`
	DelayMs      json.Number `json:"delay_ms"`
}

type jsonSummary struct {
	Summary   bool   `json:"summary"`
	Algorithm string `json:"algorithm,omitempty"`
	Key       string `json:"key"`
	Admitted  int    `json:"admitted"`
	Refused   int    `json:"refused"`
}

func writeJSONL(w io.Writer, trace []simRequest, runs []simRun, compare bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	name := func(run simRun) string {
		if compare {
			return run.spec.Algorithm.String()
		}
		return ""
	}
	for i, r := range trace {
		for _, run := range runs {
			d := run.decisions[i]
			err := enc.Encode(jsonDecision{
				Algorithm:    name(run),
				T:            json.Number(formatSeconds(r.t)),
				Key:          r.key,
				Cost:         r.cost,
				Allowed:      d.Allowed,
				Remaining:    d.Remaining,
				RetryAfterMs: json.Number(formatMillis(d.RetryAfter)),
				ResetAfterMs: json.Number(formatMillis(d.ResetAfter)),
				DelayMs:      json.Number(formatMillis(d.Delay)),
			})
			if err != nil {
				return err
			}
		}
	}
	for _, run := range runs {
		for _, c := range run.summary(trace) {
			if err := enc.Encode(jsonSummary{Summary: true, Algorithm: name(run), Key: c.key, Admitted: c.admitted, Refused: c.refused}); err != nil {
				return err
			}
		}
	}
	return nil
}
