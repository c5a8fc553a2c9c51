package persist

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
)

// Digest is a hex SHA-256 over the replicated part of the meta record
// (LastTime, which changes later decisions, and the key and request-id
// counts) and every data bucket, in a fixed order. The applied index is left
// out: it is reported beside the digest and legitimately differs between
// replicas that applied the same commands through different log layouts.
// Replicas that applied the same commands have equal digests, whatever their
// history of restarts and snapshots.
func (s *Store) Digest() (string, error) { return s.digest(true) }

// DataDigest is Digest without the meta record: the data buckets only. It is
// for comparing replicas stopped at different applied indexes, where later
// entries may have advanced only the clock (an expiry sweep that found
// nothing, a peek); replicas at the same index compare with Digest.
func (s *Store) DataDigest() (string, error) { return s.digest(false) }

func (s *Store) digest(withMeta bool) (string, error) {
	h := sha256.New()
	err := s.View(func(t *Tx) error {
		if withMeta {
			writeField(h, bucketMeta)
			var m [24]byte
			binary.BigEndian.PutUint64(m[0:], uint64(t.meta.LastTime))
			binary.BigEndian.PutUint64(m[8:], t.meta.Keys)
			binary.BigEndian.PutUint64(m[16:], t.meta.RequestIDs)
			writeField(h, m[:])
		}
		for _, name := range dataBuckets {
			writeField(h, name)
			err := t.tx.Bucket(name).ForEach(func(k, v []byte) error {
				// A digest of damaged data would be a wrong answer.
				if _, err := s.unseal(name, k, v); err != nil {
					return err
				}
				writeField(h, k)
				writeField(h, v)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", s.path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeField length-prefixes b so that different splits into keys and values
// never hash alike.
func writeField(h hash.Hash, b []byte) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
	h.Write(b)
}

// Usage is what the data occupies inside the file. The file itself never
// shrinks (bbolt reuses freed pages), so LiveBytes, not FileBytes, is what
// follows the number of active keys.
type Usage struct {
	FileBytes int64 // size of the file up to its last page in use (the high-water mark)
	LiveBytes int64 // bytes of B+tree pages in use by all buckets
	Pages     int   // pages in use by all buckets (branch, leaf and overflow)
	FreePages int   // pages free for reuse
}

// Usage walks every bucket: O(size of the data), for tests and diagnostics.
func (s *Store) Usage() (Usage, error) {
	var u Usage
	err := s.View(func(t *Tx) error {
		u.FileBytes = t.tx.Size()
		// The root bucket's stats include every bucket, inline or not.
		st := t.tx.Cursor().Bucket().Stats()
		u.LiveBytes = int64(st.BranchInuse + st.LeafInuse)
		u.Pages = st.BranchPageN + st.BranchOverflowN + st.LeafPageN + st.LeafOverflowN
		return nil
	})
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %s: %w", s.path, err)
	}
	s.mu.RLock()
	if s.db != nil {
		u.FreePages = s.db.Stats().FreePageN
	}
	s.mu.RUnlock()
	return u, nil
}

// FileSize is the size of the database file in bytes.
func (s *Store) FileSize() int64 {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// CountStates counts the entries of the state bucket as of the last commit
// (key states and lease records, what Meta.Keys counts): O(keys), for tests
// and diagnostics. After a commit it equals Meta().Keys.
func (s *Store) CountStates() (int, error) {
	n := 0
	err := s.View(func(t *Tx) error {
		return t.state.ForEach(func(k, v []byte) error {
			n++
			return nil
		})
	})
	return n, err
}
