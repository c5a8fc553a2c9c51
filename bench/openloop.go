package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// Open loop: checks are scheduled at a fixed rate whatever the server does,
// and each latency counts from the check's scheduled time. A closed loop
// (every worker waits for its answer before sending again) slows down when the
// server stalls, so the checks a stall delays are never sent and its latency
// hides the stall (coordinated omission). Users send at their own rate.

// Arrival processes of the open loop (Workload.Arrival).
const (
	ArrivalConstant = "constant" // every 1/rate
	ArrivalPoisson  = "poisson"  // exponential gaps of mean 1/rate
)

// DefaultMaxInflight bounds the checks in flight in the open loop.
const DefaultMaxInflight = 256

// BehindThreshold is how late a check may start before it counts as late:
// a run where more than 1% of its checks started later than this after their
// scheduled time (the generator, or the bound on checks in flight, fell
// behind) is flagged, because then its p99 partly measures the generator.
const BehindThreshold = time.Millisecond

// Schedule yields the offsets from the start of the run at which checks are
// due: every 1/rate for a constant arrival, or with exponentially distributed
// gaps of mean 1/rate for a Poisson arrival (seeded, so the same seed gives
// the same schedule). Not safe for concurrent use.
type Schedule struct {
	rate    float64
	poisson bool
	rng     *rand.Rand
	n       int64
	t       float64 // seconds, Poisson only
}

// NewSchedule returns the schedule of rate checks per second.
func NewSchedule(rate float64, arrival string, seed uint64) (*Schedule, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("rate must be a positive number of checks per second, got %g", rate)
	}
	s := &Schedule{rate: rate}
	switch arrival {
	case ArrivalConstant, "":
	case ArrivalPoisson:
		s.poisson = true
		s.rng = rand.New(rand.NewPCG(seed, 0x6f70656e6c6f6f70))
	default:
		return nil, fmt.Errorf("arrival must be %s or %s, got %q", ArrivalConstant, ArrivalPoisson, arrival)
	}
	return s, nil
}

// Next is the offset of the next check. A constant schedule computes the i-th
// offset as i/rate, so rounding does not accumulate.
func (s *Schedule) Next() time.Duration {
	if s.poisson {
		at := s.t
		s.t += s.rng.ExpFloat64() / s.rate
		return time.Duration(at * float64(time.Second))
	}
	at := float64(s.n) / s.rate
	s.n++
	return time.Duration(at * float64(time.Second))
}

// Clock is the open loop's time: the real one, or a test's.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t or when ctx ends, whichever is first.
	SleepUntil(ctx context.Context, t time.Time)
}

type realClock struct{ timer *time.Timer }

// Now has a pointer receiver: a value one would copy the struct, reading
// timer while the scheduler's SleepUntil writes it (a data race under -race).
func (*realClock) Now() time.Time { return time.Now() }

func (c *realClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	select {
	case <-c.timer.C:
	case <-ctx.Done():
		c.timer.Stop()
	}
}

// stepClock is a test clock that must know when a check is handed to a
// worker and when its answer has been recorded, so that virtual time does not
// move on under a worker about to read it.
type stepClock interface {
	handed()
	recorded()
}

// slot is one scheduled check: when it was due and its key.
type slot struct {
	at  time.Time
	key int
}

