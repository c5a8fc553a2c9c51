package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

func voters(ids ...string) raft.Configuration {
	var c raft.Configuration
	for _, id := range ids {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id), Suffrage: raft.Voter})
	}
	return c
}

func entries(first uint64, terms ...uint64) []*raft.Log {
	ls := make([]*raft.Log, len(terms))
	for i, t := range terms {
		ls[i] = &raft.Log{Index: first + uint64(i), Term: t, Type: raft.LogCommand}
	}
	return ls
}

// The pair rule says an entry is committed only when the leader of its term
// and this follower are a majority of the voters. Fails if it answers for a
// cluster of four or five voters, a non-voter, a leader outside the
// configuration, an entry of an earlier term alone (Raft's Figure 8), or
// the entries after a configuration change.
func TestCommittedByPair(t *testing.T) {
	three := voters("a", "b", "c")
	withNonvoter := voters("a", "b", "c")
	withNonvoter.Servers = append(withNonvoter.Servers, raft.Server{ID: "d", Address: "d", Suffrage: raft.Nonvoter})
	conf := func(ls []*raft.Log, at int) []*raft.Log {
		ls[at].Type = raft.LogConfiguration
		return ls
	}
	for _, tc := range []struct {
		name         string
		ls           []*raft.Log
		term         uint64
		self, leader raft.ServerID
		conf         raft.Configuration
		want         uint64
	}{
		{"three voters", entries(10, 5, 5, 5), 5, "b", "a", three, 12},
		{"two voters", entries(10, 5), 5, "b", "a", voters("a", "b"), 10},
		{"a non-voter beside three voters", entries(10, 5), 5, "b", "a", withNonvoter, 10},
		{"older terms before the current one", entries(10, 3, 4, 5), 5, "b", "a", three, 12},
		{"the current term before older ones cannot be", entries(10, 5, 5), 5, "b", "a", three, 11},
		{"only an earlier term", entries(10, 4, 4), 5, "b", "a", three, 0},
		{"four voters", entries(10, 5), 5, "b", "a", voters("a", "b", "c", "d"), 0},
		{"five voters", entries(10, 5), 5, "b", "a", voters("a", "b", "c", "d", "e"), 0},
		{"self not a voter", entries(10, 5), 5, "d", "a", withNonvoter, 0},
		{"leader not a voter", entries(10, 5), 5, "b", "d", withNonvoter, 0},
		{"no leader", entries(10, 5), 5, "b", "", three, 0},
		{"self as leader", entries(10, 5), 5, "a", "a", three, 0},
		{"a configuration entry ends the scan", conf(entries(10, 5, 5, 5), 1), 5, "b", "a", three, 10},
		{"a configuration entry first", conf(entries(10, 5, 5), 0), 5, "b", "a", three, 0},
	} {
		if got := committedByPair(tc.ls, tc.term, tc.self, tc.leader, tc.conf); got != tc.want {
			t.Errorf("%s: committed up to %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Tags written by the leader read back unit by unit, and a malformed or
// out-of-range encoding is refused before any unit beyond the damage is
// delivered. Fails if a unit is misplaced or a bad one is delivered.
func TestUnitTags(t *testing.T) {
	units := []taggedUnit{{unitTag{1<<63 + 5, 1}, 0, 2}, {unitTag{7, 300}, 2, 1}, {unitTag{7, 1 << 40}, 3, 128}}
	ext := appendTags(nil, units)
	var got []taggedUnit
	if err := forEachTag(ext, 131, func(tg unitTag, off, n int) { got = append(got, taggedUnit{tg, off, n}) }); err != nil {
		t.Fatalf("read tags: %v", err)
	}
	if len(got) != len(units) {
		t.Fatalf("read %d units, wrote %d", len(got), len(units))
	}
	for i := range units {
		if got[i] != units[i] {
			t.Errorf("unit %d: read %+v, wrote %+v", i, got[i], units[i])
		}
	}
	if err := forEachTag(nil, 0, func(unitTag, int, int) { t.Error("a unit from no tags") }); err != nil {
		t.Errorf("no tags: %v", err)
	}
	// Ops beyond the entry's results: the first unit fits, the last does not.
	n := 0
	err := forEachTag(ext, 130, func(unitTag, int, int) { n++ })
	if !errors.Is(err, errBadTags) || n != 2 {
		t.Errorf("a unit beyond the results: %d units delivered, err %v; want 2 and errBadTags", n, err)
	}
	for cut := 1; cut < len(ext); cut++ {
		n := 0
		err := forEachTag(ext[:cut], 131, func(unitTag, int, int) { n++ })
		if err == nil || n >= len(units) {
			t.Errorf("tags cut to %d bytes: %d units, err %v", cut, n, err)
		}
	}
	bad := append([]byte{tagsVersion + 1}, ext[1:]...)
	if err := forEachTag(bad, 131, func(unitTag, int, int) { t.Error("a unit from an unknown version") }); !errors.Is(err, errBadTags) {
		t.Errorf("unknown version: %v", err)
	}
}

// A frame answered from the log is delivered once: the leader's answer that
// follows is dropped without closing the stream, and results that do not
// match the frame's ops are not delivered. Fails if a call is answered
// twice, a late answer breaks the stream, or foreign results are taken.
func TestStreamEarlyAnswer(t *testing.T) {
	release := make(chan struct{})
	leaderRes := []fsm.Result{{Allowed: false}}
	c, _ := streamPair(t, func(context.Context, []fsm.Op, unitTag) ([]fsm.Result, error) {
		<-release
		return leaderRes, nil
	})
	done := make(chan []fsm.Result, 1)
	go func() {
		res, err := c.do(context.Background(), oneCheck("early"))
		if err != nil {
			t.Errorf("check answered from the log: %v", err)
		}
		done <- res
	}()
	var id uint64
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for k := range c.frames {
			id = k
		}
		return id != 0
	})
	if c.early(id, []fsm.Result{{}, {}}) {
		t.Fatal("two results taken for a frame of one op")
	}
	if c.early(id+1, []fsm.Result{{}}) {
		t.Fatal("results taken for a frame not in flight")
	}
	fromLog := []fsm.Result{{Allowed: true, Decisions: []fsm.Decision{{Decision: algo.Decision{Allowed: true, Remaining: 3}}}}}
	if !c.early(id, fromLog) {
		t.Fatal("the log's results were not delivered")
	}
	res := <-done
	if len(res) != 1 || !res[0].Allowed || res[0].Decisions[0].Remaining != 3 {
		t.Fatalf("caller got %+v, want the log's results", res)
	}
	if c.early(id, fromLog) {
		t.Fatal("a frame answered twice from the log")
	}
	// The leader's answer arrives after: dropped, the stream stays open and
	// the frame's slot is freed.
	close(release)
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.frames) == 0 })
	if c.isClosed() {
		t.Fatal("the leader's answer after the log's closed the stream")
	}
	if _, err := c.do(context.Background(), oneCheck("after")); err != nil {
		t.Fatalf("next check on the stream: %v", err)
	}
}

