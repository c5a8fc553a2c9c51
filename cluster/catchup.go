package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// catchup keeps Ready false after a start until this node's state machine
// holds what the cluster had committed when it came back:
//
//   - while a snapshot from the leader is being installed (copied into the
//     snapshot store, then restored into the state machine), the node's own
//     state is older than the snapshot, and Raft's commit index does not say
//     so: a follower behind the leader's log refuses its AppendEntries, so
//     its commit index stays where it was and "applied close to commit"
//     holds for a state seconds or hours old;
//   - before that install starts, nothing local tells the node it is behind,
//     so after a start it asks the leader for its applied index once (its
//     /internal/v1/bootstrap answer) and is ready only when it applied
//     (nearly) that much.
//
// Invariant: a node that restarted answers Ready only from a state at least
// as new (within the usual slack) as the leader's at some point after the
// restart, and never while an install is unfinished.
type catchup struct {
	installing atomic.Uint64 // the index of the snapshot being installed (0: none)
	target     atomic.Uint64 // the leader's applied index learned after the start
	learned    atomic.Bool   // target is set (or this node led: nothing to learn)
	caughtUp   atomic.Bool   // applied reached target once: latched
}

// catchupSlack is Ready's allowance: a busy node trails by the entries in
// flight ("caught up" means within a few batches, as in Ready).
const catchupSlack = 64

// check is nil when nothing of catchup holds Ready back, applied being the
// state machine's applied index and last Raft's last index (log or
// snapshot). An install is over once Raft recorded its snapshot as the last
// one, which it does only after the state machine restored it: the state
// machine's own index may stay below the snapshot's (Raft counts no-op and
// configuration entries the state machine never sees).
func (c *catchup) check(applied, last uint64) error {
	if idx := c.installing.Load(); idx != 0 && last < idx {
		return fmt.Errorf("installing a snapshot from the leader: applied index %d, snapshot index %d", applied, idx)
	}
	if c.caughtUp.Load() {
		return nil
	}
	if !c.learned.Load() {
		return errors.New("catching up: the leader's applied index is not known yet since this node started")
	}
	if t := c.target.Load(); applied+catchupSlack < t {
		return fmt.Errorf("catching up: applied index %d, the leader's applied index %d", applied, t)
	}
	c.caughtUp.Store(true)
	return nil
}

// learn records what the leader had applied (or, leader itself, that there
// is nothing to learn). The first answer counts: it is a state after the start.
func (c *catchup) learn(leaderApplied uint64) {
	if c.learned.Load() {
		return
	}
	c.target.Store(leaderApplied)
	c.learned.Store(true)
}

// leaderProgress is what learn needs of the node.
type leaderProgress struct {
	self    string
	leading func() bool
	leader  func() (id, httpAddr string)
	ask     func(ctx context.Context, httpAddr string) (bootstrapInfo, error) // GET /internal/v1/bootstrap
	timeout time.Duration                                                     // one question's bound
}

// learnFrom asks the leader for its applied index until it has an answer,
// this node leads, or closing closes. One small GET per round, backing off
// to a second: it runs once per start.
func (c *catchup) learnFrom(closing <-chan struct{}, p leaderProgress) {
	// A GET in flight ends with the node: Close waits for this loop.
	ctx, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	go func() {
		select {
		case <-closing:
			cancelAll()
		case <-ctx.Done():
		}
	}()
	wait := 20 * time.Millisecond
	for !c.learned.Load() {
		if p.leading() {
			// A leader holds every committed entry in its log; Ready's
			// commit-index check covers its applying them.
			c.learn(0)
			return
		}
		if id, addr := p.leader(); id != "" && addr != "" && id != p.self {
			ctx, cancel := context.WithTimeout(ctx, p.timeout)
			info, err := p.ask(ctx, addr)
			cancel()
			if err == nil && info.ID == id {
				c.learn(info.Applied)
				return
			}
		}
		select {
		case <-closing:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// installStore is the Raft snapshot store as Raft sees it: a Create for an
// index beyond everything this node's Raft holds (log or snapshot) is an
// install from the leader — a snapshot this node takes itself never goes past
// its last applied entry — and marks the install until its sink is cancelled
// or fails, or Raft has restored it (check).
type installStore struct {
	raft.SnapshotStore
	c    *catchup
	logs raft.LogStore
}

// last is the last index this node's Raft holds, in its log or its newest
// snapshot (a log store reset after an install holds none).
func (s installStore) last() uint64 {
	var last uint64
	if idx, err := s.logs.LastIndex(); err == nil {
		last = idx
	}
	if metas, err := s.SnapshotStore.List(); err == nil && len(metas) > 0 {
		last = max(last, metas[0].Index)
	}
	return last
}

// Create opens a sink and marks an install (see installStore).
func (s installStore) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration, confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	install := index > s.last()
	if install {
		// Marked before the copy starts: the copy can take longer than the restore.
		s.c.installing.Store(index)
	}
	sink, err := s.SnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil || !install {
		if install {
			s.c.installing.CompareAndSwap(index, 0)
		}
		return sink, err
	}
	return &catchupSink{SnapshotSink: sink, c: s.c, index: index}, nil
}

// catchupSink ends the install mark when the copy is abandoned or fails; a
// finished copy keeps it until Raft restored it (a failed restore keeps it:
// a state that could not be restored is not served).
type catchupSink struct {
	raft.SnapshotSink
	c     *catchup
	index uint64
}

func (s *catchupSink) Cancel() error {
	s.c.installing.CompareAndSwap(s.index, 0)
	return s.SnapshotSink.Cancel()
}

func (s *catchupSink) Close() error {
	err := s.SnapshotSink.Close()
	if err != nil {
		s.c.installing.CompareAndSwap(s.index, 0)
	}
	return err
}

var _ io.WriteCloser = (*catchupSink)(nil)
