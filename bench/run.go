package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is what the workers do, independent of the system under test.
type Workload struct {
	Concurrency int           // closed-loop workers, each with one request in flight
	Keys        int           // distinct keys
	Dist        string        // DistUniform or DistZipf
	ZipfS       float64       // Zipf exponent, > 1
	Batch       int           // checks per request; > 1 needs a BatchTarget
	Duration    time.Duration // measured time
	Warmup      time.Duration // unmeasured time before it
	Seed        uint64        // key sequence seed
	// The attack workload (HotKeys > 0): HotFraction of the checks go to
	// HotKeys hot keys (key indexes HotIndex(0..HotKeys-1)) whose limit is
	// HotLimit per window, far below their traffic, so nearly every check
	// on them is refused; the rest go to the Keys normal keys as usual. The
	// result then reports the two classes apart (Result.Normal, .Hot).
	HotKeys     int
	HotFraction float64
	HotLimit    int64
	// The open loop (Rate > 0): checks scheduled at Rate per second with
	// Arrival spacing (ArrivalConstant or ArrivalPoisson), each latency
	// counted from its scheduled time, at most MaxInflight in flight;
	// Concurrency does not apply. See openLoop.
	Rate        float64
	Arrival     string
	MaxInflight int
	// CPU, if set, measures processes over the measured interval: the
	// result's CPU and CPUError. (Not a flag: the driver knows the processes.)
	CPU *CPUMeter
	// FsyncProbeDir, if set, is the system's data directory: Run times
	// FsyncProbeAppends appends + fsync there before it starts (the
	// result's Fsync), so a run is read beside the disk it had.
	FsyncProbeDir string
	// Measuring, if set, is called when the measured interval starts (after
	// the warm-up), on a goroutine of its own: drivers read counters there
	// that must cover the measured interval only.
	Measuring func()
}

// beginMeasure starts what covers the measured interval only (CPU,
// Measuring): now without a warm-up, else when it ends. cancel stops a start
// still pending.
func (w Workload) beginMeasure() (cancel func()) {
	begin := func() {
		if w.CPU != nil {
			w.CPU.Begin()
		}
		if w.Measuring != nil {
			w.Measuring()
		}
	}
	if w.Warmup == 0 {
		begin()
		return func() {}
	}
	t := time.AfterFunc(w.Warmup, begin)
	return func() { t.Stop() }
}

// DefaultHotLimit is the hot keys' limit per window in the attack workload:
// one check per window, so a hot key is over its limit after its first check.
const DefaultHotLimit = 1

// DefaultWorkload is the reference run: 64 workers, 100,000 uniform
// keys, single checks, 15 s after a 2 s warm-up.
func DefaultWorkload() Workload {
	return Workload{
		Concurrency: 64,
		Keys:        100_000,
		Dist:        DistUniform,
		ZipfS:       DefaultZipfS,
		Batch:       1,
		Duration:    15 * time.Second,
		Warmup:      2 * time.Second,
		Seed:        1,
		HotLimit:    DefaultHotLimit,
		Arrival:     ArrivalConstant,
		MaxInflight: DefaultMaxInflight,
	}
}

