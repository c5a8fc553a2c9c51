package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// The state a node holds is bounded by design: the leader stamps these bounds
// in every check entry (fsm.Bounds), so every replica refuses the same new
// keys, whatever its own flags or disk say. Sizing: docs/OPERATIONS.md,
// "Keys and disk".
const (
	// DefaultMaxKeys is --max-keys: live keys in the cluster. A key costs
	// about 310 bytes of state file (150 of live pages) and the same again
	// in each of the two retained snapshots, so a million keys need about
	// 1 GiB of data directory per node.
	DefaultMaxKeys = 1_000_000
	// DefaultMaxRequestIDs is --max-request-ids: live request-id records
	// (each kept --request-id-retention). 5,000,000 holds 8,300 checks a
	// second with request ids over the default 10 minutes.
	DefaultMaxRequestIDs = 5_000_000
	// DefaultMinFreeDiskMiB is --min-free-disk-mib: below this much free
	// space in the leader's data directory no new key is created, so the
	// Raft log, snapshots and the keys already held keep room to work.
	DefaultMinFreeDiskMiB = 256
	// DefaultMinFreeDiskPercent is --min-free-disk-percent: the reserve is
	// the smaller of --min-free-disk-mib and this share of the data
	// directory's file system, so a small disk still takes keys (256 MiB
	// would refuse every key on 160 MB) and a large one keeps 256 MiB.
	//
	// The guard counts what the node will still write for the keys it
	// holds (diskGuard.poll): the snapshots Raft has yet to take of the
	// state file. So the reserve is left for the Raft log the refused
	// checks append, which the guard keeps short while it is tripped
	// (lowDiskRaft); 25% leaves it room on a small disk.
	DefaultMinFreeDiskPercent = 25
	// DefaultMaxInlineKeysPercent is --max-inline-keys-percent: inline
	// limits (a spec in the check, which anyone who reaches a check port
	// may send) create keys only while the live inline keys are under this
	// share of --max-keys, so an inline flood leaves half the budget to the
	// policies' keys.
	DefaultMaxInlineKeysPercent = 50
)

// boundsFlags are serve's flags for bounded state, and the names a node
// without an admin token answers (api.Config.AllowedHosts).
type boundsFlags struct {
	maxKeys, maxRequestIDs int64
	minFreeDiskMiB         int64
	minFreeDiskPercent     int64
	maxInlineKeysPercent   int64
	maxInlineWindow        time.Duration
	noInlineLimits         bool
	allowedHosts           string
}

func addBoundsFlags(fs *flag.FlagSet, b *boundsFlags) {
	fs.Int64Var(&b.maxKeys, "max-keys", DefaultMaxKeys, "live keys the cluster holds (decided by the leader, refused past it with key_budget_exhausted while existing keys are still decided; 0: no bound)")
	fs.Int64Var(&b.maxRequestIDs, "max-request-ids", DefaultMaxRequestIDs, "live request_id records the cluster holds; past it a check with a new request_id is refused with key_budget_exhausted (nothing counted), replays and checks without one are answered (0: no bound)")
	fs.Int64Var(&b.minFreeDiskMiB, "min-free-disk-mib", DefaultMinFreeDiskMiB, "below this free space in the leader's --data-dir no new key is created (key_budget_exhausted); existing keys are still decided (0: no guard; capped by --min-free-disk-percent)")
	fs.Int64Var(&b.minFreeDiskPercent, "min-free-disk-percent", DefaultMinFreeDiskPercent, "the --min-free-disk-mib reserve is at most this percentage of the --data-dir file system's size, so a small disk still takes keys (0: no cap)")
	fs.Int64Var(&b.maxInlineKeysPercent, "max-inline-keys-percent", DefaultMaxInlineKeysPercent, "keys created under inline limits (not a policy) are at most this percentage of --max-keys; past it a new inline key is refused with key_budget_exhausted (reason max_inline_keys), existing keys and policies are still decided (0: no bound but --max-keys)")
	fs.DurationVar(&b.maxInlineWindow, "max-inline-window", service.DefaultMaxInlineWindow, "longest an inline limit (given in the check, not a policy) may keep a key: its window, calendar period or bucket refill time (0: no bound)")
	fs.BoolVar(&b.noInlineLimits, "no-inline-limits", false, "refuse inline limits: every check names a policy (for nodes whose HTTP or gRPC port is public)")
	fs.StringVar(&b.allowedHosts, "allowed-hosts", "", "without --admin-token: host names (comma-separated) the HTTP API answers besides IP addresses, localhost and the names in --http-addr and --http-advertise (a request naming another Host is refused: DNS rebinding)")
}

