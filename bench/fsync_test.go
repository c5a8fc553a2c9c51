package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stepNow is a clock for probeFsync: each append takes as long as the next
// of steps (read on the append's two calls: its start and its end).
func stepNow(steps []time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	calls := 0
	return func() time.Time {
		if calls%2 == 1 {
			t = t.Add(steps[calls/2])
		}
		calls++
		return t
	}
}

// The quantiles are of the timed appends, and the probe's file is gone
// afterwards: the data directory is left as it was.
func TestProbeFsync(t *testing.T) {
	dir := t.TempDir()
	// 100 appends taking 100ms, 99ms, ..., 1ms: sorted, the median is the
	// 50th (50ms), the p99 the 99th (99ms), the max 100ms.
	steps := make([]time.Duration, 100)
	for i := range steps {
		steps[i] = time.Duration(100-i) * time.Millisecond
	}
	p, err := probeFsync(dir, len(steps), stepNow(steps))
	if err != nil {
		t.Fatal(err)
	}
	want := FsyncProbe{Dir: dir, Appends: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if p != want {
		t.Errorf("probe = %+v, want %+v", p, want)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the probe left %d files in %s", len(left), dir)
	}
	if s := p.summary(); !strings.Contains(s, "append + fsync p50 50.0ms  p99 99.0ms  max 100ms (100 appends in "+dir) {
		t.Errorf("summary %q", s)
	}
}

// The real probe writes and syncs: every append is timed.
func TestProbeFsyncOnDisk(t *testing.T) {
	p, err := ProbeFsync(t.TempDir(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if p.Appends != 5 || p.P50 <= 0 || p.P50 > p.P99 || p.P99 > p.Max {
		t.Errorf("probe = %+v: want 5 appends, 0 < p50 <= p99 <= max", p)
	}
}

func TestProbeFsyncErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := ProbeFsync(missing, 5); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("probe in a missing directory: %v, want an error naming it", err)
	}
	if _, err := ProbeFsync(t.TempDir(), 0); err == nil {
		t.Error("probe of 0 appends: no error")
	}
}

// Run probes the directory first when asked, and refuses to run when the
// probe fails (a run beside no disk figure would be read wrongly).
func TestRunProbesFsync(t *testing.T) {
	w := testWorkload()
	w.FsyncProbeDir = t.TempDir()
	r, err := Run(context.Background(), w, &fakeTarget{keys: 50}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fsync == nil || r.Fsync.Appends != FsyncProbeAppends || r.Fsync.Dir != w.FsyncProbeDir {
		t.Fatalf("Fsync = %+v, want %d appends in %s", r.Fsync, FsyncProbeAppends, w.FsyncProbeDir)
	}

	w.FsyncProbeDir = ""
	if r, err = Run(context.Background(), w, &fakeTarget{keys: 50}, nil); err != nil || r.Fsync != nil {
		t.Errorf("without a directory: Fsync = %+v, err %v; want none", r.Fsync, err)
	}

	w.FsyncProbeDir = filepath.Join(t.TempDir(), "missing")
	f := &fakeTarget{keys: 50}
	if _, err := Run(context.Background(), w, f, nil); err == nil || f.calls.Load() != 0 {
		t.Errorf("probe in a missing directory: err %v after %d checks; want an error before any", err, f.calls.Load())
	}
}

// The probe travels in the JSON line and shows in both tables.
func TestFsyncReported(t *testing.T) {
	r := Result{System: "limitd", Elapsed: time.Second, Allowed: 10, Checks: 10, Requests: 10,
		Fsync: &FsyncProbe{Dir: "/data", Appends: 200, P50: 270 * time.Microsecond, P99: 1100 * time.Microsecond, Max: 2 * time.Millisecond}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"fsync_p50_ms":0.27`, `"fsync_p99_ms":1.1`, `"fsync_max_ms":2`, `"fsync_appends":200`, `"fsync_dir":"/data"`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("JSON %s lacks %s", b, field)
		}
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Fsync == nil || *back.Fsync != *r.Fsync {
		t.Errorf("read back Fsync = %+v, want %+v", back.Fsync, r.Fsync)
	}

	var table bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "disk") || !strings.Contains(table.String(), "append + fsync p50 270µs  p99 1.10ms  max 2.00ms (200 appends in /data, before the run)") {
		t.Errorf("table lacks the disk row:\n%s", table.String())
	}
	var cmp bytes.Buffer
	if err := WriteComparison(&cmp, []Result{r}, "redis"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cmp.String(), "fsync p50/p99") || !strings.Contains(cmp.String(), "270µs/1.10ms") {
		t.Errorf("comparison lacks the fsync column:\n%s", cmp.String())
	}

	// A run without the probe says nothing about the disk.
	r.Fsync = nil
	b, _ = json.Marshal(r)
	if bytes.Contains(b, []byte("fsync")) {
		t.Errorf("JSON without a probe: %s", b)
	}
	table.Reset()
	_ = WriteTable(&table, r)
	if strings.Contains(table.String(), "append + fsync") {
		t.Errorf("table without a probe:\n%s", table.String())
	}
}

// The probe's quantiles follow Histogram.Quantile's rank rule, for any
// number of appends (values in nanoseconds, which a Histogram holds exactly).
func TestProbeFsyncRanksLikeHistogram(t *testing.T) {
	for _, n := range []int{1, 7, 100, 150, 200} {
		steps := make([]time.Duration, n)
		var h Histogram
		for i := range steps {
			steps[i] = time.Duration(n - i)
			h.Record(steps[i])
		}
		p, err := probeFsync(t.TempDir(), n, stepNow(steps))
		if err != nil {
			t.Fatal(err)
		}
		if p.P50 != h.Quantile(0.50) || p.P99 != h.Quantile(0.99) || p.Max != h.Max() {
			t.Errorf("n=%d: probe p50 %v p99 %v max %v, histogram %v %v %v",
				n, p.P50, p.P99, p.Max, h.Quantile(0.50), h.Quantile(0.99), h.Max())
		}
	}
}
