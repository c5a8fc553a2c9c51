package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// testLog is a deterministic mixed workload: policies of every algorithm
// (one shadow), inline limits, atomic groups with duplicate keys, request ids
// (with repeats), peeks, resets, node changes, expiry, and a leader clock
// that sometimes steps back.
func testLog(t testing.TB, n int) [][]byte {
	rng := rand.New(rand.NewSource(1))
	specs := []algo.Config{
		{Algorithm: "fixed_window", Limit: 5, Window: "10s"},
		{Algorithm: "sliding_log", Limit: 4, Window: "10s", CountRefused: true},
		{Algorithm: "sliding_window", Limit: 6, Window: "10s"},
		{Algorithm: "token_bucket", Limit: 3, Window: "5s", Burst: 5},
		{Algorithm: "leaky_bucket", Limit: 3, Window: "5s"},
	}
	var cmds [][]byte
	sentOps := map[string]Op{}
	for i, c := range specs {
		p := Policy{Name: fmt.Sprintf("p%d", i), Spec: mustSpec(t, c), Shadow: i == 2}
		if i == 0 || i == 3 { // bans (ban.go): records beside key states, swept and unbanned below
			p.OnExceed = onExceed(2*time.Second, 5*time.Second, 4*time.Second)
		}
		cmds = append(cmds, EncodePutPolicy(p))
	}
	cmds = append(cmds, EncodeSetNode("n1", "127.0.0.1:8080"), EncodePutList("l", []byte(`{"kind":"deny"}`)))
	inline := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "3s"})
	now := t0
	check := func() Check {
		c := Check{Key: fmt.Sprintf("k%d", rng.Intn(8)), Cost: int64(rng.Intn(3))}
		if rng.Intn(6) == 0 {
			c.Spec = &inline
		} else {
			c.Policy = fmt.Sprintf("p%d", rng.Intn(len(specs)))
		}
		return c
	}
	for len(cmds) < n {
		now += int64(rng.Intn(700)) * int64(time.Millisecond)
		stamp := now
		if rng.Intn(10) == 0 {
			stamp -= 2 * sec // a leader whose clock is behind
		}
		switch r := rng.Intn(20); {
		case r < 15:
			ops := make([]Op, 1+rng.Intn(6))
			for j := range ops {
				op := Op{Checks: []Check{check()}}
				if rng.Intn(4) == 0 {
					op.All = true
					op.Checks = append(op.Checks, check(), op.Checks[0])
				}
				if rng.Intn(3) == 0 {
					op.RequestID = fmt.Sprintf("r%d", rng.Intn(30))
					// Half the reuses of an id are true retries; the
					// others differ and are refused as conflicts.
					if sent, ok := sentOps[op.RequestID]; ok && rng.Intn(2) == 0 {
						op = sent
					}
					sentOps[op.RequestID] = op
				}
				ops[j] = op
			}
			cmds = append(cmds, EncodeCheck(nil, stamp, int64(20*time.Second), ops))
		case r < 16:
			if rng.Intn(3) == 0 {
				cmds = append(cmds, EncodeUnban(check().Key, ""))
				break
			}
			cmds = append(cmds, EncodeResetKey(check()))
		case r < 18:
			cmds = append(cmds, EncodeExpire(stamp, 1+rng.Intn(5)))
		case r < 19:
			cmds = append(cmds, EncodeSetNode(fmt.Sprintf("n%d", rng.Intn(3)), fmt.Sprintf("10.0.0.%d:8080", rng.Intn(9))))
		default:
			cmds = append(cmds, EncodeRemoveNode(fmt.Sprintf("n%d", rng.Intn(3))))
		}
	}
	return cmds
}

// applyIn applies entries [from, len) in batches of the given size.
func applyIn(f *FSM, ls []*raft.Log, batch int) []interface{} {
	var out []interface{}
	for i := 0; i < len(ls); i += batch {
		end := min(i+batch, len(ls))
		out = append(out, f.ApplyBatch(ls[i:end])...)
	}
	return out
}

