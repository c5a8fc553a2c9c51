package daemon

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

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
)

// boundsFlags are serve's flags for bounded state, and the names a node
// without an admin token answers (api.Config.AllowedHosts).
type boundsFlags struct {
	maxKeys, maxRequestIDs int64
	minFreeDiskMiB         int64
	maxInlineWindow        time.Duration
	noInlineLimits         bool
	allowedHosts           string
}

func addBoundsFlags(fs *flag.FlagSet, b *boundsFlags) {
	fs.Int64Var(&b.maxKeys, "max-keys", DefaultMaxKeys, "live keys the cluster holds (decided by the leader, refused past it with key_budget_exhausted while existing keys are still decided; 0: no bound)")
	fs.Int64Var(&b.maxRequestIDs, "max-request-ids", DefaultMaxRequestIDs, "live request_id records the cluster holds; past it a check with a new request_id is refused with key_budget_exhausted (nothing counted), replays and checks without one are answered (0: no bound)")
	fs.Int64Var(&b.minFreeDiskMiB, "min-free-disk-mib", DefaultMinFreeDiskMiB, "below this free space in the leader's --data-dir no new key is created (key_budget_exhausted); existing keys are still decided (0: no guard)")
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
	return nil
}

// diskGuard watches the free space of the data directory (once a second,
// and at start) and says when it is below the threshold. Only the leader's
// answer matters: it is stamped in the entries it proposes.
type diskGuard struct {
	dir    string
	min    uint64
	low    atomic.Bool
	logger *slog.Logger
	stop   chan struct{}
}

func startDiskGuard(dir string, minMiB int64, logger *slog.Logger) *diskGuard {
	g := &diskGuard{dir: dir, min: uint64(minMiB) << 20, logger: logger, stop: make(chan struct{})}
	if minMiB <= 0 {
		return g
	}
	g.poll()
	go func() {
		t := time.NewTicker(time.Second)
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

func (g *diskGuard) poll() {
	free, ok := freeBytes(g.dir)
	if !ok {
		return // unknown: no guard rather than no keys
	}
	low := free < g.min
	if g.low.Swap(low) != low {
		if low {
			g.logger.Warn("data directory low on free space: no new keys are created while this node leads (existing keys are still decided)", "free_bytes", free, "min_free_disk_mib", g.min>>20)
		} else {
			g.logger.Info("data directory has free space again: new keys are created", "free_bytes", free)
		}
	}
}

func (g *diskGuard) Close() { close(g.stop) }

// checkBounds is cluster.Config.CheckBounds: what the leader stamps now.
func (b *boundsFlags) checkBounds(g *diskGuard) func() fsm.Bounds {
	return func() fsm.Bounds {
		return fsm.Bounds{MaxKeys: b.maxKeys, MaxRequestIDs: b.maxRequestIDs, NoNewKeys: g.low.Load()}
	}
}