// AddFlags registers the workload flags on fs with w's values as defaults, so
// every driver spells them the same way.
func (w *Workload) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&w.Concurrency, "concurrency", w.Concurrency, "closed-loop workers; each sends its next request when the previous one is answered")
	fs.IntVar(&w.Keys, "keys", w.Keys, "number of distinct keys")
	fs.StringVar(&w.Dist, "dist", w.Dist, "key distribution: uniform, zipf, or sequential (every key in turn, to fill a store)")
	fs.Float64Var(&w.ZipfS, "zipf-s", w.ZipfS, "Zipf exponent for --dist zipf (> 1; larger is more skewed)")
	fs.IntVar(&w.Batch, "batch", w.Batch, "checks per request (> 1 sends batches)")
	fs.DurationVar(&w.Duration, "duration", w.Duration, "measured duration")
	fs.DurationVar(&w.Warmup, "warmup", w.Warmup, "unmeasured warm-up before the measured duration")
	fs.Uint64Var(&w.Seed, "seed", w.Seed, "seed of the key sequence (same seed, same keys)")
	fs.IntVar(&w.HotKeys, "hot-keys", w.HotKeys, "attack workload: number of hot keys hammered far over their limit (0: no attack)")
	fs.Float64Var(&w.HotFraction, "hot-fraction", w.HotFraction, "attack workload: fraction of the checks sent to the hot keys, e.g. 0.9")
	fs.Int64Var(&w.HotLimit, "hot-limit", w.HotLimit, "attack workload: the hot keys' limit per --window")
	fs.Float64Var(&w.Rate, "rate", w.Rate, "open loop: schedule this many checks per second, each latency counted from its scheduled time (0: closed loop of --concurrency workers)")
	fs.StringVar(&w.Arrival, "arrival", w.Arrival, "open loop: spacing of the scheduled checks, constant or poisson")
	fs.IntVar(&w.MaxInflight, "max-inflight", w.MaxInflight, "open loop: most checks in flight; a check due while all are busy waits, and its latency still counts from its schedule")
	fs.StringVar(&w.FsyncProbeDir, "fsync-probe", w.FsyncProbeDir, "before the run, time appends + fsync in this directory (the system's data directory's file system) and report them beside the latencies")
}

// Conns is how many requests may be in flight at once: the size a target's
// connection pool needs.
func (w Workload) Conns() int {
	if w.Rate > 0 {
		return w.MaxInflight
	}
	return w.Concurrency
}

// Validate reports the first unusable setting.
func (w Workload) Validate() error {
	switch {
	case w.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", w.Concurrency)
	case w.Batch < 1:
		return fmt.Errorf("batch must be at least 1, got %d", w.Batch)
	case w.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %s", w.Duration)
	case w.Warmup < 0:
		return fmt.Errorf("warmup must not be negative, got %s", w.Warmup)
	case w.HotKeys > 0 && w.Batch > 1:
		return errors.New("the attack workload (hot keys) sends single checks: batch must be 1")
	case w.HotKeys > 0 && w.HotLimit < 1:
		return fmt.Errorf("hot limit must be at least 1, got %d", w.HotLimit)
	case w.Rate < 0 || math.IsNaN(w.Rate) || math.IsInf(w.Rate, 0):
		return fmt.Errorf("rate must be a positive number of checks per second (or 0 for the closed loop), got %g", w.Rate)
	case w.Rate > 0 && w.Batch > 1:
		return errors.New("the open loop (rate) sends single checks: batch must be 1")
	case w.Rate > 0 && w.MaxInflight < 1:
		return fmt.Errorf("max inflight must be at least 1, got %d", w.MaxInflight)
	}
	if w.Rate > 0 {
		if _, err := NewSchedule(w.Rate, w.Arrival, w.Seed); err != nil {
			return err
		}
	}
	_, err := w.keyGen(0)
	return err
}

// Attack reports whether w is the attack workload.
func (w Workload) Attack() bool { return w.HotKeys > 0 }

// keyGen is worker stream's key generator.
func (w Workload) keyGen(stream uint64) (KeyGen, error) {
	g, err := NewKeyGen(w.Dist, w.Keys, w.ZipfS, w.Seed, stream)
	if err != nil {
		return nil, err
	}
	return NewAttackGen(g, w.HotKeys, w.HotFraction, w.Seed, stream)
}

// Progress is a live view of a run, delivered a few times a second.
type Progress struct {
	Elapsed      time.Duration // since the run started, warm-up included
	Total        time.Duration // warm-up + duration
	Warmup       bool          // still warming up: the figures below are zero
	Checks       int64         // decided (allowed + refused) since measuring started
	Errors       int64
	ChecksPerSec float64
	P99          time.Duration
}

// ProgressInterval is how often Run reports Progress.
const ProgressInterval = 250 * time.Millisecond

