package cluster

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
)

// Answers from the follower's own log (DESIGN.md, "A forwarded check answered
// from the follower's log"). hashicorp/raft (v1.7.3, dispatchLogs: check again
// on an upgrade) writes an entry to the leader's log, fsynced, before it sends
// it to any follower. So when a follower has
// stored (fsynced) an entry of its leader's current term, two logs hold it —
// and where the leader and this follower are a majority of the voters (a
// cluster of two or three), that entry is committed, and with it every entry
// before it: any later leader needs a vote from one of the two, and neither
// votes for a log that lacks it (Raft's election restriction; configuration
// changes go one server at a time, each committed before the next, so every
// later majority meets these two or holds the entry). The follower then
// applies its log up to that entry at once (fsm.ApplyAhead; raft's own apply
// of it later is a no-op) and answers the checks it forwarded that the entry
// carries, instead of waiting for the leader to learn of the commit, apply
// it and send the answer back: two hops inside the cluster fewer.
//
// Which checks are whose: the leader puts the forwarded units of a check
// entry in the entry's raft.Log.Extensions (forward.AppendTags), each named by the
// follower's check-stream nonce and frame id and placed by its first op and
// op count. The state machine never reads Extensions, so entries decide the
// same on every replica and a node that does not know the tags ignores them.
// The leader still answers every frame on the stream: whichever answer comes
// first is delivered (the same results: both apply the same entry to the same
// state), and a follower that cannot apply ahead (five voters, a
// configuration change in flight, a lagging log) gets the leader's answer as
// before.

// committedByPair returns the index of the last entry of ls that this
// follower, having just stored ls from leader in term, knows to be committed
// under conf (the latest configuration before ls), or 0. See the package
// comment above: the leader of term wrote every entry of that term before
// sending it, so an entry of term is on two logs; that is a majority when
// both are voters and there are at most three. A configuration entry in ls
// ends the scan (the entries after it count under a new configuration, which
// the next batch sees).
func committedByPair(ls []*raft.Log, term uint64, self, leader raft.ServerID, conf raft.Configuration) uint64 {
	if leader == "" || leader == self {
		return 0
	}
	voters := 0
	selfVotes, leaderVotes := false, false
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		selfVotes = selfVotes || s.ID == self
		leaderVotes = leaderVotes || s.ID == leader
	}
	if !selfVotes || !leaderVotes || voters > 3 {
		return 0
	}
	var last uint64
	for _, l := range ls {
		switch l.Type {
		case raft.LogConfiguration, raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
			return last
		}
		if l.Term == term {
			last = l.Index
		}
	}
	return last
}

// maxAheadBatch bounds the entries one ApplyAhead applies (and the buffer
// that holds them).
const maxAheadBatch = 256

// ahead applies a follower's log ahead of raft and delivers the answers to
// the checks this node forwarded. stored runs in raft's goroutine (inside
// the log store's StoreLogs) and only raises a target; run applies.
type ahead struct {
	self    raft.ServerID
	raft    atomic.Pointer[raft.Raft]
	logs    raft.LogStore // raft's log cache: recent entries without a read
	fsm     *fsm.FSM
	deliver func(t forward.Tag, res []fsm.Result) bool // true: a waiting check took it

	target atomic.Uint64 // highest index known committed by the pair rule
	wake   chan struct{}

	// mu is held by a step; paused stops the steps (pause).
	mu     sync.Mutex
	paused int

	entries  atomic.Uint64 // entries applied ahead of raft
	highest  atomic.Uint64 // the last of them
	answered atomic.Uint64 // forwarded units answered from the log
}

func newAhead(self raft.ServerID, logs raft.LogStore, f *fsm.FSM, deliver func(forward.Tag, []fsm.Result) bool) *ahead {
	return &ahead{self: self, logs: logs, fsm: f, deliver: deliver, wake: make(chan struct{}, 1)}
}