// hosts are api.Config.AllowedHosts: the names in the HTTP listen and
// advertised addresses and --allowed-hosts.
func (b *boundsFlags) hosts(httpAddr, httpAdvertise string) []string {
	hs := []string{httpAddr}
	if httpAdvertise != "" {
		hs = append(hs, httpAdvertise)
	}
	for _, h := range strings.Split(b.allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	return hs
}

func (b *boundsFlags) validate() error {
	if b.maxKeys < 0 || b.maxRequestIDs < 0 || b.minFreeDiskMiB < 0 || b.maxInlineWindow < 0 {
		return fmt.Errorf("--max-keys, --max-request-ids, --min-free-disk-mib and --max-inline-window must not be negative (0: no bound)")
	}
	if b.minFreeDiskPercent < 0 || b.minFreeDiskPercent > 100 {
		return fmt.Errorf("--min-free-disk-percent must be within [0, 100] (0: no cap)")
	}
	if b.maxInlineKeysPercent < 0 || b.maxInlineKeysPercent > 100 {
		return fmt.Errorf("--max-inline-keys-percent must be within [0, 100] (0: no bound)")
	}
	return nil
}

// diskReserve is the free space under which no new key is created: the
// smaller of minMiB and percent of the file system's total bytes (percent
// 0: minMiB alone; minMiB 0: no guard).
func diskReserve(minMiB, percent int64, total uint64) uint64 {
	if minMiB <= 0 {
		return 0
	}
	r := uint64(minMiB) << 20
	if percent > 0 {
		p := uint64(percent)
		r = min(r, total/100*p+total%100*p/100) // total·p/100 without overflow
	}
	return r
}

// diskClearMargin is the hysteresis of the guard: once tripped it clears
// when the free space is this share of the reserve above it, so space a
// snapshot reclaims does not flip it back and forth (each flip a
// key_budget_exhausted episode).
const diskClearMargin = 10 // percent of the reserve

// diskGuard watches the free space of the data directory (every
// diskPollInterval, and at start) and says when it is below the reserve
// (diskReserve). Only
// the leader's answer matters: it is stamped in the entries it proposes.
//
// The free space it compares is what will remain once Raft's snapshots
// have caught up with the state file and the log has its working size
// (pending): Raft keeps two snapshots, each a copy of the state file, and
// writes a third before it deletes the oldest, while the state file itself
// grows by up to one more copy (snapshotCopies), so a state file of S bytes
// is counted as 4S to come; what the snapshot directory holds now is
// subtracted. Without it a small disk took keys until the free space
// reached the reserve with no snapshot taken yet, and the first snapshot
// then filled the disk.
//
// While it is tripped the refused checks still append Raft log entries;
// the guard then turns Raft's snapshots to short and frequent
// (lowDiskRaft), so the log is compacted every second or so rather than
// after 4,096 entries, and back when the space returns. The space a
// compaction frees is not room for keys: the same refusals write it again.
// So while tripped the guard counts the log at the largest it has been
// in the last logPeakWindow (logPeak); else each compaction cleared it,
// keys were created until it tripped again, and the state file ratcheted
// up until a snapshot no longer fitted. Once the refusals stop, the peak
// ages out and the space the log gave back counts again.
type diskGuard struct {
	dir             string
	minMiB, percent int64
	reserve         atomic.Uint64 // bytes, as of the last poll
	low             atomic.Bool
	logPeak         uint64    // the Raft log's largest size while tripped, within logPeakWindow (poll only)
	logPeakAt       time.Time // when the log was last that large
	now             func() time.Time
	onChange        atomic.Pointer[func(low bool)]
	logger          *slog.Logger
	stop            chan struct{}
	// space reads the file system (diskSpace; a test's own).
	space func(dir string) (free, total uint64, ok bool)
}

// diskPollInterval is how often the guard looks: a flood creates some
// 20,000 keys a second, 25 MiB of state and snapshots to come on a small
// disk, so a second between looks overshot a 40 MiB reserve by half.
const diskPollInterval = 200 * time.Millisecond

// logPeakWindow is how long the guard remembers the Raft log's peak while
// tripped: longer than the log takes to regrow under the low-disk snapshot
// settings (256 entries, checked every second).
const logPeakWindow = time.Minute

// snapshotCopies is how many copies of the state file Raft's snapshots take
// at most: the two it retains (cluster: NewFileSnapshotStore with retain 2)
// and the one it is writing — plus one for the state file's own growth
// while that snapshot is written: its read transaction keeps bbolt from
// reusing freed pages, so every write meanwhile takes new ones (measured
// with three: a 2,000,000-key flood on 160 MiB fell to 11 MiB free, under
// the floor of half the 39 MiB reserve).
const snapshotCopies = 4

func (b *boundsFlags) startDiskGuard(dir string, logger *slog.Logger) *diskGuard {
	g := &diskGuard{dir: dir, minMiB: b.minFreeDiskMiB, percent: b.minFreeDiskPercent, logger: logger, stop: make(chan struct{}), space: diskSpace, now: time.Now}
	if g.minMiB <= 0 {
		return g
	}
	g.poll()
	go func() {
		t := time.NewTicker(diskPollInterval)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				g.poll()
			}
		}
	}()
	return g
}

