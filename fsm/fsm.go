// Package fsm is limitd's Raft state machine: it decodes committed log
// entries, decides checks with package algo at the leader's timestamp, and
// stores the result through package persist together with the applied
// index: one bbolt transaction per batch of entries, or per several batches
// with Options.CommitEvery (shared commits, see DESIGN.md).
//
// Everything here is a deterministic function of the sequence of entries:
// no clock, no randomness, no dependence on how raft groups entries into
// batches. See DESIGN.md for the reasoning.
package fsm

import (
	"errors"
	"fmt"
	"io"
	"log"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
)

// DefaultRetention is how long a request id's result is kept when the CmdCheck
// entry carries no retention.
const DefaultRetention = 10 * time.Minute

// maxNodeField bounds node ids and addresses in node records (CmdSetNode,
// CmdRemoveNode); client input is bounded by MaxKeyBytes and friends.
const maxNodeField = 4096

var (
	// ErrAlreadyApplied is the response for an entry at or below the stored
	// applied index: it was applied before a restart and is skipped, so a
	// replayed log never consumes budget twice. Only startup replay sees it.
	ErrAlreadyApplied = errors.New("entry already applied")
	// ErrClosed is the response for entries offered after Close.
	ErrClosed = errors.New("state machine closed")
	// ErrApplyGap: ApplyAhead was given entries that do not start right
	// after the applied index; nothing was applied.
	ErrApplyGap = errors.New("entries do not follow the applied index")
)

// Options configures Open.
type Options struct {
	// NoSync opens the bbolt file with NoSync; see DESIGN.md for why that is
	// safe with the dirty marker.
	NoSync bool
	// OnFatal is called once, on raft's FSM goroutine, when applying must
	// stop (write failure, unknown or undecodable command). Apply then blocks
	// until Close, so OnFatal must not wait for raft to shut down; the
	// caller's shutdown path must Close the FSM before waiting on
	// raft.Shutdown. May be nil.
	OnFatal func(err error)
	Logger  *log.Logger // may be nil
	// MaxSizeBytes caps the database file (0: no cap). Reaching it fails the
	// apply like a full disk.
	MaxSizeBytes int
	// CommitEvery lets up to this many ApplyBatch calls share one bbolt
	// commit (0 or 1: each commits); Flush commits earlier. Requires NoSync:
	// see DESIGN.md, "Shared commits".
	CommitEvery int
	// CacheKeys bounds the in-memory state cache in keys (0:
	// persist.DefaultCacheKeys); see DESIGN.md, "State cache".
	CacheKeys int
	// OverLimit, when set, is told every decided check (Observe), reset
	// (Forget), policy put or delete (ForgetLimit), restore and fatal stop
	// (Clear), in log order on the apply goroutine, so that the node can
	// answer refusals from it (package overlimit). nil: no cache.
	OverLimit *overlimit.Cache
	// Leases, when set, hears of lease recalls and returns at apply time
	// (LeaseHook, lease.go). nil: nobody listens.
	Leases LeaseHook
}

// Stats are counters for metrics and the cluster status.
type Stats struct {
	Keys         int64 // limiter state entries
	RequestIDs   int64 // remembered request ids
	DBSizeBytes  int64 // size of the database file
	AppliedIndex uint64
}

// FSM is the replicated state machine. It implements raft.BatchingFSM.
type FSM struct {
	store *persist.Store
	opts  Options

	// applyMu orders applying against Close; the apply path holds it.
	applyMu   sync.Mutex
	closed    bool
	halted    error
	closing   chan struct{}
	closeOnce sync.Once
	fatalOnce sync.Once
	// applyWait (nanoseconds) and applyBatches: ApplyWait, ApplyBatches.
	applyWait    atomic.Int64
	applyBatches atomic.Uint64
	// raftSeen is the highest index ApplyBatch was given (RaftApplied).
	raftSeen atomic.Uint64

	// mu guards the in-memory copies of policies and nodes, read by the
	// HTTP layer. The apply goroutine is their only writer, so it reads them
	// without the lock.
	mu       sync.RWMutex
	policies map[string]*Policy
	nodes    map[string]string
	domains  domainTable // RLS domains (domain.go)
	plans    planTable   // plans, prefix rules, the default plan (plan.go)
	lists    domainTable // allow and deny lists (lists.go)
	listEnds listEnds    // the lists' earliest entry ends (lists.go)
	bans     banTable    // the ban records' copy (ban.go)
	outbox   outboxTable // events waiting for delivery (outbox.go)
	webhooks domainTable // webhooks (webhooks.go)
	top      topKeys     // top keys per policy, memory only (topkeys.go)

	ap applier

	hashSlots hashSlots // the ownership table, published (hashslot.go)

	// testHookCommit, when set, runs at the end of each apply transaction;
	// an error fails it like a failed write.
	testHookCommit func() error
}

