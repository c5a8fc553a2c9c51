package persist

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// DefaultCacheKeys bounds the state cache when Options.CacheKeys is 0: about
// 120 bytes of heap per key (a 12-byte key with a sliding-window state,
// measured), so some 30 MiB.
const DefaultCacheKeys = 250_000

// The state cache (write-back, in front of the state and state_expiry
// buckets).
//
// The writer's transaction reads a key's state from the file once and then
// keeps it, with its expiry and index position, in an entry; PutState and
// DeleteState change only the entry and mark it dirty. Commit flushes the
// dirty entries, sorted by key, into the generation it commits, together
// with the applied index (flush): a key written a hundred times between two
// commits is written to bbolt once, and a key created and deleted between two
// commits never reaches it. Only clean entries are evicted, after a commit.
//
// The contents are a pure function of the applied entries whatever the
// cache holds or when it flushes, because the expiry sweep works on the
// logical expiry index: the file's index as of the last flush, minus the
// entries of keys whose position has changed since (stale; skipped, not
// counted), plus those new positions, which wait in a heap ordered like the
// file's index (time, then key). So every replica removes and re-files the
// same keys at the same log position, and the file after a flush is what the
// same entries applied without a cache would have written.
type stateCache struct {
	max int
	// The entries live in fixed-size chunks, found through m by slot, so
	// pointers to them stay valid and the garbage collector sees few
	// objects: per key one key string and, for states over smallState
	// bytes only, one buffer. (A map of *entry with a []byte each cost as
	// much GC marking as the bbolt writes it saved.)
	m      map[string]int32
	chunks [][]entry
	free   []int32
	used   int32    // slots handed out of chunks so far
	dirty  []*entry // changed since the last flush, each once

	heap     []heapItem // logical index positions not (yet) in the file
	sweepPos []byte     // the file index key the sweep last passed, since the last flush
	orphans  [][]byte   // file index entries pointing nowhere, deleted at flush
}

// smallState is the state size kept inside the entry (every algorithm's
// state but a sliding log of more than a few entries).
const smallState = 32

// chunkEntries is the number of entries per chunk.
const chunkEntries = 4096

// entry is one key's state as applied so far.
type entry struct {
	key     string
	slot    int32
	n       int32            // len of the state in small, or -1: in big
	small   [smallState]byte // the state when it fits
	big     []byte
	expiry  int64
	indexed int64 // the logical index position (a lower bound of expiry)
	found   bool
	dirty   bool
	// moved: the logical index entry is in the heap (the key was created,
	// its position moved or re-filed since the last flush), so the file's
	// entry for it, if any, is stale.
	moved bool

	storedFound   bool // what the file holds as of the last flush
	storedIndexed int64
}

type heapItem struct {
	at  int64
	key string
}

func newStateCache(max int) *stateCache {
	if max <= 0 {
		max = DefaultCacheKeys
	}
	return &stateCache{max: max, m: make(map[string]int32)}
}

func (c *stateCache) at(slot int32) *entry {
	return &c.chunks[slot/chunkEntries][slot%chunkEntries]
}

// add puts a new entry for key in a free slot.
func (c *stateCache) add(key string) *entry {
	var slot int32
	if n := len(c.free); n > 0 {
		slot, c.free = c.free[n-1], c.free[:n-1]
	} else {
		if int(c.used) == len(c.chunks)*chunkEntries {
			c.chunks = append(c.chunks, make([]entry, chunkEntries))
		}
		slot = c.used
		c.used++
	}
	e := c.at(slot)
	*e = entry{key: key, slot: slot}
	c.m[key] = slot
	return e
}

// remove forgets a clean entry.
func (c *stateCache) remove(e *entry) {
	delete(c.m, e.key)
	c.free = append(c.free, e.slot)
	*e = entry{}
}

func (e *entry) bytes() []byte {
	if e.n >= 0 {
		return e.small[:e.n:e.n]
	}
	return e.big
}

func (e *entry) setBytes(b []byte) {
	if len(b) <= smallState {
		copy(e.small[:], b) // b may be e.bytes(): same position
		e.n, e.big = int32(len(b)), nil
		return
	}
	e.big = append(e.big[:0], b...)
	e.n = -1
}

// reset forgets everything: after a rollback, a restore or a failed commit
// the file is the only truth.
func (c *stateCache) reset() {
	clear(c.m)
	c.chunks, c.free, c.used = nil, nil, 0
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	c.heap = c.heap[:0]
	c.sweepPos = c.sweepPos[:0]
	c.orphans = c.orphans[:0]
}

// Len is the number of cached keys (tests and metrics).
func (c *stateCache) Len() int { return len(c.m) }

func (c *stateCache) markDirty(e *entry) {
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
}

func (c *stateCache) push(at int64, key string) {
	c.heap = append(c.heap, heapItem{at, key})
	i := len(c.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !c.heap[i].less(c.heap[p]) {
			break
		}
		c.heap[i], c.heap[p] = c.heap[p], c.heap[i]
		i = p
	}
}