func TestApplyIsDeterministicAcrossRestartsAndBatching(t *testing.T) {
	ls := logOf(1, testLog(t, 400)...)
	ref := openFSM(t, "", Options{NoSync: true})
	want := applyIn(ref, ls, 1)
	wantDigest := digest(t, ref)

	// The workload must exercise what it claims to.
	var replayed, refused, shadow, errs, conflicts int
	for _, r := range want {
		if rs, ok := r.([]Result); ok {
			for _, res := range rs {
				replayed += b2i(res.Replayed)
				conflicts += b2i(res.Err != nil && res.Err.Code == CodeConflict)
				refused += b2i(!res.Allowed && res.Err == nil)
				errs += b2i(res.Err != nil)
				for _, d := range res.Decisions {
					shadow += b2i(d.ShadowRefused)
				}
			}
		}
	}
	t.Logf("workload: replayed %d refused %d shadow %d errors %d (conflicts %d)", replayed, refused, shadow, errs, conflicts)
	if replayed == 0 || refused == 0 || shadow == 0 || conflicts == 0 {
		t.Fatalf("weak workload: replayed %d refused %d shadow %d errors %d (conflicts %d)", replayed, refused, shadow, errs, conflicts)
	}

	for _, tc := range []struct {
		name     string
		restarts []int // close and reopen after these many entries
		batch    int
		commit   int // CommitEvery
		cache    int // CacheKeys
	}{
		{"batches of 7", nil, 7, 0, 0},
		{"one batch", nil, len(ls), 0, 0},
		{"restart once", []int{150}, 1, 0, 0},
		{"restart twice, batched", []int{50, 333}, 16, 0, 0},
		{"shared commits, restart twice", []int{101, 250}, 3, 8, 0},
		// The state cache evicting at every commit, and holding many
		// entries' writes between commits.
		{"cache of 1 key", nil, 5, 0, 1},
		{"cache of 3 keys, shared commits", []int{200}, 2, 50, 3},
		{"long shared commits", nil, 1, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fsm.db")
			opts := Options{NoSync: true, CommitEvery: tc.commit, CacheKeys: tc.cache}
			f, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			done := 0
			for _, at := range tc.restarts {
				applyIn(f, ls[done:at], tc.batch)
				done = at
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				if f, err = Open(path, opts); err != nil {
					t.Fatal(err)
				}
				if f.Recovered() || f.AppliedIndex() != uint64(at) {
					t.Fatalf("reopen: recovered %v applied %d, want %d", f.Recovered(), f.AppliedIndex(), at)
				}
			}
			defer f.Close()
			// Raft replays the whole log after a restart: entries at or
			// below the applied index must be skipped.
			got := applyIn(f, ls, tc.batch)
			for i := range ls {
				w := want[i]
				if i < done {
					w = ErrAlreadyApplied
				}
				if !reflect.DeepEqual(got[i], w) {
					t.Fatalf("entry %d: got %#v, want %#v", i+1, got[i], w)
				}
			}
			if d := digest(t, f); d != wantDigest {
				t.Fatal("digest differs from the reference replica")
			}
			if f.AppliedIndex() != uint64(len(ls)) || f.LastTime() != ref.LastTime() {
				t.Fatalf("applied %d time %d, want %d %d", f.AppliedIndex(), f.LastTime(), len(ls), ref.LastTime())
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRefusedCommandsChangeNothing(t *testing.T) {
	good := EncodeCheck(nil, t0, 0, []Op{{Checks: []Check{{Key: "a", Spec: &algo.Spec{Algorithm: algo.FixedWindow, Limit: 5, Window: 10 * time.Second}, Cost: 1}}}})
	check := EncodeCheck(nil, t0, 0, []Op{single("a", "p", 1)})
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"unknown type", []byte{99, cmdVersion, 1, 2, 3}, ErrUnknownCommand},
		{"unknown version", []byte{CmdCheck, 2, 0, 0, opsVersion, 0}, ErrUnknownCommand},
		{"empty", nil, ErrBadCommand},
		{"type only", []byte{CmdCheck}, ErrBadCommand},
		{"truncated check", check[:len(check)-2], ErrBadCommand},
		{"trailing bytes", append(bytes.Clone(check), 0), ErrBadCommand},
		{"bad ops version", append([]byte{CmdCheck, cmdVersion, 0, 0, 9}, check[5:]...), ErrBadCommand},
		{"truncated policy", EncodePutPolicy(Policy{Name: "x", Spec: algo.Spec{Algorithm: algo.FixedWindow, Limit: 1, Window: time.Second}})[:5], ErrBadCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := openFSM(t, "", Options{})
			d := newDriver(t, f)
			d.apply(good)
			before, applied, keys := digest(t, f), f.AppliedIndex(), f.Stats().Keys

			// The good entry in the same batch is rolled back with the bad one.
			_, err := f.applyEntries(logOf(applied+1, good, tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("applyEntries = %v, want %v", err, tc.want)
			}
			if digest(t, f) != before || f.AppliedIndex() != applied || f.Stats().Keys != keys {
				t.Fatal("a refused batch changed the state")
			}
		})
	}
}

func TestFatalErrorStopsApplying(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		setup func(f *FSM)
		entry func(t *testing.T) []byte
		want  string
	}{
		{
			name: "unknown command",
			entry: func(*testing.T) []byte {
				return []byte{199, cmdVersion}
			},
			want: "unknown command",
		},
		{
			name: "write failure",
			setup: func(f *FSM) {
				f.testHookCommit = func() error { return errors.New("no space left on device") }
			},
			entry: func(*testing.T) []byte {
				return EncodeCheck(nil, t0, 0, []Op{{Checks: []Check{{Key: "b", Spec: &algo.Spec{Algorithm: algo.FixedWindow, Limit: 5, Window: 10 * time.Second}, Cost: 1}}}})
			},
			want: "no space left",
		},
		{
			name: "database full",
			opts: Options{MaxSizeBytes: 1 << 20},
			entry: func(t *testing.T) []byte {
				// One op whose sliding log outgrows the file cap.
				s := mustSpec(t, algo.Config{Algorithm: "sliding_log", Limit: 1_000_000, Window: "1h"})
				ops := make([]Op, 0, 2000)
				for i := 0; i < 2000; i++ {
					ops = append(ops, Op{Checks: []Check{{Key: fmt.Sprintf("big%04d%s", i, strings.Repeat("x", 400)), Spec: &s, Cost: 1}}})
				}
				return EncodeCheck(nil, t0, 0, ops)
			},
			want: "maximum size",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fsm.db")
			var fatals atomic.Int32
			var fatalErr atomic.Value
			opts := tc.opts
			opts.OnFatal = func(err error) { fatals.Add(1); fatalErr.Store(err) }
			f, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			d := newDriver(t, f)
			d.apply(EncodeSetNode("n1", "a"))
			before, applied := digest(t, f), f.AppliedIndex()
			if tc.setup != nil {
				tc.setup(f)
			}

			done := make(chan interface{})
			go func() { done <- f.Apply(&raft.Log{Index: applied + 1, Type: raft.LogCommand, Data: tc.entry(t)}) }()
			deadline := time.After(10 * time.Second)
			for fatals.Load() == 0 {
				select {
				case r := <-done:
					t.Fatalf("Apply returned %v before Close instead of blocking", r)
				case <-deadline:
					t.Fatal("OnFatal not called")
				case <-time.After(time.Millisecond):
				}
			}
			if !strings.Contains(fatalErr.Load().(error).Error(), tc.want) {
				t.Fatalf("OnFatal(%v), want %q", fatalErr.Load(), tc.want)
			}
			select {
			case r := <-done:
				t.Fatalf("Apply returned %v before Close", r)
			case <-time.After(20 * time.Millisecond):
			}
			if digest(t, f) != before || f.AppliedIndex() != applied {
				t.Fatal("the failed entry left partial state")
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if r, ok := (<-done).(error); !ok || !strings.Contains(r.Error(), tc.want) {
				t.Fatalf("blocked Apply answered %v", r)
			}
			if fatals.Load() != 1 {
				t.Fatalf("OnFatal called %d times", fatals.Load())
			}
			// The marker stays: the next start rebuilds from raft instead of
			// trusting a file that missed a committed entry.
			f, err = Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if !f.Recovered() {
				t.Fatal("reopen after a fatal stop not Recovered")
			}
		})
	}
}

func TestDirtyMarker(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})
	prepare := func(t *testing.T, path string) *FSM {
		f, err := Open(path, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		d := newDriver(t, f)
		d.putPolicy(Policy{Name: "api", Spec: spec})
		d.one(t0, "api", "u", 3)
		return f
	}
	t.Run("clean close keeps state", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fsm.db")
		if err := prepare(t, path).Close(); err != nil {
			t.Fatal(err)
		}
		f := openFSM(t, path, Options{NoSync: true})
		if f.Recovered() || f.AppliedIndex() != 2 {
			t.Fatalf("recovered %v applied %d", f.Recovered(), f.AppliedIndex())
		}
		if p, ok := f.Policy("api"); !ok || p.Spec != spec {
			t.Fatal("policy lost across a clean reopen")
		}
		if got := newDriver(t, f).remaining(t0+sec, "api", "u"); got != 2 {
			t.Fatalf("remaining after reopen = %d, want 2", got)
		}
	})
	t.Run("crash sets the file aside", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fsm.db")
		live := prepare(t, path)
		defer live.Close()
		// kill -9: the files as they are on disk while the process runs.
		crashed := filepath.Join(t.TempDir(), "fsm.db")
		for _, suffix := range []string{"", ".dirty"} {
			b, err := os.ReadFile(path + suffix)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f := openFSM(t, crashed, Options{NoSync: true})
		if !f.Recovered() || f.AppliedIndex() != 0 || f.Stats().Keys != 0 || len(f.Policies()) != 0 {
			t.Fatalf("after crash: recovered %v applied %d stats %+v", f.Recovered(), f.AppliedIndex(), f.Stats())
		}
	})
	t.Run("corrupt file is an error naming it", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fsm.db")
		if err := os.WriteFile(path, bytes.Repeat([]byte{0xEE}, 64<<10), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{})
		if err == nil || !strings.Contains(err.Error(), "open fsm database "+path) {
			t.Fatalf("Open = %v", err)
		}
	})
}

func TestPoliciesAndNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	a := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 10, Window: "1m"})
	b := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 5, Window: "1s"})

	d.putPolicy(Policy{Name: "b", Spec: b, Shadow: true})
	d.putPolicy(Policy{Name: "a", Spec: a})
	d.putPolicy(Policy{Name: "gone", Spec: a})
	if r := d.apply(EncodeDeletePolicy("gone")); r != nil {
		t.Fatalf("delete = %v", r)
	}
	for _, tc := range []struct {
		name string
		cmd  []byte
		code Code
	}{
		{"delete unknown", EncodeDeletePolicy("gone"), "not_found"},
		{"empty name", EncodePutPolicy(Policy{Spec: a}), "invalid_argument"},
		{"invalid spec", EncodePutPolicy(Policy{Name: "bad", Spec: algo.Spec{Algorithm: algo.FixedWindow, Limit: 1}}), "invalid_argument"},
	} {
		var e *Error
		if r, ok := d.apply(tc.cmd).(error); !ok || !errors.As(r, &e) || e.Code != tc.code {
			t.Fatalf("%s: response %v, want code %s", tc.name, r, tc.code)
		}
	}
	d.apply(EncodeSetNode("n1", "h1:1"))
	d.apply(EncodeSetNode("n2", "h2:1"))
	d.apply(EncodeSetNode("n1", "h1:2"))
	d.apply(EncodeRemoveNode("n2"))

	wantPolicies := []Policy{{Name: "a", Spec: a}, {Name: "b", Spec: b, Shadow: true}}
	wantNodes := map[string]string{"n1": "h1:2"}
	for _, phase := range []string{"live", "reopened"} {
		if got := f.Policies(); !reflect.DeepEqual(got, wantPolicies) {
			t.Fatalf("%s: policies %+v", phase, got)
		}
		if _, ok := f.Policy("gone"); ok {
			t.Fatalf("%s: deleted policy still there", phase)
		}
		if got := f.Nodes(); !reflect.DeepEqual(got, wantNodes) {
			t.Fatalf("%s: nodes %v", phase, got)
		}
		if a, ok := f.NodeAddr("n1"); !ok || a != "h1:2" {
			t.Fatalf("%s: NodeAddr(n1) = %q, %v", phase, a, ok)
		}
		if a, ok := f.NodeAddr("n2"); ok || a != "" {
			t.Fatalf("%s: NodeAddr(n2) = %q, %v for an unknown node", phase, a, ok)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		f = openFSM(t, path, Options{})
	}
	// Nodes returns a copy.
	f.Nodes()["n9"] = "x"
	if _, ok := f.Nodes()["n9"]; ok {
		t.Fatal("Nodes exposes the internal map")
	}
}

