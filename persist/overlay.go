package persist

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The write overlay: with Options.Background the writer never writes bbolt.
// Every Put and Delete of an Update goes into the current generation, an
// in-memory layer per bucket; reads go through the current generation, then
// the frozen one (being committed), then the file as of the last finished
// commit, read through a read transaction opened for each Update. A commit
// freezes the current generation and writes it to bbolt on a goroutine of its
// own while later Updates fill a new one; the frozen generation is dropped
// when its commit has finished. frozen ⊕ file is the same view whether the
// read transaction saw the file before or after that commit, because the
// frozen generation holds every change the commit makes (puts and deletes):
// so what the writer reads, the expiry sweep included, is a function of the
// applied Updates alone, never of when a commit finished.

// Layer indexes of the buckets an Update may write.
const (
	ovState = iota
	ovStateExp
	ovRequests
	ovRequestExp
	ovPolicies
	ovNodes
	ovBuckets
)

// ovNames are the bbolt buckets of the layers, in the order a commit writes
// them.
var ovNames = [ovBuckets][]byte{bucketState, bucketStateExp, bucketRequests, bucketRequestExp, bucketPolicies, bucketNodes}

// ovVal is a layer's value for a key: a value, or a deletion of whatever the
// layers below hold.
type ovVal struct {
	v   []byte
	del bool
}

// ovBucket is one bucket's changes in one generation. Keys and values live in
// the generation's arena until the generation is recycled.
type ovBucket struct {
	m map[string]ovVal
	// keys in order, for cursors: keys holds the sorted part, tail the keys
	// added since out of order (merged on the next cursor use).
	keys  []string
	tail  []string
	spare []string // the buffer the next merge fills
}

func (b *ovBucket) get(k []byte) (ovVal, bool) {
	v, ok := b.m[string(k)]
	return v, ok
}

// set records k (arena-backed) → v.
func (b *ovBucket) set(k []byte, v ovVal) {
	if b.m == nil {
		b.m = make(map[string]ovVal)
	}
	s := unsafe.String(unsafe.SliceData(k), len(k))
	if _, ok := b.m[string(k)]; ok {
		b.m[s] = v // the key, too, is arena memory (no copy)
		return
	}
	b.m[s] = v
	if len(b.tail) == 0 && (len(b.keys) == 0 || s > b.keys[len(b.keys)-1]) {
		b.keys = append(b.keys, s)
	} else {
		b.tail = append(b.tail, s)
	}
}

// sorted returns every key of the layer in order. A few keys out of order
// (a deletion at the front of an expiry index) are inserted in place; many
// (a state flush) are sorted and merged into the spare buffer.
func (b *ovBucket) sorted() []string {
	switch {
	case len(b.tail) == 0:
	case len(b.tail) <= 8:
		for _, k := range b.tail {
			i := sort.SearchStrings(b.keys, k)
			b.keys = append(b.keys, "")
			copy(b.keys[i+1:], b.keys[i:])
			b.keys[i] = k
		}
		clear(b.tail)
		b.tail = b.tail[:0]
	default:
		slices.Sort(b.tail)
		merged := b.spare[:0]
		i, j := 0, 0
		for i < len(b.keys) && j < len(b.tail) {
			if b.keys[i] < b.tail[j] {
				merged = append(merged, b.keys[i])
				i++
			} else {
				merged = append(merged, b.tail[j])
				j++
			}
		}
		merged = append(merged, b.keys[i:]...)
		merged = append(merged, b.tail[j:]...)
		clear(b.keys)
		b.keys, b.spare = merged, b.keys[:0]
		clear(b.tail)
		b.tail = b.tail[:0]
	}
	return b.keys
}

func (b *ovBucket) reset() {
	clear(b.m)
	clear(b.keys)
	b.keys = b.keys[:0]
	clear(b.tail)
	b.tail = b.tail[:0]
}

// generation is the changes of the Updates since one commit, and the meta
// record they bring the store to.
type generation struct {
	b      [ovBuckets]ovBucket
	arena  arena
	meta   Meta
	groups groupCounts // the key groups' counts as of meta (groups.go)
}

func (g *generation) reset() {
	for i := range g.b {
		g.b[i].reset()
	}
	g.arena.reset()
	g.meta = Meta{}
}

// writeTo writes the generation into a bbolt write transaction, each bucket
// in key order (bbolt fills pages best that way), and its meta record.
func (g *generation) writeTo(tx *bolt.Tx) error {
	var keys []string
	for i := range g.b {
		b := tx.Bucket(ovNames[i])
		if b == nil {
			return fmt.Errorf("%w: missing bucket %q", ErrCorrupt, ovNames[i])
		}
		keys = keys[:0]
		for k := range g.b[i].m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := g.b[i].m[k]
			kb := unsafe.Slice(unsafe.StringData(k), len(k))
			var err error
			if v.del {
				err = b.Delete(kb)
			} else {
				err = b.Put(kb, v.v)
			}
			if err != nil {
				return fmt.Errorf("write %s key %q: %w", ovNames[i], k, err)
			}
		}
	}
	return tx.Bucket(bucketMeta).Put(keyMeta, encodeMeta(g.meta))
}

