package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// Log store kinds (Config.LogStore).
const (
	LogStoreWAL    = "wal"
	LogStoreBoltDB = "boltdb"
)

const (
	walDirName   = "raft-wal"
	boltFileName = "raft.db"
	// Each raft-wal segment file is preallocated to this size; sealed
	// segments are deleted once a snapshot covers them.
	walSegmentBytes = 16 << 20
)

// logStore is Raft's log and stable store in one: both raft-wal and
// raft-boltdb provide the two interfaces from one file set.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// logStoreKind decides which store a data directory uses: the one it was
// created with, else the configured one. Switching a directory in place would
// silently start an empty log next to the real one, so it is refused.
func logStoreKind(cfg Config) (string, error) {
	want := cfg.LogStore
	if want == "" {
		want = LogStoreWAL
	}
	if want != LogStoreWAL && want != LogStoreBoltDB {
		return "", fmt.Errorf("log store %q: want %q or %q", cfg.LogStore, LogStoreWAL, LogStoreBoltDB)
	}
	hasBolt := exists(filepath.Join(cfg.DataDir, boltFileName))
	hasWAL := exists(filepath.Join(cfg.DataDir, walDirName))
	switch {
	case hasBolt && hasWAL:
		return "", fmt.Errorf("data dir %s holds both %s and %s: remove the one that is not in use", cfg.DataDir, boltFileName, walDirName)
	case hasBolt:
		if cfg.LogStore == LogStoreWAL {
			return "", fmt.Errorf("data dir %s was created with --log-store=%s", cfg.DataDir, LogStoreBoltDB)
		}
		return LogStoreBoltDB, nil
	case hasWAL:
		if cfg.LogStore == LogStoreBoltDB {
			return "", fmt.Errorf("data dir %s was created with --log-store=%s", cfg.DataDir, LogStoreWAL)
		}
		return LogStoreWAL, nil
	}
	return want, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// openLogStore opens the data directory's Raft log and returns it with its
// path (for messages).
func openLogStore(cfg Config, logger hclog.Logger) (logStore, string, error) {
	kind, err := logStoreKind(cfg)
	if err != nil {
		return nil, "", err
	}
	if kind == LogStoreBoltDB {
		path := filepath.Join(cfg.DataDir, boltFileName)
		// The freelist is rebuilt at open instead of written at every commit:
		// fewer pages per log append on the fsync path.
		s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{
			Timeout: 5 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType,
		}})
		if err != nil {
			return nil, "", fmt.Errorf("open raft log %s: %w", path, err)
		}
		return s, path, nil
	}
	dir := filepath.Join(cfg.DataDir, walDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("create raft log dir %s: %w", dir, err)
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithSegmentSize(walSegmentBytes), wal.WithMetaStore(meta), wal.WithLogger(logger.Named("wal")))
	if err != nil {
		_ = meta.Close()
		return nil, "", fmt.Errorf("open raft log %s: %w", dir, err)
	}
	return &walStore{WAL: w, meta: meta}, dir, nil
}

// walStore closes the WAL's metadata database too: WAL.Close leaves it open,
// and its file lock would stop the same process from reopening the log.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

// checkLogCoversState refuses a log that ends before what the state machine
// has applied. A replica applies only entries it holds, and compaction drops
// only entries a snapshot covers, so applied ≤ max(last log index, last
// snapshot index) always. A log that lost its tail (damaged or replaced
// files) would otherwise start a node that can never be elected or that
// rewrites committed history.
func checkLogCoversState(applied uint64, logs raft.LogStore, snaps raft.SnapshotStore) error {
	if applied == 0 {
		return nil
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("read last index: %w", err)
	}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	for _, m := range metas {
		if m.Index > last {
			last = m.Index
		}
	}
	if applied > last {
		return fmt.Errorf("the log and snapshots end at index %d but the state database applied up to %d: log entries were lost", last, applied)
	}
	return nil
}

