package cluster_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A sequential model of one limiter key, for porcupine.
//
// The fault tests use limits whose window is long compared with the test
// (hours), so within a test a key's limiter is a counter: a check of cost c
// is allowed iff used + max(c, 1) ≤ limit, and then used grows by c; a peek
// (cost 0) changes nothing and reports the remaining budget, which makes a
// stale read detectable. Time never enters the model, which matters because
// the time a decision is made at is the leader's stamp, not the client's.
//
// An operation whose outcome the client did not learn (outcome unknown, the
// node went away, the retries ran out) may or may not have been applied, at
// any moment after it was invoked, possibly after the client gave up: it
// returns at +∞ and steps to both branches, as etcd's robustness tests
// model lost writes. An operation the node reports as not proposed
// (ErrNoLeader) is modelled as a no-op: that is the documented contract, and
// a build that breaks it is caught here.

// outcome is what a client learned about one operation.
type outcome uint8

const (
	outAllowed    outcome = iota + 1 // acknowledged: allowed
	outRefused                       // acknowledged: refused
	outUnknown                       // proposed, fate unknown: may or may not have been applied
	outNotApplied                    // the node said nothing was proposed (ErrNoLeader)
	// outRefusedCached: refused from the node's over-limit cache. The refusal
	// is a fact about the state the node last applied, which is a prefix of
	// the log: with no reset in these tests, consumption only grows, so it
	// must hold at its linearization point too. Its remaining is as of that
	// prefix (documented staleness), so the model checks only the refusal.
	outRefusedCached
)

func (o outcome) String() string {
	switch o {
	case outAllowed:
		return "allowed"
	case outRefused:
		return "refused"
	case outUnknown:
		return "unknown"
	case outNotApplied:
		return "not-applied"
	case outRefusedCached:
		return "refused-cached"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// limiterInput is one operation on one key.
type limiterInput struct {
	Key   string
	Limit int64
	Cost  int64 // 0 is a peek
}

// limiterOutput is what the client saw. Remaining is meaningful only for
// acknowledged operations.
type limiterOutput struct {
	Outcome   outcome
	Remaining int64
}

// effective is the cost the limiter compares against the budget: a peek asks
// whether a request of cost 1 would be allowed.
func effective(cost int64) int64 { return max(cost, 1) }

// limiterModel is the per-key counter model; its state is the used budget.
var limiterModel = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []interface{} { return []interface{}{int64(0)} },
	Step: func(state, input, output interface{}) []interface{} {
		return stepLimiter(state.(int64), input.(limiterInput), output.(limiterOutput))
	},
	Equal: func(a, b interface{}) bool { return a.(int64) == b.(int64) },
	Hash:  func(s interface{}) uint64 { return uint64(s.(int64)) },
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(limiterInput), output.(limiterOutput)
		op := fmt.Sprintf("check(%s, cost %d)", in.Key, in.Cost)
		if in.Cost == 0 {
			op = fmt.Sprintf("peek(%s)", in.Key)
		}
		switch out.Outcome {
		case outAllowed, outRefused:
			return fmt.Sprintf("%s → %s, remaining %d", op, out.Outcome, out.Remaining)
		}
		return fmt.Sprintf("%s → %s", op, out.Outcome)
	},
	DescribeState: func(s interface{}) string { return fmt.Sprintf("used %d", s.(int64)) },
}

// stepLimiter returns the states the key may be in after the operation, or
// none if the limiter could not have answered that way from used.
func stepLimiter(used int64, in limiterInput, out limiterOutput) []interface{} {
	fits := used+effective(in.Cost) <= in.Limit
	switch out.Outcome {
	case outAllowed:
		next := used + in.Cost
		if !fits || out.Remaining != in.Limit-next {
			return nil
		}
		return []interface{}{next}
	case outRefused:
		if fits || out.Remaining != max(in.Limit-used, 0) {
			return nil
		}
		return []interface{}{used}
	case outRefusedCached:
		if fits {
			return nil
		}
		return []interface{}{used}
	case outUnknown:
		if fits && in.Cost > 0 {
			return []interface{}{used, used + in.Cost}
		}
		return []interface{}{used}
	case outNotApplied:
		return []interface{}{used}
	}
	return nil
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(limiterInput).Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, byKey[k])
	}
	return parts
}

