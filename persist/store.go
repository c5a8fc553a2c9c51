// Package persist owns limitd's on-disk state machine storage: one bbolt file
// holding limiter state per key, the request-id table, policies, cluster
// nodes, and the Raft index and leader time the contents correspond to.
//
// The package knows the layout of the file but nothing about Raft commands or
// algorithms: the fsm package decides, persist stores. Every change happens in
// a write transaction (Store.Update) that also records the applied index, so
// a Raft entry is applied entirely or not at all; with Options.CommitEvery
// several Updates share one transaction and one commit, and with
// Options.Background that commit is written to the file on a goroutine of its
// own while later Updates go on in memory (overlay.go).
//
// The file is opened with NoSync for throughput: the Raft log is the durable
// record. A marker file (<path>.dirty) exists while the database is open; if it
// is found at Open, the previous process did not close cleanly, the file may be
// torn, and it is set aside (<path>.unclean) so the caller can rebuild from a
// Raft snapshot and the log instead of trusting it.
package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket names. Never rename: they are the file format.
var (
	bucketMeta       = []byte("meta")
	bucketState      = []byte("state")
	bucketStateExp   = []byte("state_expiry")
	bucketRequests   = []byte("requests")
	bucketRequestExp = []byte("request_expiry")
	bucketPolicies   = []byte("policies")
	bucketNodes      = []byte("nodes")

	// dataBuckets are hashed by Digest, in this order, after the meta
	// record without its applied index (see Digest).
	dataBuckets = [][]byte{bucketPolicies, bucketNodes, bucketState, bucketStateExp, bucketRequests, bucketRequestExp}

	keySchema = []byte("schema")
	keyMeta   = []byte("meta")
)

var (
	// ErrClosed is returned by operations on a closed Store.
	ErrClosed = errors.New("persist: store is closed")
	// ErrCorrupt is wrapped by errors about bytes in the file that cannot be
	// decoded; the file cannot be trusted.
	ErrCorrupt = errors.New("corrupt fsm database")
)

// Options configures a Store.
type Options struct {
	// NoSync opens bbolt with NoSync: commits reach the page cache only.
	// Safe only because Raft's log is fsynced and the dirty marker makes an
	// unclean stop rebuild from it.
	NoSync bool
	// MaxSize caps the database file in bytes (0: no cap). A commit that would
	// grow it further fails, like a full disk.
	MaxSize int
	// InitialMmapSize reserves address space so the file can grow without
	// remapping, which would wait for read transactions (a snapshot being
	// streamed) to finish.
	InitialMmapSize int
	// CommitEvery lets Update leave its transaction open so that up to this
	// many Updates share one bbolt commit (0 or 1: every Update commits).
	// Commit ends the shared transaction earlier. A bbolt commit costs the
	// same whether it carries one entry or a hundred (every touched page is
	// rewritten), so sharing it is the cheapest write path; it is only safe
	// with NoSync's rule that the file is rebuilt from Raft after an unclean
	// stop, because an open transaction is lost by a crash.
	CommitEvery int
	// Background runs the commits that CommitEvery triggers and StartCommit
	// on a goroutine of their own: Updates go on against a new in-memory
	// generation while the last one is written to the file (overlay.go).
	Background bool
	// CacheKeys bounds the state cache (cache.go) in keys; 0 means
	// DefaultCacheKeys. The bound holds after every commit; between commits
	// the cache also holds every key written since the last one.
	CacheKeys int
	// KeyGroup, when set, names the group of a state key (nil: none); the
	// store counts the live states of each group (groups.go, GroupKeys).
	// It must be a pure function of the key.
	KeyGroup func(key []byte) []byte
	Logger   *log.Logger
}

// Meta is what the store records about the commands applied to it.
type Meta struct {
	AppliedIndex uint64 // last Raft index applied
	LastTime     int64  // greatest leader time seen (ns since the epoch)
	Keys         uint64 // state entries
	RequestIDs   uint64 // request-id entries
}

