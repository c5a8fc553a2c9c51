package bench

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is virtual time: SleepUntil moves it forward once every check
// handed out has been answered and recorded (so time never moves under a
// worker about to read it), and a target moves it forward to stand for time
// spent answering. Nothing reads the wall clock, so the tests assert exact
// latencies.
type fakeClock struct {
	mu      sync.Mutex
	idle    *sync.Cond
	now     time.Time
	pending int
}

func newFakeClock() *fakeClock {
	c := &fakeClock{now: time.Unix(1_000_000, 0)}
	c.idle = sync.NewCond(&c.mu)
	return c
}

func (c *fakeClock) handed() {
	c.mu.Lock()
	c.pending++
	c.mu.Unlock()
}

func (c *fakeClock) recorded() {
	c.mu.Lock()
	c.pending--
	c.idle.Broadcast()
	c.mu.Unlock()
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	c.mu.Lock()
	for c.pending > 0 {
		c.idle.Wait()
	}
	c.mu.Unlock()
	c.advanceTo(t)
}

func (c *fakeClock) advanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.mu.Unlock()
}

// clockTarget answers at once (allowed), except that the call numbered
// stallAt first moves the clock to stallUntil (from the start), standing for
// a server stall. It records the keys it saw in order.
type clockTarget struct {
	clk        *fakeClock
	start      time.Time
	stallAt    int
	stallUntil time.Duration
	mu         sync.Mutex
	calls      int
	keys       []int
}

func (c *clockTarget) Do(_ context.Context, key int) (bool, error) {
	c.mu.Lock()
	n := c.calls
	c.calls++
	c.keys = append(c.keys, key)
	c.mu.Unlock()
	if n == c.stallAt {
		c.clk.advanceTo(c.start.Add(c.stallUntil))
	}
	return true, nil
}

func openWorkload(rate float64, inflight int, d time.Duration) Workload {
	w := DefaultWorkload()
	w.Rate, w.MaxInflight, w.Duration, w.Warmup = rate, inflight, d, 0
	w.Keys, w.Dist = 1000, DistSequential
	return w
}

// A constant schedule is exactly i/rate, without accumulated rounding.
func TestScheduleConstant(t *testing.T) {
	s, err := NewSchedule(3000, ArrivalConstant, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30_000 {
		want := time.Duration(float64(i) / 3000 * float64(time.Second))
		if got := s.Next(); got != want {
			t.Fatalf("check %d due at %s, want %s", i, got, want)
		}
	}
}

// A Poisson schedule has exponential gaps of mean 1/rate (so its variance is
// the mean squared), is increasing, and is the same for the same seed.
func TestSchedulePoisson(t *testing.T) {
	const rate, n = 1000.0, 200_000
	a, _ := NewSchedule(rate, ArrivalPoisson, 7)
	b, _ := NewSchedule(rate, ArrivalPoisson, 7)
	var prev time.Duration
	var sum, sumSq float64
	for i := range n {
		x, y := a.Next(), b.Next()
		if x != y {
			t.Fatalf("check %d: same seed, %s and %s", i, x, y)
		}
		if i == 0 {
			if x != 0 {
				t.Fatalf("first check due at %s, want 0", x)
			}
		} else {
			gap := (x - prev).Seconds()
			if gap < 0 {
				t.Fatalf("check %d due before the one before it", i)
			}
			sum += gap
			sumSq += gap * gap
		}
		prev = x
	}
	mean := sum / (n - 1)
	sd := math.Sqrt(sumSq/(n-1) - mean*mean)
	if math.Abs(mean-1/rate) > 0.01/rate || math.Abs(sd-1/rate) > 0.02/rate {
		t.Fatalf("gaps mean %g s, sd %g s; want both %g s", mean, sd, 1/rate)
	}
	c, _ := NewSchedule(rate, ArrivalPoisson, 8)
	c.Next()
	if c.Next() == func() time.Duration { a, _ := NewSchedule(rate, ArrivalPoisson, 7); a.Next(); return a.Next() }() {
		t.Fatal("another seed gave the same schedule")
	}
}

func TestScheduleRejects(t *testing.T) {
	for _, tc := range []struct {
		rate    float64
		arrival string
		want    string
	}{{0, ArrivalConstant, "rate"}, {-1, ArrivalPoisson, "rate"}, {math.Inf(1), "", "rate"}, {math.NaN(), "", "rate"}, {10, "bursty", "arrival"}} {
		if _, err := NewSchedule(tc.rate, tc.arrival, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSchedule(%g, %q) = %v, want an error naming %s", tc.rate, tc.arrival, err, tc.want)
		}
	}
	w := openWorkload(100, 1, time.Second)
	w.Batch = 2
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "batch") {
		t.Errorf("open loop with batches: %v", err)
	}
	w = openWorkload(100, 0, time.Second)
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), "inflight") {
		t.Errorf("open loop with no checks in flight: %v", err)
	}
}

