package daemon

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The default reserve fits the disk: the smaller of 256 MiB and 25% of the
// file system, so a 160 MiB data directory keeps 40 MiB (a fixed 256 MiB
// refused every new key there) and a large one 256 MiB; 0 MiB is no guard
// and 0% no cap.
func TestDiskReserveDefault(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		minMiB, percent int64
		total, want     uint64
	}{
		{DefaultMinFreeDiskMiB, DefaultMinFreeDiskPercent, 160 * mib, 40 * mib},
		{DefaultMinFreeDiskMiB, DefaultMinFreeDiskPercent, 1 << 40, 256 * mib},
		{DefaultMinFreeDiskMiB, DefaultMinFreeDiskPercent, 1024 * mib, 256 * mib},
		{0, DefaultMinFreeDiskPercent, 160 * mib, 0},
		{100, 0, 160 * mib, 100 * mib},
		{100, 50, 160 * mib, 80 * mib},
	} {
		if got := diskReserve(c.minMiB, c.percent, c.total); got != c.want {
			t.Errorf("diskReserve(%d MiB, %d%%, %d MiB) = %d MiB, want %d", c.minMiB, c.percent, c.total>>20, got>>20, c.want>>20)
		}
	}
	var b boundsFlags
	b.minFreeDiskPercent = 101
	if b.validate() == nil {
		t.Error("--min-free-disk-percent 101 accepted")
	}
}

// --max-inline-keys-percent: its default, parsed by serve's flag set, is
// stamped by the leader as that share of --max-keys; 0 in either is no
// inline bound, and out-of-range percentages are refused.
func TestMaxInlineKeysPercentFlag(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var b boundsFlags
	addBoundsFlags(fs, &b)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	g := &diskGuard{}
	if got, want := b.checkBounds(g)().MaxInlineKeys, int64(DefaultMaxKeys*DefaultMaxInlineKeysPercent/100); got != want || want == 0 {
		t.Fatalf("default MaxInlineKeys %d, want %d", got, want)
	}
	for _, c := range []struct {
		args []string
		want int64
	}{
		{[]string{"--max-keys", "1000", "--max-inline-keys-percent", "30"}, 300},
		{[]string{"--max-keys", "1000", "--max-inline-keys-percent", "0"}, 0},
		{[]string{"--max-keys", "0", "--max-inline-keys-percent", "30"}, 0},
		{[]string{"--max-keys", "3", "--max-inline-keys-percent", "10"}, 1},
		{[]string{"--max-keys", "1000", "--max-inline-keys-percent", "100"}, 1000},
		{[]string{"--max-keys", "4611686018427387904", "--max-inline-keys-percent", "50"}, 2305843009213693952},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var b boundsFlags
		addBoundsFlags(fs, &b)
		if err := fs.Parse(c.args); err != nil || b.validate() != nil {
			t.Fatalf("%v: %v %v", c.args, err, b.validate())
		}
		if got := b.checkBounds(g)().MaxInlineKeys; got != c.want {
			t.Errorf("%v: MaxInlineKeys %d, want %d", c.args, got, c.want)
		}
	}
	for _, p := range []int64{-1, 101} {
		b := boundsFlags{maxInlineKeysPercent: p}
		if b.validate() == nil {
			t.Errorf("--max-inline-keys-percent %d accepted", p)
		}
	}
}

