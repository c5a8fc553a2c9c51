package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout version written in the meta bucket. Format 1
// had no checksums; a format 1 file (or snapshot) is upgraded in place when
// it is opened (upgradeV1). A file of any other version is refused rather
// than misread.
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

// readSchema returns the file's format version. A version without a
// checksum is format 1 (or a foreign layout); a format 2 record must carry a
// valid one.
func readSchema(v []byte) (uint64, error) {
	ver, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, fmt.Errorf("%w: unreadable schema version", ErrCorrupt)
	}
	if n == len(v) {
		if ver == 1 {
			return 1, nil
		}
		return 0, fmt.Errorf("schema version %d, this binary reads 1 and %d", ver, SchemaVersion)
	}
	if _, ok := unsealed(keySchema, v); !ok || len(v) != n+sumLen {
		return 0, fmt.Errorf("%w: checksum mismatch in the schema record", ErrCorrupt)
	}
	if ver != SchemaVersion {
		return 0, fmt.Errorf("schema version %d, this binary reads 1 and %d", ver, SchemaVersion)
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
	return decodeMetaV1(p)
}

// decodeMetaV1 reads the meta record without its checksum (format 1).
func decodeMetaV1(b []byte) (Meta, error) {
	if len(b) != metaLen {
		return Meta{}, fmt.Errorf("%w: meta record of %d bytes", ErrCorrupt, len(b))
	}
	return Meta{
		AppliedIndex: binary.BigEndian.Uint64(b[0:]),
		LastTime:     int64(binary.BigEndian.Uint64(b[8:])),
		Keys:         binary.BigEndian.Uint64(b[16:]),
		RequestIDs:   binary.BigEndian.Uint64(b[24:]),
	}, nil
}

// upgradeV1 turns a format 1 file into format 2 in one write transaction:
// every value gets its checksum. It trusts the values as they are, as format
// 1 did; from then on they are verified.
func upgradeV1(tx *bolt.Tx) error {
	mb := tx.Bucket(bucketMeta)
	m, err := decodeMetaV1(mb.Get(keyMeta))
	if err != nil {
		return err
	}
	for _, name := range dataBuckets {
		b := tx.Bucket(name)
		if b == nil {
			return fmt.Errorf("%w: missing bucket %q", ErrCorrupt, name)
		}
		if err := resealBucket(b); err != nil {
			return fmt.Errorf("upgrade bucket %q: %w", name, err)
		}
	}
	if err := mb.Put(keyMeta, encodeMeta(m)); err != nil {
		return err
	}
	return mb.Put(keySchema, encodeSchema())
}

// resealBucket appends the checksum to every value, a batch at a time:
// bbolt cursors must be repositioned after writes.
func resealBucket(b *bolt.Bucket) error {
	const batch = 4096
	type kv struct{ k, v []byte }
	var pending []kv
	c := b.Cursor()
	k, v := c.First()
	for k != nil {
		pending = pending[:0]
		for ; k != nil && len(pending) < batch; k, v = c.Next() {
			sv := make([]byte, len(v)+sumLen)
			copy(sv, v)
			pending = append(pending, kv{bytes.Clone(k), seal(k, sv)})
		}
		var next []byte
		if k != nil {
			next = bytes.Clone(k)
		}
		for _, p := range pending {
			if err := b.Put(p.k, p.v); err != nil {
				return err
			}
		}
		if next == nil {
			break
		}
		k, v = c.Seek(next)
	}
	return nil
}

// scrubTx verifies every record of a format 2 file: the schema and meta
// records and every value's checksum, with the minimum sizes the readers
// rely on. O(file); run at Open and on every received snapshot.
func scrubTx(tx *bolt.Tx) error {
	mb := tx.Bucket(bucketMeta)
	if mb == nil {
		return errForeign
	}
	ver, err := readSchema(mb.Get(keySchema))
	if err != nil {
		return err
	}
	if ver == 1 {
		_, err := decodeMetaV1(mb.Get(keyMeta))
		return err // no checksums to verify; Open upgrades it
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