// Without a stall every check is sent at its time and answered at once: the
// run sends exactly rate × duration checks, none late, all at latency 0.
func TestOpenLoopOnSchedule(t *testing.T) {
	clk := newFakeClock()
	tgt := &clockTarget{clk: clk, start: clk.Now(), stallAt: -1}
	w := openWorkload(1000, 4, 2*time.Second)
	r, err := openLoop(context.Background(), w, tgt, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed != 2000 || r.Scheduled != 2000 || r.Late != 0 || r.Behind || r.Max != 0 || r.StartLagMax != 0 {
		t.Fatalf("allowed %d scheduled %d late %d behind %v max %s lag %s; want 2000 on time at 0",
			r.Allowed, r.Scheduled, r.Late, r.Behind, r.Max, r.StartLagMax)
	}
	if r.ChecksPerSec() != 1000 || r.Rate != 1000 || r.Arrival != ArrivalConstant || r.Concurrency != 4 {
		t.Fatalf("checks/s %g rate %g arrival %q concurrency %d", r.ChecksPerSec(), r.Rate, r.Arrival, r.Concurrency)
	}
	// The dispatcher draws the keys, so the sequence is the workload's.
	for i, k := range tgt.keys {
		if k != i%1000 {
			t.Fatalf("check %d got key %d, want %d", i, k, i%1000)
		}
	}
}

// A check that cannot start because every slot is busy still counts from its
// scheduled time: with one check in flight at 1,000/s and the first answer
// taking 10 ms, the checks due at 1..9 ms wait for it and their latencies are
// 9..1 ms, which a closed loop would never see. (The fake clock also holds
// the dispatcher until the stalled answer is in; the result is the same.)
func TestOpenLoopCountsFromSchedule(t *testing.T) {
	clk := newFakeClock()
	tgt := &clockTarget{clk: clk, start: clk.Now(), stallAt: 0, stallUntil: 10 * time.Millisecond}
	w := openWorkload(1000, 1, 10*time.Millisecond)
	r, err := openLoop(context.Background(), w, tgt, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed != 10 || r.Scheduled != 10 {
		t.Fatalf("allowed %d scheduled %d, want 10", r.Allowed, r.Scheduled)
	}
	// Latencies 10, 9, ..., 1 ms: p50 is the 5th smallest (5 ms, to the
	// histogram's 0.8% resolution), max 10 ms exactly.
	if r.Max != 10*time.Millisecond || r.P50 < 5*time.Millisecond || r.P50 > 5040*time.Microsecond {
		t.Fatalf("p50 %s max %s, want 5ms and 10ms", r.P50, r.Max)
	}
	// Checks 1..9 started 9..1 ms late, 8 of them by more than 1 ms: the
	// run fell behind.
	if r.Late != 8 || !r.Behind || r.StartLagMax != 9*time.Millisecond {
		t.Fatalf("late %d behind %v lag max %s, want 8 late, behind, 9ms", r.Late, r.Behind, r.StartLagMax)
	}
	var out strings.Builder
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "BEHIND SCHEDULE") || !strings.Contains(out.String(), "p99.9") {
		t.Fatalf("table does not flag the run:\n%s", out.String())
	}
}

// Checks due during the warm-up are sent but not counted, whatever their
// latency; the measured interval is the scheduled one.
func TestOpenLoopWarmup(t *testing.T) {
	clk := newFakeClock()
	// The first check stalls until 150 ms, past the 100 ms warm-up: the
	// warm-up's own checks are late, but only those due from 100 ms on
	// count (due 100..149 ms, answered at 150 ms).
	tgt := &clockTarget{clk: clk, start: clk.Now(), stallAt: 0, stallUntil: 150 * time.Millisecond}
	w := openWorkload(1000, 1, 100*time.Millisecond)
	w.Warmup = 100 * time.Millisecond
	r, err := openLoop(context.Background(), w, tgt, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed != 100 || r.Scheduled != 100 || r.Elapsed != 100*time.Millisecond {
		t.Fatalf("allowed %d scheduled %d elapsed %s, want 100, 100, 100ms", r.Allowed, r.Scheduled, r.Elapsed)
	}
	if r.Max != 50*time.Millisecond || r.Late != 49 {
		t.Fatalf("max %s late %d, want 50ms (due at 100 ms, answered at 150 ms) and 49", r.Max, r.Late)
	}
	if len(tgt.keys) != 200 {
		t.Fatalf("sent %d checks, want 200 (warm-up included)", len(tgt.keys))
	}
}

// Run takes the open loop when a rate is set, and the result survives JSON.
func TestOpenLoopJSON(t *testing.T) {
	clk := newFakeClock()
	tgt := &clockTarget{clk: clk, start: clk.Now(), stallAt: 0, stallUntil: 10 * time.Millisecond}
	r, err := openLoop(context.Background(), openWorkload(1000, 1, 10*time.Millisecond), tgt, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteJSONLine(&b, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSONLines(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	g := back[0]
	if g.Rate != r.Rate || g.Arrival != r.Arrival || g.Scheduled != r.Scheduled || g.Late != r.Late ||
		g.StartLagMax != r.StartLagMax || g.StartLagP99 != r.StartLagP99 || g.Behind != r.Behind || g.P999 != r.P999 {
		t.Fatalf("round trip lost the open-loop fields:\n%+v\n%+v", r, g)
	}
}