// Store is an open state machine database.
type Store struct {
	path string
	opts Options

	// mu guards db against Restore swapping the file; Update and readers hold
	// it shared.
	mu        sync.RWMutex
	db        *bolt.DB
	lock      *os.File
	recovered bool

	// Published after each commit for lock-free reads.
	applied    atomic.Uint64
	lastTime   atomic.Int64
	keys       atomic.Uint64
	requests   atomic.Uint64
	nextExpiry atomic.Int64
	hasNext    atomic.Bool
	// flushedKeys counts key states written to the file by commits (each
	// dirty key once per commit, however many applies changed it).
	flushedKeys atomic.Uint64
	// commits and commitNanos: the commits that wrote a generation to the
	// file, and the time they took (CommitStats).
	commits     atomic.Uint64
	commitNanos atomic.Int64

	// Touched only by the single writer.
	meta      Meta // as of the last Update, committed or not
	committed Meta // as of the last commit started (what cur sits on)
	fileMeta  Meta // as of the last commit finished
	pending   int  // Updates in the current generation
	wtx       Tx   // reused by every Update
	cache     *stateCache

	// groups, groupsCommitted, groupsFile: the live states per key group
	// (groups.go) as of the last Update, commit started and commit finished,
	// as meta, committed and fileMeta.
	groups, groupsCommitted, groupsFile groupCounts

	// The write overlay (overlay.go): Updates write cur; frozen is being
	// committed while flight is open (nil: no commit in flight); spare is a
	// recycled generation.
	cur, frozen, spare *generation
	flight             chan struct{}
	flightErr          error // set before flight closes
	// rtx is the writer's read transaction on the file, kept between
	// Updates while no commit is in flight (bbolt allocates for every
	// transaction and bucket); released before any commit starts, since a
	// commit that must remap the file waits for every read transaction.
	rtx *bolt.Tx

	// testHookCommit, when set, runs on the committing goroutine before it
	// writes a generation to the file (tests block it there).
	testHookCommit func()
	// testNoSkip turns off the request sweep's skip (firstRequestDue), for
	// a reference store in tests.
	testNoSkip bool
}

// Open opens (or creates) the database at path. If the dirty marker of an
// unclean stop is present, the old file is moved to <path>.unclean and an
// empty database is created; Recovered then reports true. An unreadable or
// corrupt file is an error naming it; Open never silently starts empty over
// existing data.
func Open(path string, opts Options) (*Store, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, opts: opts, lock: lock, cache: newStateCache(opts.CacheKeys)}
	fail := func(err error) (*Store, error) {
		unlockFile(lock)
		return nil, err
	}

	marker := s.markerPath()
	switch _, err := os.Stat(marker); {
	case err == nil:
		s.recovered = true
		if err := s.setAside(".unclean", "was not closed cleanly"); err != nil {
			return fail(err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fail(fmt.Errorf("check dirty marker %s: %w", marker, err))
	default:
		// A clean stop: scrub the file before trusting it. Damage to a file
		// that is ours (bbolt's consistency check, a checksum) sets it aside
		// and rebuilds from Raft like an unclean stop; a file that is not
		// recognisably ours is refused.
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			if err := verifyFile(path); errors.Is(err, ErrCorrupt) {
				s.recovered = true
				if err := s.setAside(".corrupt", fmt.Sprintf("failed its integrity check (%v)", err)); err != nil {
					return fail(err)
				}
			} else if err != nil {
				return fail(fmt.Errorf("open fsm database %s: %w", path, err))
			}
		}
	}
	if err := writeMarker(marker); err != nil {
		return fail(err)
	}
	db, err := s.openDB(path)
	if err != nil {
		// Leave no marker behind a file we refused: the next start must
		// refuse it too instead of setting it aside as merely unclean. After
		// a recovery the marker stays: the set-aside already happened.
		if !s.recovered {
			_ = os.Remove(marker)
		}
		return fail(err)
	}
	s.db = db
	s.wtx.store = s
	s.wtx.cache = s.cache
	s.cur = new(generation)
	s.wtx.bind(s.cur, nil)
	return s, nil
}

// setAside moves an untrusted file (an unclean stop, damage) out of the way
// to path+suffix, replacing an older one.
func (s *Store) setAside(suffix, why string) error {
	if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	aside := s.path + suffix
	if err := os.Rename(s.path, aside); err != nil {
		return fmt.Errorf("set aside %s (%s): %w", s.path, why, err)
	}
	s.logf("fsm database %s %s: moved to %s, starting empty to rebuild from raft", s.path, why, aside)
	return syncDir(filepath.Dir(s.path))
}