func (c *stateCache) pop() {
	n := len(c.heap) - 1
	c.heap[0] = c.heap[n]
	c.heap[n] = heapItem{}
	c.heap = c.heap[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && c.heap[l].less(c.heap[m]) {
			m = l
		}
		if r < n && c.heap[r].less(c.heap[m]) {
			m = r
		}
		if m == i {
			return
		}
		c.heap[i], c.heap[m] = c.heap[m], c.heap[i]
		i = m
	}
}

func (h heapItem) less(o heapItem) bool {
	return h.at < o.at || h.at == o.at && h.key < o.key
}

// top drops heap items that no longer describe their key's logical index
// entry and returns the first valid one.
func (c *stateCache) top() (heapItem, *entry, bool) {
	for len(c.heap) > 0 {
		h := c.heap[0]
		if slot, ok := c.m[h.key]; ok {
			if e := c.at(slot); e.moved && e.found && e.indexed == h.at {
				return h, e, true
			}
		}
		c.pop()
	}
	return heapItem{}, nil, false
}

// entry returns key's cache entry, reading it from the file on a miss.
func (t *Tx) entry(key []byte) (*entry, error) {
	c := t.cache
	if slot, ok := c.m[string(key)]; ok {
		return c.at(slot), nil
	}
	st, err := t.decodeState(key, t.state.Get(key))
	if err != nil {
		return nil, err
	}
	e := c.add(string(key))
	e.found, e.expiry, e.indexed = st.Found, st.Expiry, st.indexed
	e.storedFound, e.storedIndexed = st.Found, st.indexed
	e.setBytes(st.Data)
	return e, nil
}

func (e *entry) state() State {
	if !e.found {
		return State{}
	}
	return State{Data: e.bytes(), Expiry: e.expiry, Found: true, indexed: e.indexed}
}

// putEntry is PutState on the cache.
func (t *Tx) putEntry(key, data []byte, expiry int64) error {
	e, err := t.entry(key)
	if err != nil {
		return err
	}
	indexed := expiry
	if e.found && e.indexed <= expiry {
		indexed = e.indexed // still a lower bound: the index entry stays
	}
	if !e.found || indexed != e.indexed {
		e.moved = true
		t.cache.push(indexed, e.key)
	}
	if !e.found {
		t.meta.Keys++
		t.grouped(key, 1)
	}
	e.setBytes(data)
	e.expiry, e.indexed, e.found = expiry, indexed, true
	t.cache.markDirty(e)
	return nil
}

// deleteEntry is DeleteState on the cache.
func (t *Tx) deleteEntry(key []byte) error {
	e, err := t.entry(key)
	if err != nil || !e.found {
		return err
	}
	e.found = false
	e.setBytes(nil)
	t.meta.Keys--
	t.grouped(key, -1)
	t.cache.markDirty(e)
	return nil
}

// due is the next entry of the logical state index.
type due struct {
	at       int64
	e        *entry
	fileIK   []byte // the file's index key when the entry comes from the file
	fromHeap bool
	orphan   bool // a file entry that no key's stored state points to
}

// nextDue finds the first entry of the logical state index, if it is due at
// now, without consuming it (expireDue does). File entries of keys whose
// position moved since the last flush are stale and passed without counting
// (on a replica that flushed they are gone); entries up to sweepPos were
// passed already.
func (t *Tx) nextDue(cur *lcursor, now int64) (due, bool, error) {
	c := t.cache
	for {
		var fk, fv []byte
		if len(c.sweepPos) == 0 {
			fk, fv = cur.First()
		} else if fk, fv = cur.Seek(c.sweepPos); fk != nil && bytes.Equal(fk, c.sweepPos) {
			fk, fv = cur.Next()
		}
		if fk != nil {
			if _, err := t.store.unseal(bucketStateExp, fk, fv); err != nil {
				return due{}, false, err
			}
			if len(fk) <= 8 {
				return due{}, false, t.store.corrupt(bucketStateExp, fk)
			}
		}
		h, he, hok := c.top()
		fileFirst := fk != nil && (!hok || indexTime(fk) < h.at ||
			indexTime(fk) == h.at && bytes.Compare(fk[8:], []byte(h.key)) < 0)
		switch {
		case fileFirst:
			at := indexTime(fk)
			if at > now {
				return due{}, false, nil
			}
			ik := append(t.dueKey[:0], fk...)
			t.dueKey = ik
			e, err := t.entry(ik[8:])
			if err != nil {
				return due{}, false, err
			}
			switch {
			case !e.moved && e.found && e.indexed == at:
				return due{at: at, e: e, fileIK: ik}, true, nil
			case e.storedFound && e.storedIndexed == at:
				c.sweepPos = append(c.sweepPos[:0], ik...) // stale: the key moved since the last flush
			default:
				return due{at: at, e: e, fileIK: ik, orphan: true}, true, nil
			}
		case hok:
			if h.at > now {
				return due{}, false, nil
			}
			return due{at: h.at, e: he, fromHeap: true}, true, nil
		default:
			return due{}, false, nil
		}
	}
}