func TestPolicyChangesInOneBatchSeeEachOther(t *testing.T) {
	f := openFSM(t, "", Options{})
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"})
	rs := f.ApplyBatch(logOf(1,
		EncodePutPolicy(Policy{Name: "p", Spec: s}),
		EncodeCheck(nil, t0, 0, []Op{single("k", "p", 1)}),
		EncodeDeletePolicy("p"),
		EncodeCheck(nil, t0, 0, []Op{single("k", "p", 1)}),
	))
	if r := rs[1].([]Result)[0]; r.Err != nil || !r.Allowed {
		t.Fatalf("check after put in the same batch: %+v", r)
	}
	if r := rs[3].([]Result)[0]; r.Err == nil || r.Err.Code != "not_found" {
		t.Fatalf("check after delete in the same batch: %+v", r)
	}
	if _, ok := f.Policy("p"); ok {
		t.Fatal("policy deleted in the batch is visible")
	}
}

func TestRollbackDiscardsPolicyChanges(t *testing.T) {
	f := openFSM(t, "", Options{})
	s := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"})
	_, err := f.applyEntries(logOf(1, EncodePutPolicy(Policy{Name: "p", Spec: s}), []byte{77, 1}))
	if !errors.Is(err, ErrUnknownCommand) {
		t.Fatal(err)
	}
	if _, ok := f.Policy("p"); ok {
		t.Fatal("a policy from a rolled-back batch is visible")
	}
	rs, err := f.applyEntries(logOf(1, EncodeCheck(nil, t0, 0, []Op{single("k", "p", 1)})))
	if err != nil || rs[0].([]Result)[0].Err == nil {
		t.Fatal("a policy from a rolled-back batch is used by later entries")
	}
}

