package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/forward"
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
		ext := forward.AppendTags(nil, []forward.TaggedUnit{{Tag: forward.Tag{Nonce: 42, ID: i}, Off: 0, N: 1}})
		if err := store.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: cmd, Extensions: ext}); err != nil {
			t.Fatal(err)
		}
	}
	var delivered []uint64
	a := newAhead("b", store, f, func(tg forward.Tag, res []fsm.Result) bool {
		if tg.Nonce != 42 || len(res) != 1 || !res[0].Allowed {
			t.Errorf("delivered %+v %+v", tg, res)
		}
		delivered = append(delivered, tg.ID)
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
