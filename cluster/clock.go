package cluster

import (
	"time"
)

// Leader time. Every entry that needs a time carries the leader's, stamped
// by stampLocked from one clock function, wallNow: the wall clock plus a
// fault offset (Config.FaultClockOffset, SetFaultClockOffset) that tests and
// chaos runs use to step a node's clock. The state machine never reads a
// clock (fsm/DESIGN.md).
//
// Invariants, whatever the wall clock does:
//   - Leader time never goes backwards: a stamp is at least the last one
//     this node made and the state machine's LastTime (a new leader whose
//     clock is behind decides at the later time).
//   - Leader time never stops: while the wall clock is behind the last
//     stamp (stepped back, or a new leader's clock is behind), it advances
//     from this node's last stamp at the rate of its monotonic clock.
//     Before, it froze until the wall clock caught up: a step back by a
//     window kept the window closed for that long (budget lost).
//   - A lease holder counts its lease on its own monotonic clock
//     (service/lease.go), and stops spending it once its replica has
//     applied a time past the end of the window the lease is counted in
//     (a leader whose clock stepped forward rolls the window early).

// wallNow is the wall clock leader time is read from (ns since the epoch).
func (c *leaderClock) wallNow() int64 {
	return time.Now().UnixNano() + c.offset.Load()
}

// SetFaultClockOffset sets the offset wallNow adds to this node's wall
// clock: fault injection for tests (the in-process harness's SetClockOffset)
// and chaos runs (serve's LIMITD_FAULT_CLOCK_OFFSET). Never in production.
func (n *Node) SetFaultClockOffset(d time.Duration) { n.clock.offset.Store(int64(d)) }

// LastTime is the latest leader time this node's state machine has applied.
func (n *Node) LastTime() int64 { return n.fsm.LastTime() }

// keepRunning is stampLocked's hook (under mu): a stamp at least the last
// one plus the monotonic time since it, so leader time runs at real rate
// while the wall clock is behind. It records the instant of the stamp.
func (c *leaderClock) keepRunning(now int64) int64 {
	mono := time.Now()
	if c.last > 0 && !c.lastAt.IsZero() {
		now = max(now, c.last+int64(mono.Sub(c.lastAt)))
	}
	c.lastAt = mono
	return now
}