// openDB opens a bbolt file, creates missing buckets in a new one, checks the
// schema, and loads Meta.
func (s *Store) openDB(path string) (db *bolt.DB, err error) {
	existed := false
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		existed = true
	}
	// bbolt panics on some forms of page corruption; report them as errors
	// naming the file instead of crashing with a stack trace.
	var file *os.File
	// A file cut short after a clean stop faults (SIGBUS) when bbolt reads
	// its mmap past the end; turn that into a panic the recover below reports.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			} else if file != nil {
				// The panic came from inside bolt.Open: close its file so
				// its lock does not outlive the failed attempt.
				_ = file.Close()
			}
			db, err = nil, fmt.Errorf("open fsm database %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	// The freelist is synced (NoFreelistSync false): without it bbolt
	// rebuilds the freelist at open by walking the file in a goroutine of its
	// own, where a corrupt page panics beyond recovery instead of failing
	// Open with an error.
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         time.Second,
		NoSync:          s.opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: s.opts.InitialMmapSize,
		MaxSize:         s.opts.MaxSize,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open fsm database %s: %w", path, err)
	}
	var m Meta
	err = db.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket(bucketMeta)
		if mb == nil {
			if existed {
				return fmt.Errorf("%w: no %q bucket", errForeign, bucketMeta)
			}
			return initBuckets(tx)
		}
		if _, err := readSchema(mb.Get(keySchema)); err != nil {
			return err
		}
		for _, name := range dataBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: missing bucket %q", ErrCorrupt, name)
			}
		}
		m, err = decodeMeta(mb.Get(keyMeta))
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open fsm database %s: %w", path, err)
	}
	s.meta, s.committed, s.fileMeta = m, m, m
	s.publish(m)
	g, err := s.countGroups(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open fsm database %s: count key groups: %w", path, err)
	}
	s.groups, s.groupsCommitted, s.groupsFile = g, g.clone(), g.clone()
	if err := db.View(func(tx *bolt.Tx) error {
		t, ok := nextExpiry(tx)
		s.publishNext(t, ok)
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open fsm database %s: %w", path, err)
	}
	return db, nil
}