// workerStats is written by one worker and read by the progress reporter.
type workerStats struct {
	requests atomic.Int64
	allowed  atomic.Int64
	refused  atomic.Int64
	errs     [numErrorClasses]atomic.Int64
	hist     Histogram
	lastErr  atomic.Pointer[error]
	// byKind splits single checks into normal [0] and hot [1] keys, for
	// the attack workload.
	byKind [2]kindStats
}

// kindStats are one kind of key's counts and latencies.
type kindStats struct {
	allowed, refused, errors atomic.Int64
	hist                     Histogram
}

func kindOf(key int) int {
	if IsHot(key) {
		return 1
	}
	return 0
}

// Run drives t with w until w.Warmup+w.Duration have passed or ctx is done,
// and returns what was measured. Requests that started during the warm-up are
// not counted; requests in flight when the time is up are awaited and counted,
// so every counted request started and finished inside the measured interval
// and the throughput is exact. If ctx ends early the result covers what was
// measured so far and has Interrupted set; requests cut off by ctx are not
// counted as errors. onProgress, if not nil, is called from one goroutine
// every ProgressInterval.
//
// With w.FsyncProbeDir set, Run first times the disk there (Result.Fsync).
func Run(ctx context.Context, w Workload, t Target, onProgress func(Progress)) (Result, error) {
	var probe *FsyncProbe
	if w.FsyncProbeDir != "" {
		p, err := ProbeFsync(w.FsyncProbeDir, FsyncProbeAppends)
		if err != nil {
			return Result{}, err
		}
		probe = &p
	}
	r, err := run(ctx, w, t, onProgress)
	r.Fsync = probe
	return r, err
}

func run(ctx context.Context, w Workload, t Target, onProgress func(Progress)) (Result, error) {
	if w.Rate > 0 {
		return openLoop(ctx, w, t, onProgress, new(realClock))
	}
	if err := w.Validate(); err != nil {
		return Result{}, err
	}
	var bt BatchTarget
	if w.Batch > 1 {
		var ok bool
		if bt, ok = t.(BatchTarget); !ok {
			return Result{}, errors.New("batch > 1 but the target cannot send batches")
		}
	}
	gens := make([]KeyGen, w.Concurrency)
	for i := range gens {
		g, err := w.keyGen(uint64(i))
		if err != nil {
			return Result{}, err
		}
		Stride(g, w.Concurrency)
		gens[i] = g
	}

	stats := make([]*workerStats, w.Concurrency)
	for i := range stats {
		stats[i] = new(workerStats)
	}
	start := time.Now()
	measureFrom := start.Add(w.Warmup)
	var stop atomic.Bool
	// CPU is measured over the measured interval only.
	defer w.beginMeasure()()
	timer := time.AfterFunc(w.Warmup+w.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	// Ctrl-C stops new requests at once; in-flight ones end with ctx.
	unwatch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unwatch()

	var wg sync.WaitGroup
	for i := range w.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if bt != nil {
				batchWorker(ctx, bt, gens[i], w.Batch, stats[i], measureFrom, &stop)
			} else {
				singleWorker(ctx, t, gens[i], stats[i], measureFrom, &stop)
			}
		}()
	}

	stopProgress := reportProgress(onProgress, func() Progress {
		return snapshot(stats, start, measureFrom, time.Now(), w.Warmup+w.Duration)
	})
	wg.Wait()
	end := time.Now()
	var cpu []ProcessCPU
	var cpuErr string
	if w.CPU != nil {
		var err error
		if cpu, err = w.CPU.End(); err != nil {
			cpuErr = err.Error()
		}
	}
	stopProgress()

	r := Result{
		Concurrency: w.Concurrency,
		Keys:        w.Keys,
		Dist:        w.Dist,
		Batch:       w.Batch,
		Interrupted: ctx.Err() != nil,
	}
	if end.After(measureFrom) {
		r.Elapsed = end.Sub(measureFrom)
	}
	r.collect(stats, w)
	r.CPU, r.CPUError = cpu, cpuErr
	if w.CPU != nil {
		r.CPUInterval, r.CPUs = w.CPU.Interval(), runtime.NumCPU()
	}
	return r, nil
}