// onLow sets what the guard calls when it trips and when it clears (the
// node's Raft snapshot settings: lowDiskRaft), once the node exists; it is
// called at once if the guard is tripped already.
func (g *diskGuard) onLow(f func(low bool)) {
	g.onChange.Store(&f)
	if g.low.Load() {
		f(true)
	}
}

// logAllowance is the Raft log's working size while the guard is tripped
// (lowDiskRaft): raft-wal preallocates 16 MiB segments (cluster/logstore)
// and deletes a segment only once a snapshot covers all of it, so the log
// holds the segment being written, the one with the 64 trailing entries
// and one the next snapshot has not covered yet. Measured without it: a
// 4,000,000-key flood on 160 MiB left 11 MiB of a 39 MiB reserve free.
const logAllowance = 3 * 16 << 20

// pending is what Raft's snapshots will still write in dir for the state
// file: snapshotCopies of it less what the snapshot directory holds.
func pending(dir string) uint64 {
	st, err := os.Stat(filepath.Join(dir, "fsm.db"))
	if err != nil {
		return 0
	}
	return uint64(max(snapshotCopies*st.Size()-int64(treeBytes(filepath.Join(dir, "snapshots"))), 0))
}

// treeBytes sums the regular files under dir (a handful: snapshots, log
// segments).
func treeBytes(dir string) uint64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return uint64(n)
}

// raftLogBytes is the Raft log's size in dir (raft-wal, or raft.db).
func raftLogBytes(dir string) uint64 {
	n := treeBytes(filepath.Join(dir, "raft-wal"))
	if st, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
		n += uint64(st.Size())
	}
	return n
}