// expireDue consumes d: it removes d's key if it has expired by now (and
// keep, when set, does not extend it), or re-files it at its current expiry
// (the index holds lower bounds). It returns the number of keys removed.
func (t *Tx) expireDue(d due, now int64, keep KeepFunc) int {
	c := t.cache
	if d.fromHeap {
		c.pop()
	} else {
		c.sweepPos = append(c.sweepPos[:0], d.fileIK...)
	}
	if d.orphan {
		c.orphans = append(c.orphans, bytes.Clone(d.fileIK))
		return 0
	}
	e := d.e
	c.markDirty(e)
	if e.expiry <= now && keep != nil && e.found {
		if exp := keep([]byte(e.key), e.bytes(), now); exp > now {
			e.expiry = exp // written with the state at the next flush (markDirty above)
		}
	}
	if e.expiry <= now {
		e.found = false
		e.setBytes(nil)
		t.meta.Keys--
		t.grouped([]byte(e.key), -1)
		return 1
	}
	e.indexed, e.moved = e.expiry, true
	c.push(e.indexed, e.key)
	return 0
}

// flush writes the dirty entries, sorted by key, and the index changes into
// the transaction about to commit.
func (t *Tx) flush() error {
	c := t.cache
	for _, ik := range c.orphans {
		if err := t.stateExp.Delete(ik); err != nil {
			return fmt.Errorf("delete expiry entry: %w", err)
		}
	}
	slices.SortFunc(c.dirty, func(a, b *entry) int { return strings.Compare(a.key, b.key) })
	var written uint64
	defer func() { t.store.flushedKeys.Add(written) }()
	for _, e := range c.dirty {
		key := t.arena.alloc(len(e.key)) // valid until the commit, as Put needs
		copy(key, e.key)
		relocate := e.storedFound && (!e.found || e.storedIndexed != e.indexed)
		if relocate {
			if err := t.stateExp.Delete(t.indexKey(e.storedIndexed, key)); err != nil {
				return fmt.Errorf("delete expiry entry: %w", err)
			}
		}
		switch {
		case e.found:
			data := e.bytes()
			v := t.arena.alloc(stateHeader + len(data) + sumLen)
			binary.BigEndian.PutUint64(v, uint64(e.expiry))
			binary.BigEndian.PutUint64(v[8:], uint64(e.indexed))
			copy(v[stateHeader:], data)
			if err := t.state.Put(key, seal(key, v)); err != nil {
				return fmt.Errorf("put state: %w", err)
			}
			written++
			if !e.storedFound || e.storedIndexed != e.indexed {
				if err := t.putIndex(t.stateExp, e.indexed, key); err != nil {
					return fmt.Errorf("put expiry entry: %w", err)
				}
			}
		case e.storedFound:
			if err := t.state.Delete(key); err != nil {
				return fmt.Errorf("delete state: %w", err)
			}
			written++
		}
		e.storedFound, e.storedIndexed = e.found, e.indexed
		e.dirty, e.moved = false, false
		if !e.found {
			// Keep only keys that exist: a key that expired is rarely
			// checked again soon, and an absent key costs one lookup.
			c.remove(e)
		}
	}
	return nil
}

// flushed is called after a successful commit: the file holds everything,
// so the sweep bookkeeping starts over, and clean entries beyond the bound
// are evicted.
func (c *stateCache) flushed() {
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	c.heap = c.heap[:0]
	c.sweepPos = c.sweepPos[:0]
	c.orphans = c.orphans[:0]
	if len(c.m) <= c.max {
		return
	}
	// Evict down to 7/8 of the bound so eviction runs once per many flushes.
	// Which keys go does not matter for what is decided, only for speed.
	target := c.max - c.max/8
	for _, slot := range c.m {
		if len(c.m) <= target {
			break
		}
		c.remove(c.at(slot))
	}
}

// nextDueHint is the earliest position of the logical state index (a lower
// bound; for NextExpiry).
func (t *Tx) nextDueHint() (int64, bool) {
	c := t.cache
	var (
		next int64
		ok   bool
	)
	cur, rcur := t.cursors()
	var k []byte
	if len(c.sweepPos) == 0 {
		k, _ = cur.First()
	} else if k, _ = cur.Seek(c.sweepPos); k != nil && bytes.Equal(k, c.sweepPos) {
		k, _ = cur.Next()
	}
	if len(k) >= 8 {
		next, ok = indexTime(k), true
	}
	if h, _, hok := c.top(); hok && (!ok || h.at < next) {
		next, ok = h.at, true
	}
	if k, _ := t.firstRequestDue(rcur); len(k) >= 8 {
		if at := indexTime(k); !ok || at < next {
			next, ok = at, true
		}
	}
	return next, ok
}