// collect sums the workers' counts and latencies into r.
func (r *Result) collect(stats []*workerStats, w Workload) {
	var h Histogram
	r.ErrorsByClass = map[string]int64{}
	for _, s := range stats {
		r.Requests += s.requests.Load()
		r.Allowed += s.allowed.Load()
		r.Refused += s.refused.Load()
		for c := range s.errs {
			if n := s.errs[c].Load(); n != 0 {
				r.Errors += n
				r.ErrorsByClass[ErrorClass(c).String()] += n
			}
		}
		if e := s.lastErr.Load(); e != nil {
			r.LastError = (*e).Error()
		}
		h.Merge(&s.hist)
	}
	r.Checks = r.Allowed + r.Refused + r.Errors
	r.setLatencies(&h)
	if w.Attack() {
		r.HotKeys, r.HotFraction, r.HotLimit = w.HotKeys, w.HotFraction, w.HotLimit
		r.Normal, r.Hot = new(KeyClass), new(KeyClass)
		for k, kc := range [2]*KeyClass{r.Normal, r.Hot} {
			var h Histogram
			for _, s := range stats {
				ks := &s.byKind[k]
				kc.Allowed += ks.allowed.Load()
				kc.Refused += ks.refused.Load()
				kc.Errors += ks.errors.Load()
				h.Merge(&ks.hist)
			}
			kc.P50, kc.P99, kc.Max = h.Quantile(0.50), h.Quantile(0.99), h.Max()
		}
	}
}

func singleWorker(ctx context.Context, t Target, keys KeyGen, st *workerStats, measureFrom time.Time, stop *atomic.Bool) {
	for !stop.Load() {
		key := keys.Next()
		begin := time.Now()
		allowed, err := t.Do(ctx, key)
		if begin.Before(measureFrom) {
			continue
		}
		if err != nil && ctx.Err() != nil {
			return // cut off by the caller, not a failure of the target
		}
		st.record(key, time.Since(begin), allowed, err)
	}
}

func batchWorker(ctx context.Context, t BatchTarget, keys KeyGen, size int, st *workerStats, measureFrom time.Time, stop *atomic.Bool) {
	batch := make([]int, size)
	out := make([]Outcome, size)
	for !stop.Load() {
		for i := range batch {
			batch[i] = keys.Next()
		}
		clear(out)
		begin := time.Now()
		err := t.DoBatch(ctx, batch, out)
		if begin.Before(measureFrom) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st.requests.Add(1)
			st.countError(err, int64(size))
			continue
		}
		st.hist.Record(time.Since(begin))
		st.requests.Add(1)
		var allowed, refused int64
		for _, o := range out {
			switch {
			case o.Err != nil:
				st.countError(o.Err, 1)
			case o.Allowed:
				allowed++
			default:
				refused++
			}
		}
		st.allowed.Add(allowed)
		st.refused.Add(refused)
	}
}

func (st *workerStats) countError(err error, n int64) {
	st.errs[Classify(err)].Add(n)
	st.lastErr.Store(&err)
}

// reportProgress calls onProgress (when not nil) with snap's figures every
// ProgressInterval until the returned stop is called; stop waits for the
// last call to return. Closed and open loop share it.
func reportProgress(onProgress func(Progress), snap func() Progress) (stop func()) {
	if onProgress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				onProgress(snap())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func snapshot(stats []*workerStats, start, measureFrom, now time.Time, total time.Duration) Progress {
	p := Progress{Elapsed: now.Sub(start), Total: total}
	if now.Before(measureFrom) {
		p.Warmup = true
		return p
	}
	var h Histogram
	for _, s := range stats {
		p.Checks += s.allowed.Load() + s.refused.Load()
		for c := range s.errs {
			p.Errors += s.errs[c].Load()
		}
		h.Merge(&s.hist)
	}
	if secs := now.Sub(measureFrom).Seconds(); secs > 0 {
		p.ChecksPerSec = float64(p.Checks) / secs
	}
	p.P99 = h.Quantile(0.99)
	return p
}
