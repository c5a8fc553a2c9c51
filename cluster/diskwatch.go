package cluster

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster/logstore"
)

// A slow disk hands leadership away. Every check is a Raft write, and the
// leader fsyncs each batch before it can commit it: a leader whose disk
// slows to a few writes per second slows the whole cluster to that, and
// Raft never steps it down (it still answers heartbeats). So every node
// measures its own log writes (the StoreLogs/StoreLog durations of its Raft
// log store, and the age of a write still in flight, which a stalled disk
// never completes), and:
//
//   - a leader whose p99 over the sliding window (DiskStallWindow) has stayed
//     above DiskStallTransfer for a whole window transfers leadership to a
//     voter (Raft picks the most up-to-date one: a follower with a slow disk
//     is behind), logs it and counts it (limitd_disk_stall_transfers_total);
//     at most once per window;
//   - a node whose p99 has stayed above that bound for DiskStallFail stops
//     serving (fail-stop, as for a failed write: vitals.fail), so that its
//     supervisor restarts it and an operator looks at the disk;
//   - the measured p99 is a gauge (limitd_log_write_p99_seconds) and, for the
//     node itself, in `cluster status` (Member.LogWriteP99Ms, DiskStalled).
//
// Decisions are taken from the window's samples only, at each evaluation
// (every quarter window), so the detector is a pure function of its samples
// and the times it is given (diskWatch.evaluate): tests drive it with a
// fake clock.

// Defaults of the detector (serve's --disk-stall-*; 0 in Config: off).
const (
	DefaultDiskStallTransfer = 500 * time.Millisecond
	DefaultDiskStallWindow   = 2 * time.Second
	DefaultDiskStallFail     = 30 * time.Second
)

// maxDiskSamples bounds the samples a window keeps (the latest).
const maxDiskSamples = 4096

type diskSample struct {
	at time.Time
	d  time.Duration
}

type diskWatch struct {
	bound, window, failAfter time.Duration

	mu        sync.Mutex
	samples   []diskSample
	inflight  map[uint64]time.Time
	nextID    uint64
	above     time.Time // since when every evaluation found the p99 above bound (zero: not above)
	lastMove  time.Time // the last transfer
	p99       time.Duration
	transfers atomic.Uint64
	stalled   atomic.Bool
	failed    bool
}

func newDiskWatch(bound, window, failAfter time.Duration) *diskWatch {
	if window <= 0 {
		window = DefaultDiskStallWindow
	}
	return &diskWatch{bound: bound, window: window, failAfter: failAfter, inflight: map[uint64]time.Time{}}
}

// begin records a write starting at now; end(id, at) its completion.
func (w *diskWatch) begin(now time.Time) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	w.inflight[w.nextID] = now
	return w.nextID
}

func (w *diskWatch) end(id uint64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start, ok := w.inflight[id]
	if !ok {
		return
	}
	delete(w.inflight, id)
	if len(w.samples) == maxDiskSamples {
		w.samples = append(w.samples[:0], w.samples[1:]...)
	}
	w.samples = append(w.samples, diskSample{at: now, d: now.Sub(start)})
}

// diskVerdict is what an evaluation asks the node to do.
type diskVerdict struct {
	p99      time.Duration
	transfer bool // stalled for a window: hand leadership away (if leading)
	fail     bool // stalled for failAfter: stop serving
}

// evaluate computes the p99 of the writes completed within the last window
// and of the writes still in flight (their age so far), and decides.
func (w *diskWatch) evaluate(now time.Time, leader bool) diskVerdict {
	w.mu.Lock()
	defer w.mu.Unlock()
	from := now.Add(-w.window)
	i := 0
	for i < len(w.samples) && w.samples[i].at.Before(from) {
		i++
	}
	w.samples = append(w.samples[:0], w.samples[i:]...)
	ds := make([]time.Duration, 0, len(w.samples)+len(w.inflight))
	for _, s := range w.samples {
		ds = append(ds, s.d)
	}
	for _, start := range w.inflight {
		ds = append(ds, now.Sub(start))
	}
	var v diskVerdict
	if len(ds) > 0 {
		slices.Sort(ds)
		v.p99 = ds[(len(ds)*99+99)/100-1]
	}
	w.p99 = v.p99
	if w.bound <= 0 {
		return v
	}
	if v.p99 <= w.bound {
		w.above = time.Time{}
		w.stalled.Store(false)
		return v
	}
	if w.above.IsZero() {
		w.above = now
	}
	stalledFor := now.Sub(w.above)
	w.stalled.Store(stalledFor >= w.window)
	if leader && stalledFor >= w.window && (w.lastMove.IsZero() || now.Sub(w.lastMove) >= w.window) {
		w.lastMove = now
		v.transfer = true
	}
	if w.failAfter > 0 && stalledFor >= w.failAfter && !w.failed {
		w.failed = true
		v.fail = true
	}
	return v
}

func (w *diskWatch) lastP99() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.p99
}

// timedLogStore measures the writes of the Raft log store for a diskWatch.
type timedLogStore struct {
	logstore.Store
	w *diskWatch
}

func (s *timedLogStore) StoreLog(l *raft.Log) error {
	id := s.w.begin(time.Now())
	defer func() { s.w.end(id, time.Now()) }()
	return s.Store.StoreLog(l)
}

func (s *timedLogStore) StoreLogs(ls []*raft.Log) error {
	id := s.w.begin(time.Now())
	defer func() { s.w.end(id, time.Now()) }()
	return s.Store.StoreLogs(ls)
}

// wrap is node.go's hook on the log store: it wraps it for the detector
// and returns the wrapped store.
func (w *diskWatch) wrap(logs logstore.Store) logstore.Store {
	return &timedLogStore{Store: logs, w: w}
}

// diskActions is what the detector may do to its node: ask whether it
// leads, hand leadership away, stop it serving (vitals.fail).
type diskActions struct {
	log      *slog.Logger
	leading  func() bool
	transfer func() error
	fail     func(err error)
}

// run evaluates the detector every quarter window and acts on it, until
// closing.
func (w *diskWatch) run(closing <-chan struct{}, a diskActions) {
	t := time.NewTicker(w.window / 4)
	defer t.Stop()
	for {
		select {
		case <-closing:
			return
		case now := <-t.C:
			w.act(w.evaluate(now, a.leading()), a)
		}
	}
}

func (w *diskWatch) act(v diskVerdict, a diskActions) {
	if v.transfer {
		w.transfers.Add(1)
		a.log.Warn("the Raft log's writes are slow: handing leadership to another voter",
			"log_write_p99", v.p99, "bound", w.bound, "window", w.window)
		go func() {
			if err := a.transfer(); err != nil {
				a.log.Warn("leadership transfer for a slow disk failed", "error", err)
			}
		}()
	}
	if v.fail {
		a.fail(fmt.Errorf("the raft log's writes stayed slower than %v (p99 %v) for %v: check the disk, then restart the node", w.bound, v.p99, w.failAfter))
	}
}

// collectors is the detector's metrics.
func (w *diskWatch) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_disk_stall_transfers_total",
			Help: "Leadership transfers because this node's Raft log writes stayed slow (p99 above --disk-stall-transfer for a window)."},
			func() float64 { return float64(w.transfers.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_log_write_p99_seconds",
			Help: "p99 of this node's Raft log writes over the last --disk-stall-window (writes in flight count with their age)."},
			func() float64 { return w.lastP99().Seconds() }),
	}
}