// The guard trips when the free space left after the snapshots Raft has yet
// to take (3 copies of the state file, less what the snapshot directory
// holds) and the log's growth to its working size is under the reserve, clears only 10% above it, and tells its
// listener each change once.
func TestDiskGuardCountsSnapshotsToCome(t *testing.T) {
	const mib = 1 << 20
	dir := t.TempDir()
	state := func(n int64) {
		f, err := os.OpenFile(filepath.Join(dir, "fsm.db"), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(n); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	snaps := func(n int64) {
		d := filepath.Join(dir, "snapshots", "1-2-3")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "state.bin"), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var free uint64 = 100 * mib
	g := &diskGuard{dir: dir, minMiB: DefaultMinFreeDiskMiB, percent: DefaultMinFreeDiskPercent, logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		space: func(string) (uint64, uint64, bool) { return free, 160 * mib, true }, now: time.Now}
	// A log at its working size: nothing of it to come.
	if err := os.MkdirAll(filepath.Join(dir, "raft-wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "raft-wal", "1.wal"), make([]byte, logAllowance), 0o600); err != nil {
		t.Fatal(err)
	}
	var changes []bool
	g.onLow(func(low bool) { changes = append(changes, low) })
	state(10 * mib) // 40 MiB of snapshots to come (four copies: snapshotCopies): 60 MiB left, over the 40 MiB reserve
	if g.poll(); g.low.Load() || g.reserve.Load() != 40*mib {
		t.Fatalf("100 MiB free, a 10 MiB state: low %v, reserve %d MiB", g.low.Load(), g.reserve.Load()>>20)
	}
	state(21 * mib) // 84 MiB to come: 16 MiB left
	if g.poll(); !g.low.Load() {
		t.Fatal("100 MiB free and a 21 MiB state with no snapshot yet: not tripped (its snapshots would leave 16 MiB)")
	}
	snaps(43 * mib) // 41 MiB to come: 59 MiB left, over 44 MiB (the reserve + 10%)
	if g.poll(); g.low.Load() {
		t.Fatal("59 MiB left after the snapshots to come: still tripped")
	}
	free = 83 * mib // 42 MiB left: under the reserve + 10% but over the reserve
	if g.poll(); g.low.Load() {
		t.Fatal("42 MiB left, over the reserve: tripped")
	}
	free = 80 * mib // 39 MiB
	if g.poll(); !g.low.Load() {
		t.Fatal("39 MiB left: not tripped")
	}
	free = 84 * mib // 43 MiB: over the reserve, under its 10% margin
	if g.poll(); !g.low.Load() {
		t.Fatal("43 MiB left: cleared within the 10% margin")
	}
	free = 86 * mib // 45 MiB
	if g.poll(); g.low.Load() {
		t.Fatal("45 MiB left: not cleared")
	}
	// A log of one segment has two more to come.
	if err := os.WriteFile(filepath.Join(dir, "raft-wal", "1.wal"), make([]byte, 16*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	free += 32 * mib // the space the shorter log leaves: the same 45 MiB once it has grown back
	if g.poll(); g.low.Load() {
		t.Fatal("45 MiB left with the log's growth counted: tripped")
	}
	free -= 6 * mib // 39 MiB left once the log has grown back
	if g.poll(); !g.low.Load() {
		t.Fatal("39 MiB left once the log has grown to its working size: not tripped")
	}
	if want := []bool{true, false, true, false, true}; fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("changes told %v, want %v", changes, want)
	}
}

// While tripped, the space a log compaction gives back does not clear the
// guard (the refusals write the log again): the log counts at its peak
// (here 4 segments, past its 3-segment working size) until that peak is
// older than logPeakWindow; then the space counts.
func TestDiskGuardDiscountsTheCompactedLog(t *testing.T) {
	const mib = 1 << 20
	dir := t.TempDir()
	wal := filepath.Join(dir, "raft-wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"1.wal", "2.wal", "3.wal", "4.wal"} {
		if err := os.WriteFile(filepath.Join(wal, name), make([]byte, 16*mib), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clock := time.Unix(1_800_000_000, 0)
	var free uint64 = 39 * mib
	g := &diskGuard{dir: dir, minMiB: DefaultMinFreeDiskMiB, percent: DefaultMinFreeDiskPercent, logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		space: func(string) (uint64, uint64, bool) { return free, 160 * mib, true }, now: func() time.Time { return clock }}
	if g.poll(); !g.low.Load() {
		t.Fatal("39 MiB free of a 40 MiB reserve: not tripped")
	}
	for _, name := range []string{"1.wal", "2.wal", "3.wal"} { // a compaction: 48 MiB back
		if err := os.Remove(filepath.Join(wal, name)); err != nil {
			t.Fatal(err)
		}
	}
	free += 48 * mib
	clock = clock.Add(10 * time.Second)
	if g.poll(); !g.low.Load() {
		t.Fatal("cleared by the 48 MiB a compaction gave back while the refusals go on")
	}
	clock = clock.Add(logPeakWindow + time.Second)
	if g.poll(); g.low.Load() {
		t.Fatal("the log's peak aged out, 87 MiB free and 32 MiB of it for the log's working size: still tripped")
	}
}

// fakeRaft records what lowDiskRaft asks of Raft.
type fakeRaft struct {
	mu        sync.Mutex
	cfg       raft.ReloadableConfig
	reloads   []raft.ReloadableConfig
	snapshots chan struct{}
}

func (f *fakeRaft) ReloadableConfig() raft.ReloadableConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}

func (f *fakeRaft) ReloadConfig(c raft.ReloadableConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg = c
	f.reloads = append(f.reloads, c)
	return nil
}

func (f *fakeRaft) Snapshot() raft.SnapshotFuture {
	f.snapshots <- struct{}{}
	return doneFuture{}
}

// While the disk is short Raft snapshots (and so compacts its log) after
// 256 entries, checked every second, keeping 64, and takes one snapshot at
// once; when it clears the configured settings come back. A second trip
// report changes nothing.
func TestLowDiskRaftCompactsTheLog(t *testing.T) {
	f := &fakeRaft{cfg: raft.ReloadableConfig{TrailingLogs: 2048, SnapshotThreshold: 4096, SnapshotInterval: 30 * time.Second, HeartbeatTimeout: time.Second, ElectionTimeout: time.Second},
		snapshots: make(chan struct{}, 4)}
	orig := f.cfg
	set := lowDiskRaft(f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	set(true)
	select {
	case <-f.snapshots:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot when the guard tripped")
	}
	want := orig
	want.TrailingLogs, want.SnapshotThreshold, want.SnapshotInterval = lowDiskTrailingLogs, lowDiskSnapshotThreshold, lowDiskSnapshotInterval
	if got := f.ReloadableConfig(); got != want {
		t.Fatalf("settings while short: %+v, want %+v", got, want)
	}
	set(true)
	set(false)
	if got := f.ReloadableConfig(); got != orig {
		t.Fatalf("settings after the disk cleared: %+v, want %+v", got, orig)
	}
	if len(f.reloads) != 2 || len(f.snapshots) != 0 {
		t.Fatalf("%d reloads and %d more snapshots, want 2 and none", len(f.reloads), len(f.snapshots))
	}
}

// doneFuture is a snapshot that succeeded.
type doneFuture struct{}

func (doneFuture) Error() error { return nil }
func (doneFuture) Open() (*raft.SnapshotMeta, io.ReadCloser, error) {
	return nil, nil, nil
}
