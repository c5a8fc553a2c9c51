package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// TestTopKeysPlanQueueIsBatchIndependent (rapid): plan checks' sketch
// counts are queued and added when the batch commits. Replicas cut one log
// into batches differently, so the same log — plan checks of random keys
// and costs, a plan changed to drop a limit, deleted and put again, in
// between (its keys assigned to it) — applied one entry per batch and in random batches must give
// every plan view alike, and a batch's counts must be seen once it
// commits. Fails if the queue is flushed out of log order, if a plan change
// does not flush it first (a deleted plan's queued counts would reappear,
// a dropped limit's refusals survive), or if a batch's counts are lost or
// added twice.
func TestTopKeysPlanQueueIsBatchIndependent(t *testing.T) {
	tight := map[string]algo.Config{
		"per_second": {Algorithm: "token_bucket", Limit: 3, Window: "1s"},
		"daily":      {Algorithm: "fixed_window", Limit: 40, Calendar: "day", Timezone: "UTC"},
	}
	rapid.Check(t, func(rt *rapid.T) {
		start := t0 - t0%hour
		// Keys get the plan by assignment, not as the default plan: a
		// default plan cannot be deleted.
		var as []Assignment
		for i := 0; i <= 2*topK; i++ {
			as = append(as, Assignment{Key: fmt.Sprintf("k%d", i), Plan: "free"})
		}
		log := [][]byte{EncodePutPlan(planOf(t, "free", tight)), EncodeAssignPlans(as)}
		now := start
		for i, n := 0, rapid.IntRange(20, 150).Draw(rt, "entries"); i < n; i++ {
			now += int64(rapid.IntRange(0, 40).Draw(rt, "ms")) * int64(time.Millisecond)
			switch rapid.IntRange(0, 19).Draw(rt, "what") {
			case 0: // drop the limit that refuses most
				log = append(log, EncodePutPlan(planOf(t, "free", map[string]algo.Config{"daily": tight["daily"]})))
			case 1: // both limits again
				log = append(log, EncodePutPlan(planOf(t, "free", tight)))
			case 2: // delete and put again: the sketches start over
				log = append(log, EncodeDeletePlan("free"), EncodePutPlan(planOf(t, "free", tight)))
			default:
				var ops []Op
				for j, m := 0, rapid.IntRange(1, 6).Draw(rt, "ops"); j < m; j++ {
					key := fmt.Sprintf("k%d", rapid.IntRange(0, 2*topK).Draw(rt, "key"))
					ops = append(ops, Op{Checks: []Check{{Key: key, ByPlan: true, Cost: int64(rapid.IntRange(0, 4).Draw(rt, "cost"))}}})
				}
				log = append(log, EncodeCheck(nil, now, 0, ops))
			}
		}
		views := func(f *FSM) string {
			s := ""
			for _, lim := range []string{"", "per_second", "daily"} {
				for _, by := range []string{nodeapi.TopByAllowed, nodeapi.TopByRefused} {
					for _, w := range []time.Duration{5 * time.Minute, time.Hour} {
						s += fmt.Sprintf("[%s %s %v] %s\n", lim, by, w, topView(f, nodeapi.TopKeysQuery{Plan: "free", PlanLimit: lim, By: by, Window: w}))
					}
				}
			}
			return s
		}
		apply := func(f *FSM, next *uint64, cmds [][]byte) {
			ls := make([]*raft.Log, len(cmds))
			for i, c := range cmds {
				ls[i] = &raft.Log{Index: *next, Term: 1, Type: raft.LogCommand, Data: c}
				*next++
			}
			if _, err := f.applyEntries(ls); err != nil {
				rt.Fatalf("apply: %v", err)
			}
		}
		one := openFSM(t, "", Options{})
		next := one.AppliedIndex() + 1
		for _, c := range log {
			apply(one, &next, [][]byte{c})
		}
		batched := openFSM(t, "", Options{})
		next = batched.AppliedIndex() + 1
		for i := 0; i < len(log); {
			j := min(len(log), i+rapid.IntRange(1, 20).Draw(rt, "batch"))
			apply(batched, &next, log[i:j])
			i = j
		}
		if a, b := views(one), views(batched); a != b {
			rt.Fatalf("one entry per batch:\n%s\nbatched:\n%s", a, b)
		}
	})
}