// lbucket is a bucket as the writer sees it: its layers over the file. In a
// read-only transaction it has no layers.
type lbucket struct {
	file   *bolt.Bucket
	id     int
	layers []*ovBucket // top first; nil: read-only
	arena  *arena      // the current generation's (writes)
}

// Get returns the value of k: from the topmost layer that has k, else the
// file.
func (b *lbucket) Get(k []byte) []byte {
	for _, l := range b.layers {
		if v, ok := l.get(k); ok {
			if v.del {
				return nil
			}
			return v.v
		}
	}
	return b.file.Get(k)
}

// Put records k → v in the current generation. k and v must stay valid
// until the generation is recycled (allocated from the Tx's arena).
func (b *lbucket) Put(k, v []byte) error {
	if b.layers == nil {
		return b.file.Put(k, v)
	}
	switch {
	case len(k) == 0:
		return berrors.ErrKeyRequired
	case len(k) > bolt.MaxKeySize:
		return berrors.ErrKeyTooLarge
	case len(v) > bolt.MaxValueSize:
		return berrors.ErrValueTooLarge
	}
	b.layers[0].set(k, ovVal{v: v})
	return nil
}

// Delete records the deletion of k in the current generation (k is copied).
func (b *lbucket) Delete(k []byte) error {
	if b.layers == nil {
		return b.file.Delete(k)
	}
	if len(k) == 0 {
		return nil
	}
	c := b.arena.alloc(len(k))
	copy(c, k)
	b.layers[0].set(c, ovVal{del: true})
	return nil
}

// ForEach calls fn for every key in order, through the layers.
func (b *lbucket) ForEach(fn func(k, v []byte) error) error {
	if b.layers == nil {
		return b.file.ForEach(fn)
	}
	var c lcursor
	c.init(b)
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// lcursor merges the layers of an lbucket with a cursor on the file. Like a
// bbolt cursor it must be positioned (First, Seek) again after a write.
type lcursor struct {
	b    *lbucket
	fc   *bolt.Cursor
	fk   []byte
	fv   []byte
	keys [2][]string
	idx  [2]int
	cur  []byte // the key last returned
}

func (c *lcursor) init(b *lbucket) {
	c.b, c.fc = b, b.file.Cursor()
}

func (c *lcursor) load() {
	for i, l := range c.b.layers {
		c.keys[i] = l.sorted()
	}
}

// First moves to the first key and returns it and its value.
func (c *lcursor) First() ([]byte, []byte) {
	if c.b.layers == nil {
		return c.fc.First()
	}
	c.load()
	for i := range c.b.layers {
		c.idx[i] = 0
	}
	c.fk, c.fv = c.fc.First()
	return c.settle()
}

// Seek moves to the first key ≥ s.
func (c *lcursor) Seek(s []byte) ([]byte, []byte) {
	if c.b.layers == nil {
		return c.fc.Seek(s)
	}
	c.load()
	for i := range c.b.layers {
		c.idx[i] = sort.SearchStrings(c.keys[i], string(s))
	}
	c.fk, c.fv = c.fc.Seek(s)
	return c.settle()
}

// Next moves past the key last returned.
func (c *lcursor) Next() ([]byte, []byte) {
	if c.b.layers == nil {
		return c.fc.Next()
	}
	c.skip(c.cur)
	return c.settle()
}

// skip advances every source positioned at k.
func (c *lcursor) skip(k []byte) {
	for i := range c.b.layers {
		if c.idx[i] < len(c.keys[i]) && c.keys[i][c.idx[i]] == string(k) {
			c.idx[i]++
		}
	}
	if c.fk != nil && bytes.Equal(c.fk, k) {
		c.fk, c.fv = c.fc.Next()
	}
}

// settle returns the smallest key any source is positioned at whose topmost
// value is not a deletion, skipping deleted keys.
func (c *lcursor) settle() ([]byte, []byte) {
	for {
		var min []byte
		for i := range c.b.layers {
			if c.idx[i] < len(c.keys[i]) {
				k := c.keys[i][c.idx[i]]
				if min == nil || k < string(min) {
					min = unsafe.Slice(unsafe.StringData(k), len(k))
				}
			}
		}
		if c.fk != nil && (min == nil || bytes.Compare(c.fk, min) < 0) {
			min = c.fk
		}
		if min == nil {
			c.cur = nil
			return nil, nil
		}
		c.cur = min
		inLayer := false
		for _, l := range c.b.layers {
			if ov, ok := l.m[string(min)]; ok {
				if !ov.del {
					return min, ov.v
				}
				inLayer = true // deleted: skip the key in every source
				break
			}
		}
		if !inLayer {
			return min, c.fv
		}
		c.skip(min)
	}
}
