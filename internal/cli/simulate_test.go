package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// simulateRun runs `limitd simulate args...` with stdin and returns exit
// code, stdout and stderr.
func simulateRun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Simulate(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// jsonLines decodes jsonl output into decisions and summaries.
func jsonLines(t *testing.T, out string) (decisions, summaries []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if m["summary"] == true {
			summaries = append(summaries, m)
		} else {
			decisions = append(decisions, m)
		}
	}
	return decisions, summaries
}

// TestSimulateIssueTable is the algorithm comparison table (limit 10 per 60 s) through
// the command, for each algorithm alone and for --compare. The traces are
// the ones docs/ALGORITHMS.md runs with `go run ./cmd/limitd simulate`, kept beside
// the binary (api's TestSimulateEndpointMatchesEngine reads them too).
func TestSimulateIssueTable(t *testing.T) {
	want := map[string]map[string]float64{
		"edge.trace":             {"fixed_window": 20, "sliding_log": 10, "sliding_window": 10, "token_bucket": 10, "leaky_bucket": 10},
		"early_then_later.trace": {"fixed_window": 20, "sliding_log": 20, "sliding_window": 15, "token_bucket": 20, "leaky_bucket": 20},
	}
	for trace, byAlgo := range want {
		path := filepath.Join("..", "..", "cmd", "limitd", "testdata", "simulate", trace)
		for alg, admitted := range byAlgo {
			code, out, errs := simulateRun(t, "", "--algorithm", alg, "--limit", "10", "--window", "60s", "--format", "jsonl", path)
			if code != 0 {
				t.Fatalf("%s %s: exit %d: %s", alg, trace, code, errs)
			}
			decisions, summaries := jsonLines(t, out)
			allowed := 0
			for _, d := range decisions {
				if d["allowed"] == true {
					allowed++
				}
			}
			if len(decisions) != 20 || float64(allowed) != admitted {
				t.Errorf("%s %s: %d of %d decisions allowed, want %v of 20", alg, trace, allowed, len(decisions), admitted)
			}
			if len(summaries) != 1 || summaries[0]["admitted"] != admitted || summaries[0]["refused"] != 20-admitted {
				t.Errorf("%s %s: summary %v, want admitted %v refused %v", alg, trace, summaries, admitted, 20-admitted)
			}
		}

		code, out, errs := simulateRun(t, "", "--compare", "--limit", "10", "--window", "60s", "--format", "jsonl", path)
		if code != 0 {
			t.Fatalf("--compare %s: exit %d: %s", trace, code, errs)
		}
		decisions, summaries := jsonLines(t, out)
		if len(decisions) != 5*20 {
			t.Fatalf("--compare %s: %d decision lines, want 100", trace, len(decisions))
		}
		for _, s := range summaries {
			if alg, _ := s["algorithm"].(string); s["admitted"] != byAlgo[alg] {
				t.Errorf("--compare %s: %s admitted %v, want %v", trace, alg, s["admitted"], byAlgo[alg])
			}
		}
		if len(summaries) != 5 {
			t.Errorf("--compare %s: %d summaries, want 5", trace, len(summaries))
		}

		// The table's "(all keys)" row lists the admitted counts in algorithm order.
		code, out, _ = simulateRun(t, "", "--compare", "--limit", "10", "--window", "60s", path)
		total := lastLineFields(t, out, "(all keys)")
		wantRow := []string{"(all", "keys)", "20"}
		for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket"} {
			wantRow = append(wantRow, jsonNumber(byAlgo[alg]))
		}
		if code != 0 || strings.Join(total, " ") != strings.Join(wantRow, " ") {
			t.Errorf("--compare table %s: total row %q, want %q\n%s", trace, total, wantRow, out)
		}
	}
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func lastLineFields(t *testing.T, out, prefix string) []string {
	t.Helper()
	var fields []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			fields = strings.Fields(line)
		}
	}
	if fields == nil {
		t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	}
	return fields
}