var _ raft.BatchingFSM = (*FSM)(nil)

// Open opens the state machine database at path (e.g. <data-dir>/fsm.db).
// See persist.Open for the dirty-marker behaviour behind Recovered.
func Open(path string, opts Options) (*FSM, error) {
	if opts.CommitEvery > 1 && !opts.NoSync {
		return nil, errors.New("fsm: CommitEvery needs NoSync (an uncommitted transaction is rebuilt from raft only after an unclean stop)")
	}
	st, err := persist.Open(path, persist.Options{
		NoSync:          opts.NoSync,
		MaxSize:         opts.MaxSizeBytes,
		InitialMmapSize: 256 << 20,
		CommitEvery:     opts.CommitEvery,
		Background:      opts.CommitEvery > 1,
		CacheKeys:       opts.CacheKeys,
		KeyGroup:        keyGroup, // outbox.go: per-policy key counts (budget.go), the outbox's
		Logger:          opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	f := &FSM{store: st, opts: opts, closing: make(chan struct{})}
	f.ap.init(f)
	if err := f.load(); err != nil {
		_ = st.CloseDirty()
		return nil, err
	}
	return f, nil
}

// load reads policies and nodes into memory.
func (f *FSM) load() error {
	policies := make(map[string]*Policy)
	nodes := make(map[string]string)
	domains := make(map[string][]byte)
	plans := emptyPlanConfig()
	lists := make(map[string][]byte)
	webhooks := make(map[string][]byte)
	var hs *hashSlotTable // nil without its record: every slot owned
	episodes := make(map[string]uint64)
	err := f.store.View(func(tx *persist.Tx) error {
		if err := tx.ForEachPolicy(func(name string, enc []byte) error {
			if ok, err := loadHashSlots(&hs, name, enc); ok || err != nil {
				return err
			}
			if f.domains.loadEntry(domains, name, enc) || loadList(lists, name, enc) || loadWebhook(webhooks, name, enc) {
				return nil
			}
			if ok, err := loadEpisode(episodes, name, enc); ok || err != nil { // budget.go
				return err
			}
			if ok, err := plans.loadEntry(name, enc); ok || err != nil {
				return err
			}
			d := decoder{b: enc}
			p, invalid := decodePolicy(&d)
			if d.err == nil && d.off != len(enc) {
				d.err = fmt.Errorf("%d trailing bytes", len(enc)-d.off)
			}
			if d.err == nil {
				d.err = invalid
			}
			if d.err != nil {
				return fmt.Errorf("policy %q: %w: %v", name, persist.ErrCorrupt, d.err)
			}
			spec, err := p.Spec.Validate()
			if err != nil {
				return fmt.Errorf("policy %q: %w: %v", name, persist.ErrCorrupt, err)
			}
			p.Spec = spec
			policies[name] = &p
			return nil
		}); err != nil {
			return err
		}
		if err := tx.ForEachNode(func(id, addr string) error {
			nodes[id] = addr
			return nil
		}); err != nil {
			return err
		}
		if err := f.outbox.load(tx); err != nil {
			return err
		}
		if err := checkWebhooks(webhooks); err != nil { // webhooks.go
			return err
		}
		return f.bans.load(tx)
	})
	if err != nil {
		return fmt.Errorf("load %s: %w", f.store.Path(), err)
	}
	f.mu.Lock()
	f.policies, f.nodes = policies, nodes
	f.mu.Unlock()
	f.domains.set(domains)
	plans.index()
	f.plans.cur.Store(plans)
	f.lists.set(lists)
	f.webhooks.set(webhooks)
	f.setHashSlots(hs)
	f.ap.budget.episodes.setEpisodes(episodes)
	for name, cfg := range lists {
		f.listEnds.set(name, cfg)
	}
	return nil
}

// Recovered reports that the previous stop was unclean and the database was
// set aside: the state is empty and must be rebuilt from a raft snapshot and
// the log (the caller turns off NoSnapshotRestoreOnStart).
func (f *FSM) Recovered() bool { return f.store.Recovered() }

// Close unblocks an Apply halted by a fatal error, waits for any apply in
// progress, syncs and closes the database and removes the dirty marker —
// unless applying had failed, in which case the marker stays and the next
// Open rebuilds from raft.
func (f *FSM) Close() error {
	f.closeOnce.Do(func() { close(f.closing) })
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.halted != nil {
		return f.store.CloseDirty()
	}
	return f.store.Close()
}

// Apply applies one entry: a batch of one.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies entries in one transaction. Responses, by command:
// CmdCheck []Result; CmdPutPolicy, CmdDeletePolicy, CmdResetKey error (nil or
// *Error; a put or delete that must wait for leases, LeaseFence: leasefence.go);
// CmdExpire int (entries removed); CmdSetNode, CmdRemoveNode and
// non-command entries nil; entries already applied ErrAlreadyApplied. On a
// fatal error nothing of the batch is stored, OnFatal is called and the call
// blocks until Close, then answers every entry with the error.
func (f *FSM) ApplyBatch(ls []*raft.Log) []interface{} {
	if len(ls) > 0 {
		defer f.raftSeen.Store(ls[len(ls)-1].Index)
	}
	f.applyBatches.Add(1)
	if !f.applyMu.TryLock() {
		// A flush (or a snapshot, digest) holds the state machine: time
		// the wait, the write path's stall.
		start := time.Now()
		f.applyMu.Lock()
		f.applyWait.Add(int64(time.Since(start)))
	}
	if f.closed {
		f.applyMu.Unlock()
		return fill(len(ls), ErrClosed)
	}
	if f.halted == nil && len(ls) > 0 && ls[len(ls)-1].Index <= f.store.Meta().AppliedIndex {
		// Applied ahead of raft (ApplyAhead) or before a restart: no
		// transaction for nothing.
		f.applyMu.Unlock()
		return fill(len(ls), ErrAlreadyApplied)
	}
	err := f.halted
	var resps []interface{}
	if err == nil {
		resps, err = f.applyEntries(ls)
		if err != nil {
			f.halted = err
		}
	}
	f.applyMu.Unlock()
	if err != nil {
		f.halt(err)
		return fill(len(ls), err)
	}
	return resps
}

// ApplyAhead applies committed entries before raft hands them to ApplyBatch,
// which then skips them (ErrAlreadyApplied). The caller must know they are
// committed: a follower that holds an entry of its leader's term which the
// leader wrote before sending, in a configuration where the two are a
// majority (cluster/ahead.go). Entries at or below the applied index are
// dropped; the rest must start right after it (else ErrApplyGap, nothing
// applied). The responses are ApplyBatch's, for the entries applied, which
// are returned with them. A fatal error stops the state machine as in
// ApplyBatch (OnFatal), but ApplyAhead returns instead of parking: raft's
// next ApplyBatch parks.
func (f *FSM) ApplyAhead(ls []*raft.Log) ([]*raft.Log, []interface{}, error) {
	f.applyMu.Lock()
	if f.closed {
		f.applyMu.Unlock()
		return nil, nil, ErrClosed
	}
	if f.halted != nil {
		err := f.halted
		f.applyMu.Unlock()
		return nil, nil, err
	}
	applied := f.store.Meta().AppliedIndex
	for len(ls) > 0 && ls[0].Index <= applied {
		ls = ls[1:]
	}
	if len(ls) == 0 {
		f.applyMu.Unlock()
		return nil, nil, nil
	}
	if ls[0].Index != applied+1 {
		f.applyMu.Unlock()
		return nil, nil, fmt.Errorf("%w: the first is %d, the applied index %d", ErrApplyGap, ls[0].Index, applied)
	}
	for i := 1; i < len(ls); i++ {
		if ls[i].Index != ls[i-1].Index+1 {
			f.applyMu.Unlock()
			return nil, nil, fmt.Errorf("%w: %d follows %d", ErrApplyGap, ls[i].Index, ls[i-1].Index)
		}
	}
	f.applyBatches.Add(1)
	resps, err := f.applyEntries(ls)
	if err != nil {
		f.halted = err
	}
	f.applyMu.Unlock()
	if err != nil {
		f.reportFatal(err)
		return nil, nil, err
	}
	return ls, resps, nil
}

func fill(n int, v interface{}) []interface{} {
	r := make([]interface{}, n)
	for i := range r {
		r[i] = v
	}
	return r
}

// halt reports a fatal error once and parks the caller (raft's FSM
// goroutine) until Close: applying later entries after skipping one would
// diverge from the other replicas.
func (f *FSM) halt(err error) {
	f.reportFatal(err)
	<-f.closing
}

func (f *FSM) reportFatal(err error) {
	f.clearOverLimit()
	f.fatalOnce.Do(func() {
		if f.opts.Logger != nil {
			f.opts.Logger.Printf("fsm: applying stopped: %v", err)
		}
		if f.opts.OnFatal != nil {
			f.opts.OnFatal(err)
		}
	})
}

// Flush starts committing the applies that share an open transaction
// (CommitEvery): it freezes them and the file is written on a goroutine of
// its own while later applies go on (persist.Store.StartCommit); if the last
// commit is still being written it does nothing. The caller runs it on a
// timer so that the file, its digest and its snapshots are never far behind.
// A failed commit loses applied entries, so it stops the state machine like a
// failed apply (OnFatal; the next ApplyBatch parks), but Flush itself returns
// instead of parking: it reports the failure of a commit it started earlier,
// or ApplyBatch does.
func (f *FSM) Flush() error {
	f.applyMu.Lock()
	if f.closed || f.halted != nil {
		f.applyMu.Unlock()
		return nil
	}
	err := f.store.StartCommit()
	if err != nil {
		f.halted = err
	}
	f.applyMu.Unlock()
	if err != nil {
		f.reportFatal(err)
	}
	return err
}

// ApplyWait is the total time ApplyBatch waited for the state machine held by
// a flush, snapshot or digest; ApplyBatches counts ApplyBatch calls. Safe from
// any goroutine.
func (f *FSM) ApplyWait() time.Duration { return time.Duration(f.applyWait.Load()) }

// RaftApplied is the highest index raft has handed to ApplyBatch (applied
// then, or skipped as applied ahead or before a restart); AppliedIndex may be
// ahead of it after ApplyAhead. Safe from any goroutine.
func (f *FSM) RaftApplied() uint64 { return f.raftSeen.Load() }

// ApplyBatches is the number of ApplyBatch calls so far.
func (f *FSM) ApplyBatches() uint64 { return f.applyBatches.Load() }

// Commits is the number of commits of the state database so far and the time
// they took in all (persist.Store.CommitStats): with CommitEvery they run
// beside the applies, so this is not time the applies waited (ApplyWait is).
// Safe from any goroutine.
func (f *FSM) Commits() (uint64, time.Duration) { return f.store.CommitStats() }

// FlushedKeys is the number of key states written to the state database by
// commits so far (persist.Store.FlushedKeys); safe from any goroutine.
func (f *FSM) FlushedKeys() uint64 { return f.store.FlushedKeys() }

// Pending is the number of applied batches not yet in a commit, started or
// finished (always 0 without CommitEvery).
func (f *FSM) Pending() int {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	return f.store.Pending()
}

// applyEntries applies ls in one transaction and returns the responses, or
// the error that must stop the node (nothing is then stored).
func (f *FSM) applyEntries(ls []*raft.Log) (resps []interface{}, err error) {
	resps = make([]interface{}, len(ls))
	err = f.store.Update(func(tx *persist.Tx) (err error) {
		defer func() {
			// bbolt panics on a corrupt page; stop the node instead of
			// crashing it with the transaction half applied.
			if r := recover(); r != nil {
				err = fmt.Errorf("apply: %w: panic: %v", persist.ErrCorrupt, r)
			}
		}()
		applied := tx.Meta().AppliedIndex
		for i, l := range ls {
			if l.Index <= applied {
				resps[i] = ErrAlreadyApplied
				continue
			}
			if l.Type == raft.LogCommand {
				f.ap.index = l.Index // slot ids (slots.go)
				resp, err := f.ap.apply(tx, l.Data)
				if err != nil {
					return fmt.Errorf("apply raft entry %d: %w", l.Index, err)
				}
				resps[i] = resp
			}
			applied = l.Index
		}
		tx.SetApplied(applied)
		if f.testHookCommit != nil {
			return f.testHookCommit()
		}
		return nil
	})
	if err != nil {
		f.ap.discard()
		// The node stops applying: its cached refusals would go stale (and
		// those observed in this batch describe writes that were not stored).
		f.clearOverLimit()
		return nil, err
	}
	f.ap.publish()
	return resps, nil
}

// Snapshot captures the database as of the last applied entry; it is written
// out by Persist, concurrently with later applies.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	if f.halted != nil {
		return nil, f.halted
	}
	sn, err := f.store.Snapshot() // commits what applies left open
	if err != nil {
		return nil, err
	}
	return &snapshot{sn: sn}, nil
}

