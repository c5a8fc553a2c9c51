package cluster

import (
	"testing"
	"time"
)

// diskFeed drives a diskWatch with writes of d each, one per step, on a
// fake clock.
type diskFeed struct {
	w   *diskWatch
	now time.Time
}

func (f *diskFeed) write(d time.Duration) {
	id := f.w.begin(f.now)
	f.now = f.now.Add(d)
	f.w.end(id, f.now)
}

// run writes of d back to back for dur, evaluating every quarter window as
// diskLoop does, and returns the verdicts that asked for something.
func (f *diskFeed) run(d, dur time.Duration, leader bool) (transfers, fails int, last diskVerdict) {
	end := f.now.Add(dur)
	next := f.now.Add(f.w.window / 4)
	for f.now.Before(end) {
		f.write(d)
		for !next.After(f.now) {
			last = f.w.evaluate(next, leader)
			if last.transfer {
				transfers++
			}
			if last.fail {
				fails++
			}
			next = next.Add(f.w.window / 4)
		}
	}
	return
}

func TestDiskWatchHealthyDiskAsksNothing(t *testing.T) {
	f := &diskFeed{w: newDiskWatch(500*time.Millisecond, 2*time.Second, 30*time.Second), now: time.Unix(1000, 0)}
	tr, fl, v := f.run(5*time.Millisecond, time.Minute, true)
	if tr != 0 || fl != 0 || v.p99 != 5*time.Millisecond {
		t.Fatalf("healthy disk: %d transfers, %d fails, p99 %v", tr, fl, v.p99)
	}
	// One slow write among hundreds (a GC pause, say) is not the p99.
	f.write(900 * time.Millisecond)
	if tr, fl, _ := f.run(5*time.Millisecond, 10*time.Second, true); tr != 0 || fl != 0 {
		t.Fatalf("one slow write: %d transfers, %d fails", tr, fl)
	}
}

func TestDiskWatchSlowLeaderTransfersThenFails(t *testing.T) {
	w := newDiskWatch(500*time.Millisecond, 2*time.Second, 30*time.Second)
	f := &diskFeed{w: w, now: time.Unix(1000, 0)}
	f.run(5*time.Millisecond, 5*time.Second, true)
	// 3 writes a second: every one takes 333 ms... and then 700 ms.
	if tr, _, v := f.run(333*time.Millisecond, 10*time.Second, true); tr != 0 || v.p99 != 333*time.Millisecond {
		t.Fatalf("below the bound: %d transfers, p99 %v", tr, v.p99)
	}
	start := f.now
	if tr, _, _ := f.run(700*time.Millisecond, 1900*time.Millisecond, true); tr != 0 {
		t.Fatalf("stalled for less than a window: %d transfers", tr)
	}
	tr, fl, v := f.run(700*time.Millisecond, time.Second, true)
	if tr != 1 || fl != 0 || !w.stalled.Load() || v.p99 != 700*time.Millisecond {
		t.Fatalf("stalled for a window: %d transfers, %d fails, stalled %v, p99 %v", tr, fl, w.stalled.Load(), v.p99)
	}
	// Still leading (the transfer failed, or it was elected again): at
	// most one transfer per window.
	if tr, _, _ := f.run(700*time.Millisecond, 4*time.Second, true); tr != 2 {
		t.Fatalf("4 s more as leader: %d transfers, want 2 (one per window)", tr)
	}
	// A follower never transfers, and fails once the stall has lasted 30 s.
	tr, fl, _ = f.run(700*time.Millisecond, 30*time.Second-f.now.Sub(start)-time.Second, false)
	if tr != 0 || fl != 0 {
		t.Fatalf("before 30 s: %d transfers, %d fails", tr, fl)
	}
	if _, fl, _ := f.run(700*time.Millisecond, 3*time.Second, false); fl != 1 {
		t.Fatalf("30 s stalled: %d fails, want 1", fl)
	}
	if _, fl, _ := f.run(700*time.Millisecond, 10*time.Second, false); fl != 0 {
		t.Fatalf("failed again: %d", fl)
	}
}

func TestDiskWatchStuckWriteCounts(t *testing.T) {
	w := newDiskWatch(500*time.Millisecond, 2*time.Second, 0)
	now := time.Unix(1000, 0)
	w.begin(now) // never completes
	var transfers int
	for at := now.Add(500 * time.Millisecond); at.Before(now.Add(10 * time.Second)); at = at.Add(500 * time.Millisecond) {
		if v := w.evaluate(at, true); v.transfer {
			transfers++
		} else if v.fail {
			t.Fatal("failed with DiskStallFail off")
		}
	}
	if transfers == 0 || w.lastP99() < 9*time.Second {
		t.Fatalf("a write stuck for 10 s: %d transfers, p99 %v", transfers, w.lastP99())
	}
}

func TestDiskWatchRecovers(t *testing.T) {
	w := newDiskWatch(500*time.Millisecond, 2*time.Second, 30*time.Second)
	f := &diskFeed{w: w, now: time.Unix(1000, 0)}
	for i := 0; i < 10; i++ { // 20 s slow, 10 s fast, ...: never 30 s in a row
		f.run(700*time.Millisecond, 20*time.Second, false)
		if _, fl, _ := f.run(5*time.Millisecond, 10*time.Second, false); fl != 0 || w.stalled.Load() {
			t.Fatalf("round %d: failed %d, stalled %v after recovering", i, fl, w.stalled.Load())
		}
	}
}

func TestDiskWatchOffDecidesNothing(t *testing.T) {
	f := &diskFeed{w: newDiskWatch(0, 0, 0), now: time.Unix(1000, 0)}
	if tr, fl, v := f.run(time.Second, time.Minute, true); tr != 0 || fl != 0 || v.p99 != time.Second {
		t.Fatalf("off: %d transfers, %d fails, p99 %v", tr, fl, v.p99)
	}
}