// record is one client operation as the fault tests record it. Times are
// nanoseconds on the test's monotonic clock.
type record struct {
	Client int
	In     limiterInput
	Out    limiterOutput
	Call   int64
	Return int64 // ignored for outUnknown: such an operation never returned
}

// operations converts records to a porcupine history. Unknown operations
// return at +∞; unknown peeks carry no information and are left out.
func operations(recs []record) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(recs))
	for _, r := range recs {
		ret := r.Return
		if r.Out.Outcome == outUnknown {
			if r.In.Cost == 0 {
				continue
			}
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: ret})
	}
	return ops
}

// keyTally is the direct, checker-independent account of one key.
type keyTally struct {
	Limit   int64
	Allowed int64 // cost of acknowledged allowed checks
	Unknown int64 // cost of checks with an unknown outcome
}

// tally sums acknowledged and unknown costs per key (peeks excluded).
func tally(recs []record) map[string]*keyTally {
	t := map[string]*keyTally{}
	for _, r := range recs {
		k := t[r.In.Key]
		if k == nil {
			k = &keyTally{Limit: r.In.Limit}
			t[r.In.Key] = k
		}
		if r.In.Cost == 0 {
			continue
		}
		switch r.Out.Outcome {
		case outAllowed:
			k.Allowed += r.In.Cost
		case outUnknown:
			k.Unknown += r.In.Cost
		}
	}
	return t
}

// overAdmissions is the number of keys whose acknowledged allowed cost
// exceeds the limit (every window is longer than the test, so the whole test
// is one window).
func overAdmissions(t map[string]*keyTally) (n int, detail []string) {
	for key, k := range t {
		if k.Allowed > k.Limit {
			n++
			detail = append(detail, fmt.Sprintf("%s: allowed %d > limit %d", key, k.Allowed, k.Limit))
		}
	}
	sort.Strings(detail)
	return n, detail
}

// checkHistory checks the history with porcupine against the limiter model.
func checkHistory(recs []record, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(limiterModel.ToModel(), operations(recs), timeout)
}

// linearizable checks the history; on a violation it writes porcupine's
// visualization to a file that outlives the test and names it.
func linearizable(t testing.TB, recs []record, timeout time.Duration) porcupine.CheckResult {
	t.Helper()
	res, info := checkHistory(recs, timeout)
	if res == porcupine.Illegal {
		model := limiterModel.ToModel()
		dir, err := os.MkdirTemp("", "limitd-porcupine-")
		if err == nil {
			path := filepath.Join(dir, "history.html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				t.Logf("porcupine visualization of the violation: %s", path)
			}
		}
	}
	return res
}