type snapshot struct{ sn *persist.Snapshot }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.sn.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot at index %d: %w", s.sn.Meta().AppliedIndex, err)
	}
	return sink.Close()
}

func (s *snapshot) Release() { s.sn.Release() }

// Restore replaces the state with a snapshot written by Persist. A stream
// that is truncated or damaged fails and leaves the current state intact.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if f.closed {
		return ErrClosed
	}
	// Every cached refusal is about the state being replaced; drop them
	// before it is (even a failed restore costs only misses).
	f.clearOverLimit()
	f.top.clear() // topkeys.go: counts of the replaced state's log
	if err := f.store.Restore(rc); err != nil {
		return err
	}
	return f.load()
}

// clearOverLimit empties the over-limit cache, if there is one.
func (f *FSM) clearOverLimit() {
	if f.opts.OverLimit != nil {
		f.opts.OverLimit.Clear()
	}
}

// AppliedIndex is the last raft index applied.
func (f *FSM) AppliedIndex() uint64 { return f.store.Meta().AppliedIndex }

// LastTime is the greatest leader time applied; the leader stamps entries
// with max(time.Now(), LastTime()) so time never runs backwards.
func (f *FSM) LastTime() int64 { return f.store.Meta().LastTime }

// NextExpiry is the earliest time something may be due for expiry (a lower
// bound); the leader proposes CmdExpire once it has passed.
func (f *FSM) NextExpiry() (int64, bool) {
	next, ok := f.store.NextExpiry()
	// The ends of list entries and bans (lists.go, ban.go): the sweep at
	// them moves the replicated time past them, which is what ends them.
	for _, end := range []int64{f.listEnds.next.Load(), f.bans.nextEnd()} {
		if end != 0 && (!ok || end < next) {
			next, ok = end, true
		}
	}
	return next, ok
}

