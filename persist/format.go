package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout version written in the meta bucket: 2, the
// checksummed layout, is the first released format (docs/COMPATIBILITY.md;
// 1, without checksums, was never released). A file of any other version is
// refused rather than misread.
const SchemaVersion = 2

// metaLen is the encoded size of Meta: applied, time, keys, requests.
const metaLen = 32

// errForeign: a bbolt file that is not a limitd state machine file. It is
// refused, never set aside: it may be the operator's mistake, not damage.
var errForeign = errors.New("not a limitd state machine file")

func encodeSchema() []byte {
	v := binary.AppendUvarint(nil, SchemaVersion)
	return seal(keySchema, append(v, make([]byte, sumLen)...))
}

// readSchema returns the file's format version, which must carry a valid
// checksum.
func readSchema(v []byte) (uint64, error) {
	ver, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, fmt.Errorf("%w: unreadable schema version", ErrCorrupt)
	}
	if n == len(v) {
		return 0, fmt.Errorf("schema version %d without a checksum, this binary reads %d", ver, SchemaVersion)
	}
	if _, ok := unsealed(keySchema, v); !ok || len(v) != n+sumLen {
		return 0, fmt.Errorf("%w: checksum mismatch in the schema record", ErrCorrupt)
	}
	if ver != SchemaVersion {
		return 0, fmt.Errorf("schema version %d, this binary reads %d", ver, SchemaVersion)
	}
	return ver, nil
}

func encodeMeta(m Meta) []byte {
	b := make([]byte, metaLen+sumLen)
	binary.BigEndian.PutUint64(b[0:], m.AppliedIndex)
	binary.BigEndian.PutUint64(b[8:], uint64(m.LastTime))
	binary.BigEndian.PutUint64(b[16:], m.Keys)
	binary.BigEndian.PutUint64(b[24:], m.RequestIDs)
	return seal(keyMeta, b)
}

func decodeMeta(b []byte) (Meta, error) {
	p, ok := unsealed(keyMeta, b)
	if !ok {
		return Meta{}, fmt.Errorf("%w: checksum mismatch in the meta record", ErrCorrupt)
	}
	if len(p) != metaLen {
		return Meta{}, fmt.Errorf("%w: meta record of %d bytes", ErrCorrupt, len(p))
	}
	return Meta{
		AppliedIndex: binary.BigEndian.Uint64(p[0:]),
		LastTime:     int64(binary.BigEndian.Uint64(p[8:])),
		Keys:         binary.BigEndian.Uint64(p[16:]),
		RequestIDs:   binary.BigEndian.Uint64(p[24:]),
	}, nil
}

// scrubTx verifies every record of a file: the schema and meta
// records and every value's checksum, with the minimum sizes the readers
// rely on. O(file); run at Open and on every received snapshot.
func scrubTx(tx *bolt.Tx) error {
	mb := tx.Bucket(bucketMeta)
	if mb == nil {
		return errForeign
	}
	if _, err := readSchema(mb.Get(keySchema)); err != nil {
		return err
	}
	if _, err := decodeMeta(mb.Get(keyMeta)); err != nil {
		return err
	}
	minLen := map[string]int{string(bucketState): stateHeader, string(bucketRequests): 8}
	for _, name := range dataBuckets {
		b := tx.Bucket(name)
		if b == nil {
			return fmt.Errorf("%w: missing bucket %q", ErrCorrupt, name)
		}
		min := minLen[string(name)]
		bounds, err := newInlineBounds(tx, b)
		if err != nil {
			return fmt.Errorf("%w: bucket %q: %v", ErrCorrupt, name, err)
		}
		var prev []byte
		if err := b.ForEach(func(k, v []byte) error {
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				return fmt.Errorf("%w: keys out of order in bucket %q at key %q", ErrCorrupt, name, k)
			}
			prev = k
			bounds.add(k)
			bounds.add(v)
			p, ok := unsealed(k, v)
			if !ok || len(p) < min {
				return fmt.Errorf("%w: checksum mismatch in bucket %q at key %q", ErrCorrupt, name, k)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := bounds.check(); err != nil {
			return fmt.Errorf("%w: bucket %q: %v", ErrCorrupt, name, err)
		}
	}
	return nil
}

// inlineBounds checks that the records of a bucket stored inline (in its
// parent's page, as bbolt keeps buckets under a quarter page) lie within
// that inline page. bbolt does not bounds-check a leaf element's offset, and
// its consistency check skips inline buckets, so a flipped bit in an inline
// element's offset makes readers take a key and value from elsewhere: in a
// read-only transaction from the mapped file (perhaps an older copy of the
// same record, which passes its checksum), in a writable one from a heap copy
// of the bucket — the scrub passed and the first write failed. The records
// of one inline bucket span at most its in-use bytes.
type inlineBounds struct {
	inline bool
	inuse  uintptr
	lo, hi uintptr
}

func newInlineBounds(tx *bolt.Tx, b *bolt.Bucket) (inlineBounds, error) {
	if b.RootPage() != 0 { // pages of its own, which bbolt's check covers
		return inlineBounds{}, nil
	}
	st := b.Stats()
	if max := tx.DB().Info().PageSize / 4; st.InlineBucketInuse > max {
		return inlineBounds{}, fmt.Errorf("inline bucket of %d bytes (at most %d)", st.InlineBucketInuse, max)
	}
	return inlineBounds{inline: true, inuse: uintptr(st.InlineBucketInuse)}, nil
}

func (ib *inlineBounds) add(b []byte) {
	if !ib.inline || len(b) == 0 {
		return
	}
	// Addresses only compared, never dereferenced: the slices stay valid
	// for the transaction.
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	if ib.lo == 0 || lo < ib.lo {
		ib.lo = lo
	}
	ib.hi = max(ib.hi, hi)
}

func (ib *inlineBounds) check() error {
	if ib.inline && ib.hi-ib.lo > ib.inuse {
		return fmt.Errorf("records span %d bytes, outside the bucket's inline page of %d", ib.hi-ib.lo, ib.inuse)
	}
	return nil
}
