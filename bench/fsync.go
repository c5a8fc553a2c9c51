package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// FsyncProbeAppends is how many appends ProbeFsync times: enough for a p99,
// brief enough (tens of milliseconds on an SSD) to run before every bench.
const FsyncProbeAppends = 200

// fsyncProbeRecord is the size of one probe append: a few checks' Raft
// entry, which like every log append rewrites its last partial block.
const fsyncProbeRecord = 512

// FsyncProbe is how long the disk took to make an append durable, timed
// before a run in the system's data directory. Every durable check waits for
// at least one such append (a Raft log's or Redis's AOF), so it is the
// floor of the run's latency on that disk, and it moves between hours on a
// shared machine: a run is read beside the disk it had.
type FsyncProbe struct {
	Dir           string
	Appends       int
	P50, P99, Max time.Duration
}

// ProbeFsync times n appends of a small record, each followed by fsync, in
// a new file in dir (removed afterwards), as a write-ahead log does.
func ProbeFsync(dir string, n int) (FsyncProbe, error) {
	return probeFsync(dir, n, time.Now)
}

func probeFsync(dir string, n int, now func() time.Time) (p FsyncProbe, err error) {
	if n < 1 {
		return p, fmt.Errorf("fsync probe: appends must be at least 1, got %d", n)
	}
	f, err := os.CreateTemp(dir, ".limitd-fsync-probe-")
	if err != nil {
		return p, fmt.Errorf("fsync probe in %s: %w", dir, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("fsync probe: %w", cerr)
		}
		if rerr := os.Remove(f.Name()); err == nil && rerr != nil {
			err = fmt.Errorf("fsync probe: %w", rerr)
		}
	}()
	rec := make([]byte, fsyncProbeRecord)
	took := make([]time.Duration, n)
	for i := range took {
		rec[0] = byte(i) // a record differs from the one before, as log entries do
		began := now()
		if _, err := f.Write(rec); err != nil {
			return p, fmt.Errorf("fsync probe: write %s: %w", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			return p, fmt.Errorf("fsync probe: fsync %s: %w", f.Name(), err)
		}
		took[i] = now().Sub(began)
	}
	slices.Sort(took)
	// The rank rule of Histogram.Quantile, on the exact values.
	at := func(q float64) time.Duration { return took[int(math.Ceil(q*float64(n)))-1] }
	return FsyncProbe{Dir: dir, Appends: n, P50: at(0.50), P99: at(0.99), Max: at(1)}, nil
}

// summary is "append + fsync p50 270µs  p99 1.10ms  max 2.00ms (200 appends in
// /tmp/x, before the run)".
func (p FsyncProbe) summary() string {
	return fmt.Sprintf("append + fsync p50 %s  p99 %s  max %s (%d appends in %s, before the run)",
		fmtDuration(p.P50), fmtDuration(p.P99), fmtDuration(p.Max), p.Appends, p.Dir)
}