// guardedLogStore reports the first failed write to the Raft log or stable
// store. Raft itself only logs such an error and steps down, so a node whose
// disk is full (a WAL segment it cannot create) would otherwise go on
// winning and losing elections instead of stopping.
//
// It also keeps the log's end durable (keyLogEnd in the stable store, see
// markEnd) so that a log that lost its tail is noticed at the next start,
// and refuses a leader's truncation of entries this node has already
// applied: that node's history diverged, and applying on would fork its state.
type guardedLogStore struct {
	logStore
	failed func(error)
	// applied returns the state machine's applied index (nil: not checked).
	applied func() uint64
	// diverged is called once when the log is truncated at or below applied.
	diverged func(error)
	// stored, when set, is told of every successful StoreLogs (ahead.go);
	// set before raft starts.
	stored func([]*raft.Log)

	endMu sync.Mutex
	end   uint64 // last value written under keyLogEnd
}

// keyLogEnd is the stable-store key of the log's last index as last marked.
var keyLogEnd = []byte("LimitdLogEnd")

// markEnd records the log's current last index durably, if it moved. A log
// that reopens shorter than this lost entries it had fsynced: raft-wal
// drops every frame after a damaged one without an error.
func (g *guardedLogStore) markEnd() error {
	g.endMu.Lock()
	defer g.endMu.Unlock()
	last, err := g.logStore.LastIndex()
	if err != nil || last == g.end {
		return err
	}
	return g.setEnd(last)
}

func (g *guardedLogStore) check(what string, err error) error {
	if err != nil {
		g.failed(fmt.Errorf("%s: %w", what, err))
	}
	return err
}

func (g *guardedLogStore) StoreLog(l *raft.Log) error {
	return g.check("store log entry", g.logStore.StoreLog(l))
}

func (g *guardedLogStore) StoreLogs(ls []*raft.Log) error {
	if err := g.check("store log entries", g.logStore.StoreLogs(ls)); err != nil {
		return err
	}
	if g.stored != nil {
		g.stored(ls)
	}
	return nil
}

func (g *guardedLogStore) DeleteRange(min, max uint64) error {
	g.endMu.Lock()
	defer g.endMu.Unlock()
	first, err := g.logStore.FirstIndex()
	if err != nil {
		return g.check("delete log entries", err)
	}
	last, err := g.logStore.LastIndex()
	if err != nil {
		return g.check("delete log entries", err)
	}
	switch {
	case max < last: // compaction of the head: the end stays
	case min <= first: // the whole log, for an installed snapshot
		if err := g.setEnd(0); err != nil {
			return err
		}
	default:
		// A suffix: Raft replaces entries a new leader does not have. An
		// applied entry is committed and never replaced, unless this node's
		// history diverged from the cluster's.
		if g.applied != nil {
			if applied := g.applied(); min <= applied {
				err := fmt.Errorf("history diverged: the leader replaces log entries from index %d, but this node's state machine already applied up to %d, so its state reflects entries the cluster does not have; to recover, %s", min, applied, recoveryStep)
				g.diverged(err)
				return err
			}
		}
		if err := g.setEnd(min - 1); err != nil {
			return err
		}
	}
	return g.check("delete log entries", g.logStore.DeleteRange(min, max))
}

func (g *guardedLogStore) setEnd(v uint64) error {
	if err := g.SetUint64(keyLogEnd, v); err != nil {
		return err
	}
	g.end = v
	return nil
}

func (g *guardedLogStore) Set(k, v []byte) error {
	return g.check("write stable store", g.logStore.Set(k, v))
}

func (g *guardedLogStore) SetUint64(k []byte, v uint64) error {
	return g.check("write stable store", g.logStore.SetUint64(k, v))
}

// IsMonotonic passes on raft.MonotonicLogStore (raft-wal is; raft relies on
// it after restoring a snapshot).
func (g *guardedLogStore) IsMonotonic() bool {
	m, ok := g.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