func TestNonCommandEntriesAdvanceTheIndex(t *testing.T) {
	f := openFSM(t, "", Options{})
	rs := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogConfiguration, Data: []byte("not ours")},
		{Index: 2, Type: raft.LogCommand, Data: EncodeSetNode("n", "a")},
		{Index: 3, Type: raft.LogBarrier},
	})
	if rs[0] != nil || rs[1] != nil || rs[2] != nil || f.AppliedIndex() != 3 {
		t.Fatalf("responses %v applied %d", rs, f.AppliedIndex())
	}
}

// Flush commits the applies that share an open transaction, so the file
// (and what a reader of it sees) catches up with the applied index once the
// commit it started (on a goroutine of its own) has finished.
func TestFlushCommitsSharedApplies(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1000})
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})
	d.check(t0, Op{Checks: []Check{{Key: "a", Spec: &spec, Cost: 1}}})
	d.check(t0, Op{Checks: []Check{{Key: "b", Spec: &spec, Cost: 1}}})
	committed := func() persist.Meta {
		var m persist.Meta
		if err := f.store.View(func(tx *persist.Tx) error { m = tx.Meta(); return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if f.AppliedIndex() != 2 || committed().AppliedIndex != 0 {
		t.Fatalf("applied %d, file at %d: want 2 applied and nothing committed yet", f.AppliedIndex(), committed().AppliedIndex)
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if f.Pending() != 0 {
		t.Fatalf("after Flush %d applies are not in a commit", f.Pending())
	}
	waitCommit(t, f)
	if m := committed(); m.AppliedIndex != 2 || m.Keys != 2 {
		t.Fatalf("after Flush the file holds %+v, want applied 2 with 2 keys", m)
	}
}

// Entries applied ahead of raft (a follower that knows them committed) are
// skipped when raft applies them, and the replica ends where one that only
// applied through raft does. Entries that do not follow the applied index
// are refused whole. Fails if raft's later apply counts an entry twice, a
// gap is applied over, or ahead and in-order replicas diverge.
func TestApplyAhead(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 3, Window: "1h"})
	op := Op{Checks: []Check{{Key: "k", Spec: &spec, Cost: 1}}}
	var cmds [][]byte
	for i := 0; i < 6; i++ {
		cmds = append(cmds, EncodeCheck(nil, int64(1000+i), 0, []Op{op}))
	}
	ahead := openFSM(t, "", Options{})
	plain := openFSM(t, "", Options{})
	ls := logOf(1, cmds...)

	applied, resps, err := ahead.ApplyAhead(ls[:2])
	if err != nil || len(applied) != 2 || len(resps) != 2 {
		t.Fatalf("ApplyAhead(1, 2): %d applied, %d responses, %v", len(applied), len(resps), err)
	}
	if r := resps[1].([]Result); !r[0].Allowed || r[0].Decisions[0].Remaining != 1 {
		t.Fatalf("second check ahead: %+v, want allowed with 1 remaining", r)
	}
	// A gap: entry 4 when 2 is applied.
	if _, _, err := ahead.ApplyAhead(ls[3:4]); !errors.Is(err, ErrApplyGap) || ahead.AppliedIndex() != 2 {
		t.Fatalf("ApplyAhead over a gap: %v, applied %d; want ErrApplyGap and 2", err, ahead.AppliedIndex())
	}
	// Not consecutive.
	if _, _, err := ahead.ApplyAhead([]*raft.Log{ls[2], ls[4]}); !errors.Is(err, ErrApplyGap) || ahead.AppliedIndex() != 2 {
		t.Fatalf("ApplyAhead of 3 and 5: %v, applied %d; want ErrApplyGap and 2", err, ahead.AppliedIndex())
	}
	// Raft applies 1..3: 1 and 2 were applied ahead, 3 is new.
	got := ahead.ApplyBatch(ls[:3])
	if got[0] != ErrAlreadyApplied || got[1] != ErrAlreadyApplied {
		t.Fatalf("raft's apply of entries applied ahead: %v, want ErrAlreadyApplied", got[:2])
	}
	if r, ok := got[2].([]Result); !ok || !r[0].Allowed || r[0].Decisions[0].Remaining != 0 {
		t.Fatalf("third check: %+v, want allowed with 0 remaining", got[2])
	}
	// Ahead again, overlapping what is applied: 3 is dropped, 4 and 5 applied.
	applied, _, err = ahead.ApplyAhead(ls[2:5])
	if err != nil || len(applied) != 2 || applied[0].Index != 4 {
		t.Fatalf("ApplyAhead(3..5) with 3 applied: %d applied from %v, %v", len(applied), applied, err)
	}
	for i, r := range ahead.ApplyBatch(ls[3:5]) {
		if r != ErrAlreadyApplied {
			t.Fatalf("raft's apply of entry %d, applied ahead: %v", 4+i, r)
		}
	}
	ahead.ApplyBatch(ls[5:])
	plain.ApplyBatch(ls)
	if a, p := digest(t, ahead), digest(t, plain); a != p || ahead.AppliedIndex() != 6 || plain.AppliedIndex() != 6 {
		t.Fatalf("replica applied ahead %s at %d, in order %s at %d", a, ahead.AppliedIndex(), p, plain.AppliedIndex())
	}
}