// TestSimulateJSONLFields checks every field against values worked out by
// hand: token bucket of 2 per 10 s refills one token every 5 s.
func TestSimulateJSONLFields(t *testing.T) {
	trace := "0 a\n0 a\n0 a\n2.5 a 0 # a peek\n7.5 a 1\n9 b 3\n"
	code, out, errs := simulateRun(t, trace, "--algorithm", "token_bucket", "--limit", "2", "--window", "10s", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := []string{
		`{"t":0,"key":"a","cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"reset_after_ms":5000,"delay_ms":0}`,
		`{"t":0,"key":"a","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"reset_after_ms":10000,"delay_ms":0}`,
		`{"t":0,"key":"a","cost":1,"allowed":false,"remaining":0,"retry_after_ms":5000,"reset_after_ms":10000,"delay_ms":0}`,
		`{"t":2.5,"key":"a","cost":0,"allowed":false,"remaining":0,"retry_after_ms":2500,"reset_after_ms":7500,"delay_ms":0}`,
		`{"t":7.5,"key":"a","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"reset_after_ms":7500,"delay_ms":0}`,
		`{"t":9,"key":"b","cost":3,"allowed":false,"remaining":2,"retry_after_ms":-1,"reset_after_ms":0,"delay_ms":0}`,
		// The peek is counted neither admitted nor refused.
		`{"summary":true,"key":"a","admitted":3,"refused":1}`,
		`{"summary":true,"key":"b","admitted":0,"refused":1}`,
	}
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSimulateTable: the table shows the leaky bucket's delays, durations
// exactly and "never" for an impossible cost.
func TestSimulateTable(t *testing.T) {
	trace := "0 a\n0 a\n0.000000001 a\n1 a 3\n"
	code, out, errs := simulateRun(t, trace, "--algorithm", "leaky_bucket", "--limit", "2", "--window", "10s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		rows = append(rows, strings.Fields(line))
	}
	want := [][]string{
		{"#", "leaky_bucket", "--limit", "2", "--window", "10s", "--burst", "2"},
		{"TIME", "KEY", "COST", "DECISION", "REMAINING", "RETRY_AFTER", "RESET_AFTER", "DELAY"},
		{"0", "a", "1", "allowed", "1", "-", "5s", "-"},
		{"0", "a", "1", "allowed", "0", "-", "10s", "5s"},
		{"0.000000001", "a", "1", "refused", "0", "4.999999999s", "9.999999999s", "-"},
		{"1", "a", "3", "refused", "0", "never", "9s", "-"},
		{},
		{"KEY", "ADMITTED", "REFUSED"},
		{"a", "2", "2"},
		{"(all", "keys)", "2", "2"},
	}
	if len(rows) < len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), out)
	}
	for i, w := range want {
		if got := rows[i]; strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %q, want %q\n%s", i, got, w, out)
		}
	}
}

func TestSimulateCompareTableShowsDisagreements(t *testing.T) {
	code, out, errs := simulateRun(t, "59 k\n60 k\n", "--compare", "--limit", "1", "--window", "60s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// At 60 s only the fixed window (a new window) admits.
	row := lastLineFields(t, out, "60 ")
	want := "60 k 1 allowed refused refused refused refused"
	if strings.Join(row, " ") != want {
		t.Fatalf("disagreement row %q, want %q\n%s", row, want, out)
	}
	if strings.Contains(out, "\n59 ") {
		t.Fatalf("the request all algorithms agree on is listed:\n%s", out)
	}
}

func TestSimulateReadsFileStdinAndFlagsAfterPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace")
	if err := os.WriteFile(path, []byte("1 x\n1 x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--format", "jsonl"}
	for name, c := range map[string]struct {
		stdin string
		args  []string
	}{
		"file":             {"", append(append([]string{}, base...), path)},
		"flags after path": {"", append([]string{path}, base...)},
		"stdin":            {"1 x\n1 x\n", base},
		"stdin dash":       {"1 x\n1 x\n", append(append([]string{}, base...), "-")},
	} {
		code, out, errs := simulateRun(t, c.stdin, c.args...)
		decisions, _ := jsonLines(t, out)
		if code != 0 || len(decisions) != 2 || decisions[0]["allowed"] != true || decisions[1]["allowed"] != false {
			t.Errorf("%s: exit %d, %v, stderr %s", name, code, decisions, errs)
		}
	}
}

// TestSimulateCalendar: a daily quota resets at local midnight.
func TestSimulateCalendar(t *testing.T) {
	// 2024-03-09 22:59:59 UTC is 23:59:59 in Paris; one second later a new day.
	trace := "1710025199 u\n1710025199 u\n1710025200 u\n"
	code, out, errs := simulateRun(t, trace, "--algorithm", "fixed_window", "--limit", "1", "--calendar", "day",
		"--timezone", "Europe/Paris", "--format", "jsonl")
	decisions, _ := jsonLines(t, out)
	if code != 0 || len(decisions) != 3 {
		t.Fatalf("exit %d, %d decisions: %s", code, len(decisions), errs)
	}
	if decisions[1]["allowed"] != false || decisions[1]["retry_after_ms"] != 1000.0 || decisions[2]["allowed"] != true {
		t.Fatalf("decisions %v", decisions)
	}
}

// TestSimulateMalformedTrace: an error names the line, the exit code is 2,
// and nothing is printed as if decided.
func TestSimulateMalformedTrace(t *testing.T) {
	tests := []struct {
		name, trace, msg string
	}{
		{"missing key", "1 a\n\n# comment\n2\n", "line 4: missing key"},
		{"bad time", "1 a\nsoon a\n", `line 2: invalid time "soon"`},
		{"negative time", "-1 a\n", `line 1: invalid time "-1"`},
		{"exponent", "1e3 a\n", `line 1: invalid time "1e3"`},
		{"too precise", "1.0000000001 a\n", "line 1: invalid time \"1.0000000001\": more than 9 decimal places"},
		{"empty fraction", "1. a\n", `line 1: invalid time "1."`},
		{"too late", "99999999999 a\n", "line 1: time \"99999999999\" is too late"},
		{"bad cost", "1 a one\n", `line 1: invalid cost "one"`},
		{"negative cost", "1 a -2\n", `line 1: invalid cost "-2"`},
		{"extra field", "1 a 1 x\n", "line 1: 4 fields"},
		{"out of order", "5 a\n# gap\n4.5 b\n", "line 3: time 4.5 is before line 1's 5"},
	}
	for _, tt := range tests {
		code, out, errs := simulateRun(t, tt.trace, "--algorithm", "sliding_log", "--limit", "5", "--window", "1s")
		if code != 2 || out != "" || !strings.Contains(errs, tt.msg) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2, no output, %q", tt.name, code, out, errs, tt.msg)
		}
	}
	code, out, errs := simulateRun(t, "", "--algorithm", "sliding_log", "--limit", "5", "--window", "1s",
		filepath.Join(t.TempDir(), "missing"))
	if code != 1 || out != "" || !strings.Contains(errs, "missing") {
		t.Errorf("missing file: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestSimulateFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no algorithm", []string{"--limit", "1", "--window", "1s"}, "--algorithm is required"},
		{"unknown algorithm", []string{"--algorithm", "gcra", "--limit", "1", "--window", "1s"}, "--algorithm: unknown algorithm"},
		{"no limit", []string{"--algorithm", "fixed_window", "--window", "1s"}, "--limit: "},
		{"no window", []string{"--algorithm", "fixed_window", "--limit", "1"}, "--window: required"},
		{"count-refused elsewhere", []string{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--count-refused"}, "--count-refused: only allowed with sliding_log"},
		{"bad zone", []string{"--algorithm", "fixed_window", "--limit", "1", "--calendar", "day", "--timezone", "Moon/Base"}, "--timezone: unknown time zone"},
		{"bad format", []string{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--format", "csv"}, "--format: want table or jsonl"},
		{"compare with algorithm", []string{"--compare", "--algorithm", "fixed_window", "--limit", "1", "--window", "1s"}, "exclusive"},
		{"compare with calendar", []string{"--compare", "--limit", "1", "--calendar", "day"}, "--calendar cannot be used with --compare"},
		{"compare bad burst", []string{"--compare", "--limit", "1", "--window", "1s", "--burst", "-3"}, "--burst: "},
		{"two traces", []string{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "a", "b"}, "one trace at most"},
		{"unknown flag", []string{"--rate", "5"}, "unknown flag --rate"},
		{"close to a flag", []string{"--limt", "5"}, "unknown flag --limt (did you mean --limit?); run 'limitd simulate --help' for the flags"},
	}
	for _, tt := range tests {
		code, out, errs := simulateRun(t, "1 a\n", tt.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tt.msg) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tt.name, code, out, errs, tt.msg)
		}
	}
}

func TestSimulateUsageDocumentsEveryFlag(t *testing.T) {
	code, out, errs := simulateRun(t, "", "--help")
	if code != 0 || out != "" {
		t.Fatalf("--help: exit %d, stdout %q", code, out)
	}
	fs, _ := newSimulateFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(errs, "-"+f.Name+" ") && !strings.Contains(errs, "-"+f.Name+"\n") {
			t.Errorf("usage does not document --%s", f.Name)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no usage text", f.Name)
		}
	})
	for _, s := range []string{"<seconds> <key> [<cost>]", "retry_after_ms", "--compare"} {
		if !strings.Contains(errs, s) {
			t.Errorf("usage does not mention %q", s)
		}
	}
}

