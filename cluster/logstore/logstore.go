// Package logstore owns a node's Raft log and stable store: which store a
// data directory uses (raft-wal or raft-boltdb) and opening it, and the
// checks that keep a damaged or diverged log from serving: the first failed
// write reported (Guarded), the log's end marked durably and checked at the
// next start, entries a node already applied never replaced, and damage
// named by file, index and recovery step (damage.go).
package logstore

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

// Log store kinds.
const (
	WAL    = "wal"
	BoltDB = "boltdb"
)

const (
	walDirName   = "raft-wal"
	boltFileName = "raft.db"
	// Each raft-wal segment file is preallocated to this size; sealed
	// segments are deleted once a snapshot covers them.
	walSegmentBytes = 16 << 20
)

// Store is Raft's log and stable store in one: both raft-wal and
// raft-boltdb provide the two interfaces from one file set.
type Store interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// Kind decides which store the data directory dataDir uses: the one it was
// created with, else asked ("" for either, WAL for a new directory).
// Switching a directory in place would silently start an empty log next to
// the real one, so it is refused.
func Kind(dataDir, asked string) (string, error) {
	want := asked
	if want == "" {
		want = WAL
	}
	if want != WAL && want != BoltDB {
		return "", fmt.Errorf("log store %q: want %q or %q", asked, WAL, BoltDB)
	}
	hasBolt := exists(filepath.Join(dataDir, boltFileName))
	hasWAL := exists(filepath.Join(dataDir, walDirName))
	switch {
	case hasBolt && hasWAL:
		return "", fmt.Errorf("data dir %s holds both %s and %s: remove the one that is not in use", dataDir, boltFileName, walDirName)
	case hasBolt:
		if asked == WAL {
			return "", fmt.Errorf("data dir %s was created with --log-store=%s", dataDir, BoltDB)
		}
		return BoltDB, nil
	case hasWAL:
		if asked == BoltDB {
			return "", fmt.Errorf("data dir %s was created with --log-store=%s", dataDir, WAL)
		}
		return WAL, nil
	}
	return want, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// Open opens the Raft log of the data directory dataDir (of the kind Kind
// decides) and returns it with its path (for messages).
func Open(dataDir, asked string, logger hclog.Logger) (Store, string, error) {
	kind, err := Kind(dataDir, asked)
	if err != nil {
		return nil, "", err
	}
	if kind == BoltDB {
		path := filepath.Join(dataDir, boltFileName)
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
	dir := filepath.Join(dataDir, walDirName)
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

// CoversState refuses a log that ends before what the state machine
// has applied. A replica applies only entries it holds, and compaction drops
// only entries a snapshot covers, so applied ≤ max(last log index, last
// snapshot index) always. A log that lost its tail (damaged or replaced
// files) would otherwise start a node that can never be elected or that
// rewrites committed history.
func CoversState(applied uint64, logs raft.LogStore, snaps raft.SnapshotStore) error {
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

// Guarded reports the first failed write to the Raft log or stable store.
// Raft itself only logs such an error and steps down, so a node whose disk
// is full (a WAL segment it cannot create) would otherwise go on winning and
// losing elections.
//
// It also keeps the log's end durable (keyLogEnd in the stable store, see
// MarkEnd) so that a log that lost its tail is noticed at the next start,
// and refuses a leader's truncation of entries this node has already
// applied: that node's history diverged.
type Guarded struct {
	Store
	Failed func(error)
	// Applied returns the state machine's applied index (nil: not checked).
	Applied func() uint64
	// Diverged is called once when the log is truncated at or below Applied.
	Diverged func(error)
	// Stored, when set, is told of every successful StoreLogs (apply-ahead);
	// set before raft starts.
	Stored func([]*raft.Log)

	endMu sync.Mutex
	end   uint64 // last value written under keyLogEnd
}

// keyLogEnd is the stable-store key of the log's last index as last marked.
var keyLogEnd = []byte("LimitdLogEnd")

// MarkEnd records the log's current last index durably, if it moved. A log
// that reopens shorter than this lost entries it had fsynced: raft-wal
// drops every frame after a damaged one without an error.
func (g *Guarded) MarkEnd() error {
	g.endMu.Lock()
	defer g.endMu.Unlock()
	last, err := g.Store.LastIndex()
	if err != nil || last == g.end {
		return err
	}
	return g.setEnd(last)
}

func (g *Guarded) check(what string, err error) error {
	if err != nil {
		g.Failed(fmt.Errorf("%s: %w", what, err))
	}
	return err
}

func (g *Guarded) StoreLog(l *raft.Log) error {
	return g.check("store log entry", g.Store.StoreLog(l))
}

func (g *Guarded) StoreLogs(ls []*raft.Log) error {
	if err := g.check("store log entries", g.Store.StoreLogs(ls)); err != nil {
		return err
	}
	if g.Stored != nil {
		g.Stored(ls)
	}
	return nil
}

func (g *Guarded) DeleteRange(min, max uint64) error {
	g.endMu.Lock()
	defer g.endMu.Unlock()
	first, err := g.Store.FirstIndex()
	if err != nil {
		return g.check("delete log entries", err)
	}
	last, err := g.Store.LastIndex()
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
		if g.Applied != nil {
			if applied := g.Applied(); min <= applied {
				err := fmt.Errorf("history diverged: the leader replaces log entries from index %d, but this node's state machine already applied up to %d, so its state reflects entries the cluster does not have; to recover, %s", min, applied, RecoveryStep)
				g.Diverged(err)
				return err
			}
		}
		if err := g.setEnd(min - 1); err != nil {
			return err
		}
	}
	return g.check("delete log entries", g.Store.DeleteRange(min, max))
}

func (g *Guarded) setEnd(v uint64) error {
	if err := g.SetUint64(keyLogEnd, v); err != nil {
		return err
	}
	g.end = v
	return nil
}

func (g *Guarded) Set(k, v []byte) error {
	return g.check("write stable store", g.Store.Set(k, v))
}

func (g *Guarded) SetUint64(k []byte, v uint64) error {
	return g.check("write stable store", g.Store.SetUint64(k, v))
}

// IsMonotonic passes on raft.MonotonicLogStore (raft-wal is; raft relies on
// it after restoring a snapshot).
func (g *Guarded) IsMonotonic() bool {
	m, ok := g.Store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// HasLog reports whether the data directory dataDir holds a Raft log of
// either kind.
func HasLog(dataDir string) bool {
	return exists(filepath.Join(dataDir, walDirName)) || exists(filepath.Join(dataDir, boltFileName))
}