// stored is the log store's hook after a successful StoreLogs: on a
// follower, it raises the target to the last entry the pair rule commits.
// In raft's goroutine, so it only reads raft's atomics and never waits.
func (a *ahead) stored(ls []*raft.Log) {
	r := a.raft.Load()
	if r == nil || r.State() != raft.Follower {
		return
	}
	// appendEntries set the term and the leader from the request before
	// storing its entries, and ls holds only those entries.
	_, leader := r.LeaderWithID()
	t := committedByPair(ls, r.CurrentTerm(), a.self, leader, r.GetConfiguration().Configuration())
	if t == 0 {
		return
	}
	for {
		cur := a.target.Load()
		if t <= cur || a.target.CompareAndSwap(cur, t) {
			break
		}
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run applies up to the target whenever it rises, until done closes.
func (a *ahead) run(done <-chan struct{}) {
	buf := make([]raft.Log, maxAheadBatch)
	ptrs := make([]*raft.Log, 0, maxAheadBatch)
	for {
		select {
		case <-a.wake:
		case <-done:
			return
		}
		for a.step(buf, ptrs[:0]) {
			select {
			case <-done:
				return
			default:
			}
		}
	}
}

// pause stops applying ahead until the returned resume is called, once any
// step in progress has ended: a backup needs the state machine at raft's
// applied index, not ahead of it (package backup).
// Pause and Highest are what a backup needs of applying ahead (backup.Ahead).
func (a *ahead) Pause() (resume func()) { return a.pause() }
func (a *ahead) Highest() uint64        { return a.highest.Load() }

func (a *ahead) pause() (resume func()) {
	a.mu.Lock()
	a.paused++
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.paused--
			a.mu.Unlock()
			select {
			case a.wake <- struct{}{}:
			default:
			}
		})
	}
}

// step applies the next entries up to the target; true when more remain.
func (a *ahead) step(buf []raft.Log, ptrs []*raft.Log) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.paused > 0 {
		return false
	}
	target, applied := a.target.Load(), a.fsm.AppliedIndex()
	if target <= applied {
		return false
	}
	for i := applied + 1; i <= target && len(ptrs) < len(buf); i++ {
		l := &buf[len(ptrs)]
		if err := a.logs.GetLog(i, l); err != nil {
			break // compacted under a snapshot, or not readable: raft applies it
		}
		ptrs = append(ptrs, l)
	}
	filled := len(ptrs)
	defer clear(buf[:filled]) // let the entries' data go
	// End on an entry raft hands to the state machine (a command or a
	// configuration): a no-op or barrier applied ahead at the end would put
	// the state past every index raft gives it, and a snapshot raft takes
	// then past its own index (package backup waits on RaftApplied). It is
	// applied with the next entry that is handed over.
	for len(ptrs) > 0 && !handedToFSM(ptrs[len(ptrs)-1].Type) {
		ptrs = ptrs[:len(ptrs)-1]
	}
	if len(ptrs) == 0 {
		return false
	}
	last := ptrs[len(ptrs)-1].Index
	ls, resps, err := a.fsm.ApplyAhead(ptrs)
	if err != nil {
		return false // raft's apply path reports a fatal error; a gap is retried on the next wake
	}
	a.entries.Add(uint64(len(ls)))
	if len(ls) > 0 {
		a.highest.Store(ls[len(ls)-1].Index)
	}
	for i, l := range ls {
		res, ok := resps[i].([]fsm.Result)
		if !ok || l.Type != raft.LogCommand || len(l.Extensions) == 0 {
			continue
		}
		_ = forward.ForEachTag(l.Extensions, len(res), func(t forward.Tag, off, n int) {
			if a.deliver(t, res[off:off+n:off+n]) {
				a.answered.Add(1)
			}
		})
	}
	return last < target
}

// handedToFSM reports whether raft passes entries of type t to the state
// machine's ApplyBatch (hashicorp/raft v1.7.3, runFSM: commands and
// configurations; barriers and no-ops never reach it).
func handedToFSM(t raft.LogType) bool {
	return t == raft.LogCommand || t == raft.LogConfiguration
}