// Policy returns this replica's copy of a policy.
func (f *FSM) Policy(name string) (Policy, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.policies[name]
	if !ok {
		return Policy{}, false
	}
	return *p, true
}

// Policies returns all policies sorted by name.
func (f *FSM) Policies() []Policy {
	f.mu.RLock()
	ps := make([]Policy, 0, len(f.policies))
	for _, p := range f.policies {
		ps = append(ps, *p)
	}
	f.mu.RUnlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// NodeAddr returns the HTTP address registered for node id, without the
// copy Nodes makes (a follower looks up its leader's address for every
// check it forwards).
func (f *FSM) NodeAddr(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.nodes[id]
	return a, ok
}

// Nodes returns a copy of node id → HTTP address.
func (f *FSM) Nodes() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := make(map[string]string, len(f.nodes))
	for k, v := range f.nodes {
		m[k] = v
	}
	return m
}

// Stats returns current counters without touching the database.
func (f *FSM) Stats() Stats {
	m := f.store.Meta()
	return Stats{
		Keys:         int64(m.Keys),
		RequestIDs:   int64(m.RequestIDs),
		DBSizeBytes:  f.store.FileSize(),
		AppliedIndex: m.AppliedIndex,
	}
}

// Digest is a hex SHA-256 of the replicated contents (state, expiry indexes,
// request ids, policies, nodes; not the applied index): equal on replicas
// that applied the same entries. It commits what applies left open, then
// hashes while holding off applies, so it describes AppliedIndex exactly.
func (f *FSM) Digest() (string, error) {
	d, _, err := f.DigestAt()
	return d, err
}