func initBuckets(tx *bolt.Tx) error {
	mb, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if err := mb.Put(keySchema, encodeSchema()); err != nil {
		return err
	}
	if err := mb.Put(keyMeta, encodeMeta(Meta{})); err != nil {
		return err
	}
	for _, name := range dataBuckets {
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) publish(m Meta) {
	s.applied.Store(m.AppliedIndex)
	s.lastTime.Store(m.LastTime)
	s.keys.Store(m.Keys)
	s.requests.Store(m.RequestIDs)
}

func (s *Store) publishNext(t int64, ok bool) {
	s.nextExpiry.Store(t)
	s.hasNext.Store(ok)
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

func (s *Store) markerPath() string { return s.path + ".dirty" }

// Recovered reports that Open found the dirty marker of an unclean stop and
// started from an empty database.
func (s *Store) Recovered() bool { return s.recovered }

// Meta returns the state as of the last commit. It may be read concurrently
// with Update; the fields are each current but not read atomically together.
func (s *Store) Meta() Meta {
	return Meta{
		AppliedIndex: s.applied.Load(),
		LastTime:     s.lastTime.Load(),
		Keys:         s.keys.Load(),
		RequestIDs:   s.requests.Load(),
	}
}

// NextExpiry is the earliest time at which an expiry-index entry is due, as of
// the last commit. An entry may turn out to belong to a key that is still
// active (the index holds lower bounds); expiring it then just re-files it.
func (s *Store) NextExpiry() (int64, bool) {
	return s.nextExpiry.Load(), s.hasNext.Load()
}

// Update runs fn in a write transaction. With CommitEvery ≤ 1 it commits at
// once; otherwise the transaction stays open for the next Update until
// CommitEvery Updates share it or Commit is called (with Background, the
// CommitEvery-th Update starts the commit on its own goroutine instead). If
// fn or a commit fails, every Update since the last commit is rolled back,
// and the error is returned: the caller (the state machine) must then stop,
// because answers it gave for the lost Updates are no longer in the file.
// Update must not be called concurrently with itself or with Commit (a single
// writer).
//
// fn's writes go to the current in-memory generation (overlay.go); reads go
// through it and a commit in flight to the file, through a read transaction
// held for this call only, so that a commit needing to remap the file never
// waits for more than one Update.
func (s *Store) Update(fn func(*Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	if err := s.collect(false); err != nil {
		return err
	}
	t := &s.wtx
	var err error
	if s.rtx == nil {
		if s.rtx, err = s.db.Begin(false); err != nil {
			s.rtx = nil
			return fmt.Errorf("begin transaction on %s: %w", s.path, err)
		}
		err = t.begin(s.rtx, s.meta)
	}
	t.meta = s.meta
	if err == nil {
		err = fn(t)
	}
	var next int64
	var hasNext bool
	if err == nil {
		next, hasNext = t.NextExpiry()
	}
	if err != nil || s.flight != nil {
		s.releaseRead()
	}
	if err != nil {
		s.rollbackLocked()
		return err
	}
	s.meta = t.meta
	s.pending++
	// Readers see progress at once, not at the next commit: the applied
	// index and expiry hint describe what the writer has applied.
	s.publish(t.meta)
	s.publishNext(next, hasNext)
	if s.pending >= s.opts.CommitEvery {
		return s.commitLocked(!(s.opts.Background && s.opts.CommitEvery > 1))
	}
	return nil
}

// Commit commits the Updates not yet in the file, waiting for a commit in
// flight first, and returns when the file holds every Update. Same caller
// rules as Update.
func (s *Store) Commit() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.commitLocked(true)
}

// StartCommit is Commit without the wait when Options.Background is set: it
// freezes the Updates since the last commit and writes them to the file on a
// goroutine of its own, while later Updates go on. If a commit is still in
// flight it does nothing (the next call takes everything). It returns the
// error of a commit that finished since the last call, if any: the Updates it
// carried are lost and the caller must stop, as for a failed Update. Same
// caller rules as Update.
func (s *Store) StartCommit() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.commitLocked(!s.opts.Background)
}

// SetCommitHook sets a function that every later commit runs first, on the
// goroutine that writes the file (nil: none). For tests of callers: a hook
// that blocks holds a Background commit in flight. Same caller rules as
// Update.
func (s *Store) SetCommitHook(fn func()) { s.testHookCommit = fn }

// Pending reports how many Updates are not yet in a commit (started or
// finished).
func (s *Store) Pending() int { return s.pending }

// Committing reports a commit in flight (Background).
func (s *Store) Committing() bool { return s.flight != nil }

// CommitStats is the number of commits that wrote Updates to the file so far
// and the time they took in all: with Background, time spent beside the
// Updates, not in their way. Safe to call from any goroutine.
func (s *Store) CommitStats() (n uint64, total time.Duration) {
	return s.commits.Load(), time.Duration(s.commitNanos.Load())
}

// FlushedKeys is the number of key states commits have written to the file
// so far: with the state cache, fewer than the checks applied. Safe to call
// from any goroutine.
func (s *Store) FlushedKeys() uint64 { return s.flushedKeys.Load() }

// commitLocked freezes the current generation and commits it: inline when
// wait is set (after the commit in flight, if any), else on a goroutine of
// its own unless one is in flight.
func (s *Store) commitLocked(wait bool) error {
	s.releaseRead()
	if err := s.collect(wait); err != nil {
		return err
	}
	if s.flight != nil || s.pending == 0 {
		return nil
	}
	t := &s.wtx
	if err := t.flush(); err != nil {
		s.rollbackLocked()
		return fmt.Errorf("flush state cache to %s: %w", s.path, err)
	}
	s.cache.flushed()
	g := s.cur
	g.meta = s.meta
	s.committed = s.meta
	s.groupsCommitted = s.groups.clone()
	g.groups = s.groupsCommitted
	s.pending = 0
	s.cur, s.spare = s.spare, nil
	if s.cur == nil {
		s.cur = new(generation)
	}
	s.frozen = g
	s.flight = make(chan struct{})
	t.bind(s.cur, g)
	db, hook, done := s.db, s.testHookCommit, s.flight
	run := func() {
		if hook != nil {
			hook()
		}
		start := time.Now()
		s.flightErr = db.Update(g.writeTo)
		s.commitNanos.Add(int64(time.Since(start)))
		s.commits.Add(1)
		close(done)
	}
	if !wait {
		go run()
		return nil
	}
	run()
	return s.collect(true)
}

// collect ends the commit in flight if it has finished (or, with wait, once
// it has): the frozen generation is dropped, the file now holds it. A failed
// commit loses every Update since the last one that succeeded: the store
// falls back to the file and the error is returned.
func (s *Store) collect(wait bool) error {
	if s.flight == nil {
		return nil
	}
	s.releaseRead() // it may predate the commit: the next one sees its file
	if wait {
		<-s.flight
	} else {
		select {
		case <-s.flight:
		default:
			return nil
		}
	}
	g, err := s.frozen, s.flightErr
	s.frozen, s.flight, s.flightErr = nil, nil, nil
	if err != nil {
		s.wtx.reqSkip = s.wtx.reqSkip[:0]
		g.reset()
		s.cur.reset()
		s.cache.reset()
		s.pending = 0
		s.meta, s.committed = s.fileMeta, s.fileMeta
		s.groups, s.groupsCommitted = s.groupsFile.clone(), s.groupsFile.clone()
		s.publish(s.meta)
		s.spare = g
		s.wtx.bind(s.cur, nil)
		return fmt.Errorf("commit to %s: %w", s.path, err)
	}
	s.fileMeta = g.meta
	s.groupsFile = g.groups
	g.reset()
	s.spare = g
	s.wtx.bind(s.cur, nil)
	return nil
}

// releaseRead ends the writer's read transaction, if it holds one.
func (s *Store) releaseRead() {
	if s.rtx != nil {
		s.wtx.end()
		_ = s.rtx.Rollback()
		s.rtx = nil
	}
}

// rollbackLocked drops the Updates since the last commit started.
func (s *Store) rollbackLocked() {
	s.wtx.reqSkip = s.wtx.reqSkip[:0]
	s.cur.reset()
	s.cache.reset() // its dirty entries were in the generation
	s.pending = 0
	s.meta = s.committed
	s.groups = s.groupsCommitted.clone()
	s.publish(s.meta)
	s.wtx.bind(s.cur, s.frozen)
}

// View runs fn in a read-only transaction. Write methods of the Tx fail.
func (s *Store) View(fn func(*Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.View(func(btx *bolt.Tx) error {
		t := &Tx{store: s}
		m, err := decodeMeta(btx.Bucket(bucketMeta).Get(keyMeta))
		if err != nil {
			return fmt.Errorf("%s: %w", s.path, err)
		}
		if err := t.begin(btx, m); err != nil {
			return err
		}
		return fn(t)
	})
}

// Close syncs the file, closes it and removes the dirty marker: the next Open
// trusts the file.
func (s *Store) Close() error { return s.close(true) }

// CloseDirty closes the file but leaves the dirty marker, so the next Open
// sets the file aside and the caller rebuilds from Raft. Used after a fatal
// apply error, when the file may not reflect every committed entry.
func (s *Store) CloseDirty() error { return s.close(false) }

func (s *Store) close(clean bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	var err error
	if clean {
		err = s.commitLocked(true)
	} else {
		_ = s.collect(true) // the file must not close under a commit
		s.rollbackLocked()
	}
	s.releaseRead()
	if clean && err == nil {
		if err = s.db.Sync(); err != nil {
			err = fmt.Errorf("sync %s: %w", s.path, err)
		}
	}
	if cerr := s.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close %s: %w", s.path, cerr)
	}
	s.db = nil
	if clean && err == nil {
		if rerr := os.Remove(s.markerPath()); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("remove dirty marker: %w", rerr)
		} else {
			err = syncDir(filepath.Dir(s.path))
		}
	}
	unlockFile(s.lock)
	return err
}

func (s *Store) logf(format string, args ...any) {
	if s.opts.Logger != nil {
		s.opts.Logger.Printf(format, args...)
	}
}

// writeMarker creates the dirty marker durably: it must exist on disk before
// any NoSync write can reach the database file.
func writeMarker(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create dirty marker %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync dirty marker %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close dirty marker %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
