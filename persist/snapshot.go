package persist

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A snapshot stream is
//
//	magic(8) ‖ size uint64 ‖ bbolt file (size bytes) ‖ SHA-256 of the file
//
// The file is a consistent copy taken inside one read transaction, so its meta
// bucket holds exactly the applied index of the state it contains. The length
// and checksum let Restore reject a truncated or damaged stream before it
// touches the live database.
var snapshotMagic = [8]byte{'L', 'M', 'T', 'D', 'S', 'N', 'P', '1'}

// maxSnapshotSize bounds the size field of a stream so garbage cannot make
// Restore try to write an absurd file.
const maxSnapshotSize = 1 << 44

// Snapshot is a point-in-time view of the store, held open by a read
// transaction until Release.
type Snapshot struct {
	tx   *bolt.Tx
	meta Meta
	once sync.Once
}

// Snapshot commits what Updates left open, then starts a read transaction.
// Call it from the writer (the Raft FSM goroutine) so the view matches the
// applied index; it may be written out later, concurrently with writes.
// Release must be called.
func (s *Store) Snapshot() (*Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return nil, ErrClosed
	}
	if err := s.commitLocked(true); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("begin snapshot of %s: %w", s.path, err)
	}
	m, err := decodeMeta(tx.Bucket(bucketMeta).Get(keyMeta))
	if err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	return &Snapshot{tx: tx, meta: m}, nil
}

// Meta is the meta record the snapshot holds.
func (sn *Snapshot) Meta() Meta { return sn.meta }

// WriteTo streams the snapshot.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	var hdr [16]byte
	copy(hdr[:], snapshotMagic[:])
	binary.BigEndian.PutUint64(hdr[8:], uint64(sn.tx.Size()))
	n, err := w.Write(hdr[:])
	total := int64(n)
	if err != nil {
		return total, fmt.Errorf("write snapshot header: %w", err)
	}
	h := sha256.New()
	m, err := sn.tx.WriteTo(io.MultiWriter(w, h))
	total += m
	if err != nil {
		return total, fmt.Errorf("write snapshot: %w", err)
	}
	n, err = w.Write(h.Sum(nil))
	total += int64(n)
	if err != nil {
		return total, fmt.Errorf("write snapshot checksum: %w", err)
	}
	return total, nil
}

// Release ends the read transaction. Safe to call more than once.
func (sn *Snapshot) Release() {
	sn.once.Do(func() { _ = sn.tx.Rollback() })
}

// Restore replaces the database with a snapshot stream. The stream is written
// to <path>.restore and verified (length, checksum, bbolt consistency, schema)
// before the live file is touched; the swap is an atomic rename. On error the
// current contents are unchanged.
func (s *Store) Restore(r io.Reader) error {
	tmp := s.path + ".restore"
	if err := receiveSnapshot(tmp, r); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore snapshot into %s: %w", s.path, err)
	}
	if err := verifyFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore snapshot into %s: %w", s.path, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		_ = os.Remove(tmp)
		return ErrClosed
	}
	// Commit first, so that a failure below leaves every applied Update in
	// the file it keeps.
	if err := s.commitLocked(true); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if err := s.db.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore snapshot: close %s: %w", s.path, err)
	}
	s.db = nil
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("restore snapshot: rename %s: %w", tmp, err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	s.cache.reset() // describes the old file
	s.cur.reset()
	s.wtx.reqSkip = s.wtx.reqSkip[:0]
	db, err := s.openDB(s.path)
	if err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	s.db = db
	return nil
}

func receiveSnapshot(path string, r io.Reader) (err error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	if !bytes.Equal(hdr[:8], snapshotMagic[:]) {
		return fmt.Errorf("not a limitd snapshot (bad magic %q)", hdr[:8])
	}
	size := binary.BigEndian.Uint64(hdr[8:])
	if size == 0 || size > maxSnapshotSize {
		return fmt.Errorf("snapshot size %d out of range", size)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	h := sha256.New()
	if n, err := io.CopyN(io.MultiWriter(f, h), r, int64(size)); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("truncated snapshot: %d of %d bytes", n, size)
		}
		return fmt.Errorf("copy snapshot to %s: %w", path, err)
	}
	var sum [sha256.Size]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return fmt.Errorf("truncated snapshot: missing checksum: %w", err)
	}
	if !bytes.Equal(sum[:], h.Sum(nil)) {
		return errors.New("snapshot checksum mismatch")
	}
	var extra [1]byte
	if n, _ := io.ReadFull(r, extra[:]); n != 0 {
		return errors.New("unexpected data after snapshot checksum")
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// verifyFile opens a file read-only and checks that it is a consistent bbolt
// file (bbolt's page check) with our schema whose every value matches its
// checksum (scrubTx), so a damaged file is never trusted and a bad snapshot
// never replaces good state. Damage wraps ErrCorrupt; a file that bbolt
// cannot open at all, or that is not ours, is another error.
func verifyFile(path string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var (
		file *os.File
		db   *bolt.DB
	)
	defer func() {
		// bbolt panics on some damaged pages (and a short file faults):
		// report them, and release the file so its lock does not outlive
		// the attempt.
		if r := recover(); r != nil {
			err = fmt.Errorf("verify %s: %w: %v", path, ErrCorrupt, r)
			if db == nil && file != nil {
				_ = file.Close()
			}
		}
		if db != nil {
			if cerr := db.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		ReadOnly: true, Timeout: time.Second,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	if err != nil {
		db = nil
		return fmt.Errorf("open %s: %w", path, err)
	}
	return db.View(func(tx *bolt.Tx) error {
		// A file cut short faults (SIGBUS) where bbolt reads past its end,
		// and bbolt's check reads on a goroutine of its own, where that
		// cannot be recovered: compare the size first.
		fi, err := file.Stat()
		if err != nil {
			return fmt.Errorf("verify %s: %w", path, err)
		}
		if fi.Size() < tx.Size() {
			return fmt.Errorf("verify %s: %w: the file is %d bytes, its pages reach %d (truncated)", path, ErrCorrupt, fi.Size(), tx.Size())
		}
		// The scrub first: it walks every page the buckets reach on this
		// goroutine, where a damaged page id that points past the map
		// faults into a recovered panic; bbolt's check would follow the
		// same id on its own goroutine and kill the process.
		if err := scrubTx(tx); err != nil {
			return fmt.Errorf("verify %s: %w", path, err)
		}
		if err := checkTx(tx); err != nil {
			return fmt.Errorf("verify %s: %w", path, err)
		}
		return nil
	})
}

// checkTx runs bbolt's consistency check: every page reachable or free, keys
// ordered, page types right.
func checkTx(tx *bolt.Tx) error {
	// Read the whole channel so the checker goroutine finishes.
	var first error
	for err := range tx.Check() {
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, first)
	}
	return nil
}