// TestSimulateCompareBucketAndLogOptions: --burst applies to the buckets and
// --count-refused to sliding_log only; --compare still runs every algorithm.
func TestSimulateCompareBucketAndLogOptions(t *testing.T) {
	code, out, errs := simulateRun(t, "0 k\n0 k\n0 k\n", "--compare", "--limit", "1", "--window", "60s",
		"--burst", "3", "--count-refused", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	_, summaries := jsonLines(t, out)
	admitted := map[string]any{}
	for _, s := range summaries {
		admitted[fmt.Sprint(s["algorithm"])] = s["admitted"]
	}
	// Three requests at once: the buckets (burst 3) admit all, the others one.
	want := map[string]any{"fixed_window": 1.0, "sliding_log": 1.0, "sliding_window": 1.0, "token_bucket": 3.0, "leaky_bucket": 3.0}
	if fmt.Sprint(admitted) != fmt.Sprint(want) {
		t.Fatalf("admitted %v, want %v\n%s", admitted, want, out)
	}
}

// TestSimulateLongLogInPlace: a sliding_log of 20,000 entries on one key is
// updated in place, not copied per request: allocations stay far below one
// per request (a copy per request would be 20,000 of them).
func TestSimulateLongLogInPlace(t *testing.T) {
	s, err := algo.Config{Algorithm: "sliding_log", Limit: 20_000, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	trace := make([]simRequest, 20_000)
	for i := range trace {
		trace[i] = simRequest{t: int64(i) * int64(time.Millisecond), key: "k", cost: 1}
	}
	var run simRun
	allocs := testing.AllocsPerRun(1, func() {
		if run, err = simulate(s, trace); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 200 {
		t.Errorf("%.0f allocations for %d requests: the log is copied", allocs, len(trace))
	}
	for i, d := range run.decisions {
		if !d.Allowed || d.Remaining != int64(len(trace)-1-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
}
