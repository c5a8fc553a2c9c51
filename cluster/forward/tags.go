package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Unit tags: which checks of an entry are whose. The leader puts the units
// a follower forwarded on its check stream in the check entry's
// raft.Log.Extensions, each named by the stream's nonce and the frame's id
// and placed by its first op and op count, so that the follower can answer
// them from its own log (cluster's apply-ahead). The state machine never
// reads Extensions.

// Tag names a forwarded unit: the check stream's nonce and the frame's id.
// A zero nonce is no tag.
type Tag struct{ Nonce, ID uint64 }

// TaggedUnit places a tagged unit's ops in an entry.
type TaggedUnit struct {
	Tag    Tag
	Off, N int
}

// tagsVersion is the first byte of a check entry's Extensions.
const tagsVersion byte = 1

// AppendTags encodes units as a check entry's Extensions:
//
//	version ‖ uvarint count ‖ (u64 nonce ‖ uvarint id ‖ uvarint first op ‖ uvarint ops)*
func AppendTags(dst []byte, units []TaggedUnit) []byte {
	dst = append(dst, tagsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(units)))
	for _, u := range units {
		dst = binary.BigEndian.AppendUint64(dst, u.Tag.Nonce)
		dst = binary.AppendUvarint(dst, u.Tag.ID)
		dst = binary.AppendUvarint(dst, uint64(u.Off))
		dst = binary.AppendUvarint(dst, uint64(u.N))
	}
	return dst
}

// ErrBadTags: Extensions that are not tags ForEachTag reads.
var ErrBadTags = errors.New("bad unit tags")

// ForEachTag calls fn for each unit in ext whose ops lie within nres
// results; it stops at the first malformed byte (ErrBadTags).
func ForEachTag(ext []byte, nres int, fn func(t Tag, off, n int)) error {
	if len(ext) == 0 {
		return nil
	}
	if ext[0] != tagsVersion {
		return fmt.Errorf("%w: version %d", ErrBadTags, ext[0])
	}
	b := ext[1:]
	uv := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	count, ok := uv()
	if !ok {
		return fmt.Errorf("%w: no count", ErrBadTags)
	}
	for i := uint64(0); i < count; i++ {
		if len(b) < 8 {
			return fmt.Errorf("%w: truncated unit %d", ErrBadTags, i)
		}
		nonce := binary.BigEndian.Uint64(b)
		b = b[8:]
		id, ok1 := uv()
		off, ok2 := uv()
		n, ok3 := uv()
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("%w: truncated unit %d", ErrBadTags, i)
		}
		if off > uint64(nres) || n > uint64(nres)-off {
			return fmt.Errorf("%w: unit %d has ops %d+%d of %d", ErrBadTags, i, off, n, nres)
		}
		fn(Tag{nonce, id}, int(off), int(n))
	}
	return nil
}