// openLoop runs the open-loop workload with clock clk. The dispatcher walks
// the schedule, sleeps until each check is due and hands it to one of
// MaxInflight workers; when all of them are busy it waits, and the check
// still counts from its scheduled time. Checks due before the warm-up ends are
// sent but not counted; no check is scheduled at or after warm-up + duration,
// and those in flight then are awaited.
func openLoop(ctx context.Context, w Workload, t Target, onProgress func(Progress), clk Clock) (Result, error) {
	if err := w.Validate(); err != nil {
		return Result{}, err
	}
	sched, err := NewSchedule(w.Rate, w.Arrival, w.Seed)
	if err != nil {
		return Result{}, err
	}
	keys, err := w.keyGen(0)
	if err != nil {
		return Result{}, err
	}
	inflight := w.MaxInflight
	stats := make([]*workerStats, inflight)
	for i := range stats {
		stats[i] = new(workerStats)
	}
	start := clk.Now()
	measureFrom := start.Add(w.Warmup)
	end := measureFrom.Add(w.Duration)
	defer w.beginMeasure()()

	step, _ := clk.(stepClock)
	lags := make([]Histogram, inflight)
	late := make([]int64, inflight)
	slots := make(chan slot)
	var wg sync.WaitGroup
	for i := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stats[i]
			for s := range slots {
				began := clk.Now()
				allowed, err := t.Do(ctx, s.key)
				lat := clk.Now().Sub(s.at)
				switch {
				case s.at.Before(measureFrom):
				case err != nil && ctx.Err() != nil:
					// cut off by the caller, not a failure of the target
				default:
					// The start lag is how late the check began: the
					// generator's own delay, or the bound's.
					l := began.Sub(s.at)
					lags[i].Record(l)
					if l > BehindThreshold {
						late[i]++
					}
					st.record(s.key, lat, allowed, err)
				}
				if step != nil {
					step.recorded()
				}
			}
		}()
	}

	stopProgress := reportProgress(onProgress, func() Progress {
		return snapshot(stats, start, measureFrom, clk.Now(), w.Warmup+w.Duration)
	})

	var scheduled int64
	for ctx.Err() == nil {
		at := start.Add(sched.Next())
		if !at.Before(end) {
			break
		}
		key := keys.Next()
		clk.SleepUntil(ctx, at)
		if step != nil {
			step.handed()
		}
		select {
		case slots <- slot{at, key}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if !at.Before(measureFrom) {
			scheduled++
		}
	}
	close(slots)
	wg.Wait()
	stop := clk.Now()
	var cpu []ProcessCPU
	var cpuErr string
	if w.CPU != nil {
		if cpu, err = w.CPU.End(); err != nil {
			cpuErr = err.Error()
		}
	}
	stopProgress()

	var lag Histogram
	var nLate int64
	for i := range lags {
		lag.Merge(&lags[i])
		nLate += late[i]
	}
	r := Result{
		Concurrency: inflight,
		Keys:        w.Keys,
		Dist:        w.Dist,
		Batch:       1,
		Interrupted: ctx.Err() != nil,
		Rate:        w.Rate,
		Arrival:     w.arrival(),
		Scheduled:   scheduled,
		Late:        nLate,
		StartLagP99: lag.Quantile(0.99),
		StartLagMax: lag.Max(),
	}
	r.Behind = scheduled > 0 && float64(nLate) > 0.01*float64(scheduled)
	if r.Interrupted {
		if stop.After(measureFrom) {
			r.Elapsed = stop.Sub(measureFrom)
		}
	} else {
		// The measured interval is the scheduled one: the rate is what
		// was offered, whatever the tail of the last answers.
		r.Elapsed = w.Duration
	}
	r.collect(stats, w)
	r.CPU, r.CPUError = cpu, cpuErr
	if w.CPU != nil {
		r.CPUInterval, r.CPUs = w.CPU.Interval(), runtime.NumCPU()
	}
	return r, nil
}

// arrival names the arrival process, constant by default.
func (w Workload) arrival() string {
	if w.Arrival == "" {
		return ArrivalConstant
	}
	return w.Arrival
}

// record counts one answered (or failed) single check of key.
func (st *workerStats) record(key int, lat time.Duration, allowed bool, err error) {
	ks := &st.byKind[kindOf(key)]
	st.requests.Add(1)
	if err != nil {
		st.countError(err, 1)
		ks.errors.Add(1)
		return
	}
	st.hist.Record(lat)
	ks.hist.Record(lat)
	if allowed {
		st.allowed.Add(1)
		ks.allowed.Add(1)
	} else {
		st.refused.Add(1)
		ks.refused.Add(1)
	}
}

// behindSummary is how far the generator fell behind its schedule, for the
// table: "p99 12µs, max 3.1ms; 0 of 30,000 checks started > 1ms late".
func (r Result) behindSummary() string {
	s := fmt.Sprintf("start lag p99 %s, max %s; %s of %s checks started > %s late",
		fmtDuration(r.StartLagP99), fmtDuration(r.StartLagMax), formatInt(r.Late), formatInt(r.Scheduled), fmtDuration(BehindThreshold))
	if r.Behind {
		s += " — BEHIND SCHEDULE: latencies include the generator's delay"
	}
	return s
}