// DataDigest is Digest without the meta record (LastTime and the counts):
// for comparing replicas stopped at different applied indexes, whose later
// entries may only have advanced the clock (a peek, an expiry sweep that
// found nothing). Replicas at the same index compare with Digest, which also
// catches a divergence in LastTime.
func (f *FSM) DataDigest() (string, error) {
	d, _, err := f.digestAt(f.store.DataDigest)
	return d, err
}

// DigestAt is Digest together with the applied index it describes. A failed
// commit stops the state machine as in Flush.
func (f *FSM) DigestAt() (string, uint64, error) { return f.digestAt(f.store.Digest) }

func (f *FSM) digestAt(hash func() (string, error)) (string, uint64, error) {
	f.applyMu.Lock()
	if f.closed {
		f.applyMu.Unlock()
		return "", 0, ErrClosed
	}
	var commitErr error
	if f.halted == nil {
		if commitErr = f.store.Commit(); commitErr != nil {
			f.halted = commitErr
		}
	}
	var (
		d       string
		applied uint64
		err     = commitErr
	)
	if err == nil {
		d, err = hash()
		applied = f.store.Meta().AppliedIndex
	}
	f.applyMu.Unlock()
	if commitErr != nil {
		f.reportFatal(commitErr) // not under applyMu: OnFatal may stop the node
	}
	return d, applied, err
}
