package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func sampleResult() Result {
	return Result{
		System: "limitd", Label: "3 nodes", Target: "http://127.0.0.1:1", Nodes: 3,
		Algorithm: "sliding_window", Limit: 100, Window: "1s", Cost: 1,
		Concurrency: 64, Keys: 100000, Dist: DistUniform, Batch: 1,
		Elapsed: 2 * time.Second, Requests: 1010, Checks: 1010, Allowed: 900, Refused: 100, Errors: 10,
		ErrorsByClass: map[string]int64{"5xx": 7, "timeout": 3}, LastError: "HTTP 503 unavailable",
		P50: 1234567 * time.Nanosecond, P90: 2 * time.Millisecond, P99: 1500 * time.Microsecond, Max: 40 * time.Millisecond,
		DiskBytes: 25 << 20, RSSBytes: 3 << 30,
	}
}

func TestResultJSONLine(t *testing.T) {
	r := sampleResult()
	var buf bytes.Buffer
	if err := WriteJSONLine(&buf, r); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Fatalf("not one line: %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	// 1000 decided checks in 2 s; 1010 requests in 2 s.
	want := map[string]any{
		"system": "limitd", "checks_per_sec": 500.0, "requests_per_sec": 505.0, "p50_ms": 1.234567,
		"p99_ms": 1.5, "max_ms": 40.0, "allowed": 900.0, "refused": 100.0, "errors": 10.0, "duration_s": 2.0,
		"batch": 1.0, "dist": "uniform", "nodes": 3.0,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if _, ok := m["interrupted"]; ok {
		t.Error("interrupted present though false")
	}
	back, err := ReadJSONLines(strings.NewReader("\n" + buf.String() + "\n" + buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 {
		t.Fatalf("read %d results, want 2", len(back))
	}
	got := back[0]
	if got.P50 != r.P50 || got.Max != r.Max || got.Elapsed != r.Elapsed || got.ChecksPerSec() != r.ChecksPerSec() ||
		got.ErrorsByClass["timeout"] != 3 || got.Label != r.Label || got.LastError != r.LastError ||
		got.DiskBytes != r.DiskBytes || got.RSSBytes != r.RSSBytes {
		t.Errorf("round trip changed the result:\n got %+v\nwant %+v", got, r)
	}
	if _, err := ReadJSONLines(strings.NewReader("{\"system\":1}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: err %v, want one naming line 1", err)
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sampleResult()); err != nil {
		t.Fatal(err)
	}
	out := squeeze(buf.String())
	for _, want := range []string{
		"checks/s 500\n",
		"allowed 900 (89.1%)",
		"refused 100 (9.9%)",
		"errors 10 (1.0%) (5xx 7, timeout 3)",
		"p50 1.23ms p90 2.00ms p99 1.50ms p99.9 0 max 40.0ms",
		"limitd (3 nodes) http://127.0.0.1:1",
		"concurrency 64, 100,000 keys uniform, sliding_window 100 per 1s",
		"largest node 25.0 MiB on disk (262 bytes per key of --keys), RSS 3.00 GiB",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "requests/s") {
		t.Errorf("requests/s shown for single checks:\n%s", out)
	}
	r := sampleResult()
	r.Batch, r.Interrupted = 100, true
	buf.Reset()
	WriteTable(&buf, r)
	batchOut := squeeze(buf.String())
	for _, want := range []string{"requests/s 505\n", "batches of 100", "(interrupted)", "latency/request"} {
		if !strings.Contains(batchOut, want) {
			t.Errorf("batch table lacks %q:\n%s", want, batchOut)
		}
	}
}

// squeeze collapses the table's column padding to single spaces.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func TestWriteComparisonRatios(t *testing.T) {
	mk := func(system, dist string, batch int, checks int64) Result {
		return Result{System: system, Dist: dist, Batch: batch, Allowed: checks, Elapsed: time.Second}
	}
	results := []Result{
		mk("redis", DistUniform, 1, 20000),
		mk("redis", DistZipf, 1, 25000),
		mk("limitd", DistUniform, 1, 10000),   // 0.50x redis uniform
		mk("limitd", DistZipf, 1, 30000),      // 1.20x redis zipf
		mk("limitd", DistUniform, 100, 80000), // 4.00x redis uniform single checks
		mk("limitd", "other", 1, 5),           // no baseline
	}
	var buf bytes.Buffer
	if err := WriteComparison(&buf, results, "redis"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], "vs redis") {
		t.Fatalf("want a header and 6 rows:\n%s", buf.String())
	}
	wantEnd := []string{"-", "-", "0.50x", "1.20x", "4.00x", "-"}
	for i, w := range wantEnd {
		// The ratio, then the CPU per check and fsync columns ("-": not
		// measured).
		if f := strings.Fields(lines[i+1]); f[len(f)-3] != w || f[len(f)-2] != "-" || f[len(f)-1] != "-" {
			t.Errorf("row %d ends %q, want %q - -: %s", i, f[len(f)-3:], w, lines[i+1])
		}
	}
	if !strings.Contains(lines[5], "80,000") {
		t.Errorf("batch row lacks its checks/s: %s", lines[5])
	}
}

func TestFormatting(t *testing.T) {
	ints := map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"}
	for n, want := range ints {
		if got := formatInt(n); got != want {
			t.Errorf("formatInt(%d) = %q, want %q", n, got, want)
		}
	}
	durs := map[time.Duration]string{
		0: "0", 999: "999ns", 1500: "1.50µs", 25 * time.Millisecond: "25.0ms", 123456789: "123ms", 2 * time.Second: "2.00s",
	}
	for d, want := range durs {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%d) = %q, want %q", d, got, want)
		}
	}
}