func TestLimiterModel(t *testing.T) {
	const L = 3
	in := func(key string, cost int64) limiterInput { return limiterInput{Key: key, Limit: L, Cost: cost} }
	allowed := func(rem int64) limiterOutput { return limiterOutput{Outcome: outAllowed, Remaining: rem} }
	refused := func(rem int64) limiterOutput { return limiterOutput{Outcome: outRefused, Remaining: rem} }
	unknown := limiterOutput{Outcome: outUnknown}
	notApplied := limiterOutput{Outcome: outNotApplied}
	op := func(client int, i limiterInput, o limiterOutput, call, ret int64) record {
		return record{Client: client, In: i, Out: o, Call: call, Return: ret}
	}
	cases := []struct {
		name string
		recs []record
		want porcupine.CheckResult
	}{
		{"sequential spend then refuse", []record{
			op(0, in("a", 1), allowed(2), 0, 1),
			op(0, in("a", 2), allowed(0), 2, 3),
			op(0, in("a", 1), refused(0), 4, 5),
			op(0, in("a", 0), refused(0), 6, 7), // a peek reports "cost 1 would be refused"
		}, porcupine.Ok},
		{"over-admission", []record{
			op(0, in("a", 2), allowed(1), 0, 1),
			op(1, in("a", 2), allowed(0), 2, 3),
		}, porcupine.Illegal},
		{"concurrent checks linearize in either order", []record{
			op(0, in("a", 2), allowed(0), 0, 10),
			op(1, in("a", 1), allowed(2), 1, 9),
		}, porcupine.Ok},
		{"refusal with budget left", []record{
			op(0, in("a", 1), allowed(2), 0, 1),
			op(0, in("a", 1), refused(2), 2, 3),
		}, porcupine.Illegal},
		{"wrong remaining", []record{
			op(0, in("a", 1), allowed(1), 0, 1),
		}, porcupine.Illegal},
		{"stale peek after an acknowledged spend", []record{
			op(0, in("a", 2), allowed(1), 0, 1),
			op(1, in("a", 0), allowed(3), 2, 3),
		}, porcupine.Illegal},
		{"cost above the limit is refused without spending", []record{
			op(0, in("a", 4), refused(3), 0, 1),
			op(0, in("a", 3), allowed(0), 2, 3),
		}, porcupine.Ok},
		{"unknown may have been applied", []record{
			op(0, in("a", 2), unknown, 0, 1),
			op(1, in("a", 2), refused(1), 5, 6),
		}, porcupine.Ok},
		{"unknown may not have been applied", []record{
			op(0, in("a", 2), unknown, 0, 1),
			op(1, in("a", 3), allowed(0), 5, 6),
		}, porcupine.Ok},
		{"unknown applied late, after a later acknowledged check", []record{
			op(0, in("a", 1), unknown, 0, 1),
			op(1, in("a", 0), allowed(3), 5, 6),
			op(1, in("a", 0), allowed(2), 7, 8),
		}, porcupine.Ok},
		{"unknown cannot be applied twice", []record{
			op(0, in("a", 1), unknown, 0, 1),
			op(1, in("a", 0), allowed(1), 5, 6),
		}, porcupine.Illegal},
		{"not-applied must not count", []record{
			op(0, in("a", 2), notApplied, 0, 1),
			op(1, in("a", 0), allowed(1), 5, 6),
		}, porcupine.Illegal},
		{"not-applied leaves the budget", []record{
			op(0, in("a", 2), notApplied, 0, 1),
			op(1, in("a", 3), allowed(0), 5, 6),
		}, porcupine.Ok},
		{"keys are independent", []record{
			op(0, in("a", 3), allowed(0), 0, 1),
			op(1, in("b", 3), allowed(0), 0, 1),
			op(0, in("a", 1), refused(0), 2, 3),
			op(1, in("b", 0), refused(0), 2, 3),
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := checkHistory(tc.recs, 10*time.Second); got != tc.want {
				t.Fatalf("porcupine: %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTallyAndOverAdmissions(t *testing.T) {
	recs := []record{
		{In: limiterInput{Key: "a", Limit: 2, Cost: 1}, Out: limiterOutput{Outcome: outAllowed}},
		{In: limiterInput{Key: "a", Limit: 2, Cost: 2}, Out: limiterOutput{Outcome: outAllowed}},
		{In: limiterInput{Key: "a", Limit: 2, Cost: 1}, Out: limiterOutput{Outcome: outUnknown}},
		{In: limiterInput{Key: "a", Limit: 2, Cost: 0}, Out: limiterOutput{Outcome: outAllowed}},
		{In: limiterInput{Key: "b", Limit: 2, Cost: 2}, Out: limiterOutput{Outcome: outAllowed}},
		{In: limiterInput{Key: "b", Limit: 2, Cost: 1}, Out: limiterOutput{Outcome: outRefused}},
		{In: limiterInput{Key: "b", Limit: 2, Cost: 1}, Out: limiterOutput{Outcome: outNotApplied}},
	}
	tl := tally(recs)
	if a := tl["a"]; a.Allowed != 3 || a.Unknown != 1 {
		t.Errorf("a: %+v, want allowed 3 unknown 1", *a)
	}
	if b := tl["b"]; b.Allowed != 2 || b.Unknown != 0 {
		t.Errorf("b: %+v, want allowed 2 unknown 0", *b)
	}
	if n, detail := overAdmissions(tl); n != 1 {
		t.Errorf("over-admissions %d (%v), want 1 (key a)", n, detail)
	}
}