func (g *diskGuard) poll() {
	free, total, ok := g.space(g.dir)
	if !ok {
		return // unknown: no guard rather than no keys
	}
	reserve := diskReserve(g.minMiB, g.percent, total)
	g.reserve.Store(reserve)
	// The log counts at its working size (logAllowance) and, while
	// tripped, at its recent peak: what it will grow back to.
	l, was := raftLogBytes(g.dir), g.low.Load()
	target := uint64(logAllowance)
	if was {
		if now := g.now(); l >= g.logPeak || now.Sub(g.logPeakAt) > logPeakWindow {
			g.logPeak, g.logPeakAt = l, now
		}
		target = max(target, g.logPeak)
	}
	left := free - min(free, pending(g.dir)+target-min(target, l))
	low := left < reserve
	if was {
		low = left < reserve+reserve/100*diskClearMargin
	}
	if low == was {
		return
	}
	g.low.Store(low)
	g.logPeak, g.logPeakAt = raftLogBytes(g.dir), g.now()
	if low {
		g.logger.Warn("data directory low on free space: no new keys are created while this node leads (existing keys are still decided)", "free_bytes", free, "after_snapshots_bytes", left, "reserve_bytes", reserve)
	} else {
		g.logger.Info("data directory has free space again: new keys are created", "free_bytes", free, "after_snapshots_bytes", left, "reserve_bytes", reserve)
	}
	if f := g.onChange.Load(); f != nil {
		(*f)(low)
	}
}

func (g *diskGuard) Close() { close(g.stop) }

// raftKnobs is what lowDiskRaft turns: *raft.Raft's.
type raftKnobs interface {
	ReloadableConfig() raft.ReloadableConfig
	ReloadConfig(raft.ReloadableConfig) error
	Snapshot() raft.SnapshotFuture
}

// Raft's snapshot settings while the disk is short: a snapshot (which
// compacts the log) whenever 256 entries follow the last one, checked
// every second, keeping 64 — a few MiB of refused checks' entries rather
// than up to 4,096 + 2,048 of them. A follower more than 64 entries behind
// then catches up from a snapshot.
const (
	lowDiskSnapshotThreshold = 256
	lowDiskTrailingLogs      = 64
	lowDiskSnapshotInterval  = time.Second
)

// lowDiskRaft is the guard's onLow for a node's Raft: short and frequent
// snapshots while the disk is short, one at once when it trips, and the
// configured settings back when it clears.
func lowDiskRaft(r raftKnobs, logger *slog.Logger) func(low bool) {
	var mu sync.Mutex
	var saved *raft.ReloadableConfig
	return func(low bool) {
		mu.Lock()
		defer mu.Unlock()
		cur := r.ReloadableConfig()
		next := cur
		switch {
		case low && saved == nil:
			saved = &cur
			next.SnapshotThreshold, next.TrailingLogs, next.SnapshotInterval = lowDiskSnapshotThreshold, lowDiskTrailingLogs, lowDiskSnapshotInterval
		case !low && saved != nil:
			next.SnapshotThreshold, next.TrailingLogs, next.SnapshotInterval = saved.SnapshotThreshold, saved.TrailingLogs, saved.SnapshotInterval
			saved = nil
		default:
			return
		}
		if err := r.ReloadConfig(next); err != nil {
			logger.Warn("could not change Raft's snapshot settings for the free-disk guard", "error", err)
			return
		}
		if low {
			go func() { // compact now; the scheduled check comes within a second or two anyway
				if err := r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
					logger.Warn("snapshot for the free-disk guard failed", "error", err)
				}
			}()
		}
	}
}

// checkBounds is cluster.Config.CheckBounds: what the leader stamps now.
func (b *boundsFlags) checkBounds(g *diskGuard) func() fsm.Bounds {
	return func() fsm.Bounds {
		return fsm.Bounds{MaxKeys: b.maxKeys, MaxRequestIDs: b.maxRequestIDs, NoNewKeys: g.low.Load(), MaxInlineKeys: b.maxInlineKeys()}
	}
}

// maxInlineKeys is fsm.Bounds.MaxInlineKeys: the percentage of --max-keys,
// at least 1 key (a small budget still takes an inline key); 0 when either
// flag is 0 (no bound).
func (b *boundsFlags) maxInlineKeys() int64 {
	if b.maxKeys <= 0 || b.maxInlineKeysPercent <= 0 {
		return 0
	}
	return max(1, b.maxKeys/100*b.maxInlineKeysPercent+b.maxKeys%100*b.maxInlineKeysPercent/100)
}