// ApplyAhead's caller reads the log through raft's cache; a target beyond
// what the log holds applies what it holds and stops. Fails if step applies
// past a missing entry or loops on it.
func TestAheadStepStopsAtMissingEntry(t *testing.T) {
	f, err := fsm.Open(t.TempDir()+"/fsm.db", fsm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	store := raft.NewInmemStore()
	spec := algo.Spec{Algorithm: algo.TokenBucket, Limit: 10, Window: time.Second}
	for i := uint64(1); i <= 3; i++ {
		cmd := fsm.EncodeCheck(nil, int64(i), 0, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Spec: &spec, Cost: 1}}}})
		ext := appendTags(nil, []taggedUnit{{unitTag{42, i}, 0, 1}})
		if err := store.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: cmd, Extensions: ext}); err != nil {
			t.Fatal(err)
		}
	}
	var delivered []uint64
	a := newAhead("b", store, f, func(tg unitTag, res []fsm.Result) bool {
		if tg.nonce != 42 || len(res) != 1 || !res[0].Allowed {
			t.Errorf("delivered %+v %+v", tg, res)
		}
		delivered = append(delivered, tg.id)
		return true
	})
	a.target.Store(5) // entries 4 and 5 are not in the log
	buf := make([]raft.Log, maxAheadBatch)
	if more := a.step(buf, nil); !more {
		t.Error("step reported nothing left below a target it did not reach")
	}
	if got := f.AppliedIndex(); got != 3 {
		t.Fatalf("applied %d, want 3 (what the log holds)", got)
	}
	if more := a.step(buf, nil); more || f.AppliedIndex() != 3 {
		t.Fatalf("a second step past the log's end: more %v, applied %d", more, f.AppliedIndex())
	}
	if len(delivered) != 3 || delivered[0] != 1 || delivered[2] != 3 || a.answered.Load() != 3 || a.entries.Load() != 3 {
		t.Fatalf("delivered %v (answered %d, entries %d), want units 1, 2, 3 once each", delivered, a.answered.Load(), a.entries.Load())
	}
	// A barrier at the end waits for the next command: raft never hands it
	// to the state machine, so applying it alone would put the state past
	// every index raft gives it.
	if err := store.StoreLog(&raft.Log{Index: 4, Term: 1, Type: raft.LogBarrier}); err != nil {
		t.Fatal(err)
	}
	a.target.Store(4)
	if a.step(buf, nil); f.AppliedIndex() != 3 {
		t.Fatalf("a trailing barrier applied ahead: applied %d, want 3", f.AppliedIndex())
	}
	cmd := fsm.EncodeCheck(nil, 5, 0, []fsm.Op{{Checks: []fsm.Check{{Key: "k", Spec: &spec, Cost: 1}}}})
	if err := store.StoreLog(&raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: cmd}); err != nil {
		t.Fatal(err)
	}
	a.target.Store(5)
	if a.step(buf, nil); f.AppliedIndex() != 5 || a.highest.Load() != 5 {
		t.Fatalf("barrier and command: applied %d, highest %d, want 5 and 5", f.AppliedIndex(), a.highest.Load())
	}
}

// A stream nonce is used by one open stream at a time, and only a valid,
// non-zero one is used at all. Fails if a second stream with the same nonce
// would have its units tagged (another node's answers delivered to it).
func TestStreamNonceClaimedOnce(t *testing.T) {
	var srv streamServer
	if got := srv.claimNonce("2a", "node:a"); got != 0x2a {
		t.Fatalf("first claim of 2a: %#x", got)
	}
	if got := srv.claimNonce("2A", "node:b"); got != 0 {
		t.Fatalf("a second stream claimed the nonce in use: %#x", got)
	}
	for _, h := range []string{"", "0", "xyz", "-1", "10000000000000000"} {
		if got := srv.claimNonce(h, "node:c"); got != 0 {
			t.Errorf("nonce header %q claimed %#x", h, got)
		}
	}
	delete(srv.nonces, 0x2a) // the first stream closed
	if got := srv.claimNonce("2a", "node:b"); got != 0x2a {
		t.Fatalf("claim after the first stream closed: %#x", got)
	}
}
