package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Layout of the buckets (all integers big-endian). Every value ends with
// sum, the CRC-32C of its key and the value before it (checksum.go):
//
//	meta            "schema" → uvarint version ‖ sum; "meta" → applied, time, keys, requests ‖ sum
//	state           storage key → expiry(8) ‖ indexed(8) ‖ algorithm state ‖ sum
//	state_expiry    sortable(indexed) ‖ storage key → sum
//	requests        request id → expiry(8) ‖ encoded result ‖ sum
//	request_expiry  sortable(expiry) ‖ request id → sum
//	policies        name → encoded policy ‖ sum
//	nodes           node id → HTTP address ‖ sum
//
// The state expiry index holds a lower bound, not the exact expiry: a busy key
// whose expiry moves later on every check would otherwise rewrite two index
// entries per check. "indexed" in the value says where the key's index entry
// is; Expire re-files an entry it finds early. An entry is moved eagerly only
// when the expiry becomes earlier than the entry, keeping indexed ≤ expiry.
const stateHeader = 16

// MaxKeySize is the largest key (storage key or request id) the store accepts;
// bbolt's limit minus the 8-byte time prefix of the index entries.
const MaxKeySize = bolt.MaxKeySize - 8

// Tx is a transaction on the store. Values it returns are read-only and valid
// only until the transaction ends. Values passed to Put methods are copied.
type Tx struct {
	store *Store
	tx    *bolt.Tx // the file: a read transaction (the writer's too, see overlay.go)

	metaB                                                  *bolt.Bucket
	state, stateExp, requests, requestExp, policies, nodes *lbucket

	lb  [ovBuckets]lbucket
	lay [ovBuckets][2]*ovBucket // the writer's layers per bucket, top first

	meta    Meta
	arena   *arena // the writer's: the current generation's
	scratch []byte
	dueKey  []byte
	reqSkip []byte // firstRequestDue
	cache   *stateCache

	// Cursors on the expiry indexes, kept for the transaction: a new
	// bbolt cursor allocates its stack on first use.
	stateExpCur, requestExpCur lcursor
	curOK                      bool // the cursors are on this read transaction
}

// begin binds t to the file's transaction btx; the writer's layers stay as
// bind set them.
func (t *Tx) begin(btx *bolt.Tx, m Meta) error {
	t.tx, t.meta = btx, m
	t.metaB = btx.Bucket(bucketMeta)
	if t.metaB == nil {
		return fmt.Errorf("%w: missing bucket in %s", ErrCorrupt, t.store.path)
	}
	if t.arena == nil {
		t.arena = new(arena)
	}
	for i := range t.lb {
		b := btx.Bucket(ovNames[i])
		if b == nil {
			return fmt.Errorf("%w: missing bucket in %s", ErrCorrupt, t.store.path)
		}
		t.lb[i].file, t.lb[i].id, t.lb[i].arena = b, i, t.arena
	}
	t.state, t.stateExp, t.requests = &t.lb[ovState], &t.lb[ovStateExp], &t.lb[ovRequests]
	t.requestExp, t.policies, t.nodes = &t.lb[ovRequestExp], &t.lb[ovPolicies], &t.lb[ovNodes]
	t.curOK = false
	return nil
}

// bind sets the writer's layers: the current generation, then the frozen
// one while its commit is in flight.
func (t *Tx) bind(cur, frozen *generation) {
	t.arena = &cur.arena
	for i := range t.lb {
		t.lay[i][0] = &cur.b[i]
		n := 1
		if frozen != nil {
			t.lay[i][1] = &frozen.b[i]
			n = 2
		} else {
			t.lay[i][1] = nil
		}
		t.lb[i].layers = t.lay[i][:n]
		t.lb[i].arena = t.arena
	}
	t.state, t.stateExp, t.requests = &t.lb[ovState], &t.lb[ovStateExp], &t.lb[ovRequests]
	t.requestExp, t.policies, t.nodes = &t.lb[ovRequestExp], &t.lb[ovPolicies], &t.lb[ovNodes]
	t.curOK = false
}

// end forgets the file's transaction (the caller closes it).
func (t *Tx) end() {
	t.tx, t.metaB = nil, nil
	for i := range t.lb {
		t.lb[i].file = nil
	}
	t.curOK = false
	t.stateExpCur, t.requestExpCur = lcursor{}, lcursor{}
}

// Meta is the meta record as changed so far by this transaction.
func (t *Tx) Meta() Meta { return t.meta }

// SetApplied records the Raft index this transaction brings the store to.
func (t *Tx) SetApplied(index uint64) { t.meta.AppliedIndex = index }

// SetLastTime records the greatest leader time seen.
func (t *Tx) SetLastTime(now int64) { t.meta.LastTime = now }

// Alloc returns n bytes valid until the transaction ends, carved from memory
// reused across transactions. Callers use it for scratch values that must
// survive several Put calls without a heap allocation each.
func (t *Tx) Alloc(n int) []byte { return t.arena.alloc(n) }

func (t *Tx) copyBytes(b []byte) []byte {
	c := t.arena.alloc(len(b))
	copy(c, b)
	return c
}

// State is a stored limiter state.
type State struct {
	Data    []byte // algorithm state: read-only, valid until the transaction ends
	Expiry  int64  // when the state is equivalent to a fresh key
	Found   bool
	indexed int64
}

// State reads the state under key. In the writer's transaction it comes from
// the state cache (cache.go) and reflects every write so far; Data is then
// valid until the next write to key. In a read-only transaction it is the
// last commit, valid until the transaction ends.
func (t *Tx) State(key []byte) (State, error) {
	if t.cache != nil {
		e, err := t.entry(key)
		if err != nil {
			return State{}, err
		}
		return e.state(), nil
	}
	return t.decodeState(key, t.state.Get(key))
}

func (t *Tx) decodeState(key, v []byte) (State, error) {
	v, err := t.store.unseal(bucketState, key, v)
	if v == nil || err != nil {
		return State{}, err
	}
	if len(v) < stateHeader {
		return State{}, fmt.Errorf("%w: state value of %d bytes for key %q", ErrCorrupt, len(v), key)
	}
	return State{
		Data:    v[stateHeader:],
		Expiry:  int64(binary.BigEndian.Uint64(v)),
		indexed: int64(binary.BigEndian.Uint64(v[8:])),
		Found:   true,
	}, nil
}

// ForEachState calls fn, in key order, for every key state whose storage
// key starts with prefix, as of the last commit (a read-only transaction
// only: the writer's cache holds newer states). fn's slices are valid only
// during the call. The state machine loads its records kept beside key
// states (bans) with it.
func (t *Tx) ForEachState(prefix []byte, fn func(key, data []byte) error) error {
	if t.cache != nil {
		return errors.New("persist: ForEachState in the writer's transaction")
	}
	var c lcursor
	c.init(t.state)
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		st, err := t.decodeState(k, v)
		if err != nil {
			return err
		}
		if err := fn(k, st.Data); err != nil {
			return err
		}
	}
	return nil
}

// PutState stores data under key, to expire at expiry. prev must be what State
// returned for key in this transaction, with no write to key since. The
// write goes to the state cache and reaches the file at the next commit.
func (t *Tx) PutState(key []byte, prev State, data []byte, expiry int64) error {
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("state key of %d bytes", len(key))
	}
	if t.cache == nil {
		return errReadOnly
	}
	return t.putEntry(key, data, expiry)
}

// DeleteState removes the state under key. prev is as for PutState; deleting
// an absent key does nothing.
func (t *Tx) DeleteState(key []byte, prev State) error {
	if !prev.Found {
		return nil
	}
	if t.cache == nil {
		return errReadOnly
	}
	return t.deleteEntry(key)
}

var errReadOnly = errors.New("persist: write in a read-only transaction")

// Request is a stored request-id result.
type Request struct {
	Result []byte // encoded result: read-only, valid until the transaction ends
	Expiry int64
	Found  bool
}

// Request reads the entry for a request id.
func (t *Tx) Request(id []byte) (Request, error) {
	if len(id) == 0 {
		return Request{}, nil
	}
	v, err := t.store.unseal(bucketRequests, id, t.requests.Get(id))
	if v == nil || err != nil {
		return Request{}, err
	}
	if len(v) < 8 {
		return Request{}, fmt.Errorf("%w: request value of %d bytes for id %q", ErrCorrupt, len(v), id)
	}
	return Request{Result: v[8:], Expiry: int64(binary.BigEndian.Uint64(v)), Found: true}, nil
}

// PutRequest stores an op's encoded result under its request id until expiry.
// prev is what Request returned for id in this transaction.
func (t *Tx) PutRequest(id []byte, prev Request, result []byte, expiry int64) error {
	if len(id) == 0 || len(id) > MaxKeySize {
		return fmt.Errorf("request id of %d bytes", len(id))
	}
	if prev.Found {
		if err := t.requestExp.Delete(t.indexKey(prev.Expiry, id)); err != nil {
			return fmt.Errorf("delete request expiry entry: %w", err)
		}
	}
	v := t.arena.alloc(8 + len(result) + sumLen)
	binary.BigEndian.PutUint64(v, uint64(expiry))
	copy(v[8:], result)
	if err := t.requests.Put(t.copyBytes(id), seal(id, v)); err != nil {
		return fmt.Errorf("put request: %w", err)
	}
	if len(t.reqSkip) > 0 && bytes.Compare(t.indexKey(expiry, id), t.reqSkip) <= 0 {
		t.reqSkip = t.reqSkip[:0]
	}
	if err := t.putIndex(t.requestExp, expiry, id); err != nil {
		return fmt.Errorf("put request expiry entry: %w", err)
	}
	if !prev.Found {
		t.meta.RequestIDs++
	}
	return nil
}

// Expire removes state and request entries whose expiry is ≤ now, earliest
// first, examining at most max index entries so the work per call is bounded.
// An index entry found early for a key still active is moved to the key's
// current expiry (it counts as examined, not removed). It returns the number
// of entries removed. States are swept on the logical index of the state
// cache (see cache.go), so the result does not depend on when it flushed.
func (t *Tx) Expire(now int64, max int) (removed int, err error) {
	return t.ExpireWith(now, max, nil)
}

// KeepFunc is asked, by ExpireWith, about a key state whose stored expiry has
// passed: it returns a later expiry when the state still holds something
// under the rules that now apply to it (a policy whose window grew since the
// state was written), or 0 to let it be removed. It must be deterministic:
// every replica sweeps the same keys.
type KeepFunc func(key, data []byte, now int64) int64

// ExpireWith is Expire asking keep (when not nil) before it removes a key
// state; a kept state is re-filed at the expiry keep returns.
func (t *Tx) ExpireWith(now int64, max int, keep KeepFunc) (removed int, err error) {
	if t.cache == nil {
		return 0, errReadOnly
	}
	sc, rc := t.cursors()
	for examined := 0; examined < max; examined++ {
		sd, sdue, err := t.nextDue(sc, now)
		if err != nil {
			return removed, err
		}
		// Re-seek every round: deleting under a cursor can skip keys.
		rk, rv := t.firstRequestDue(rc)
		if rk != nil {
			if _, err := t.store.unseal(bucketRequestExp, rk, rv); err != nil {
				return removed, err
			}
		}
		rdue := len(rk) > 8 && indexTime(rk) <= now
		switch {
		case sdue && (!rdue || sd.at <= indexTime(rk)):
			removed += t.expireDue(sd, now, keep)
		case rdue:
			t.reqSkip = append(t.reqSkip[:0], rk...)
			n, err := t.expireRequest(rk)
			if err != nil {
				return removed, err
			}
			removed += n
		default:
			return removed, nil
		}
	}
	return removed, nil
}

// firstRequestDue positions rc on the first entry of the request expiry
// index. The sweep removes entries from the front, and until the next commit
// the file still holds them, hidden by deletions in the generations: reqSkip,
// the last entry the sweep removed, lets it seek past them instead of
// stepping over every one again (every key up to reqSkip is deleted; a put
// at or below it clears it).
func (t *Tx) firstRequestDue(rc *lcursor) ([]byte, []byte) {
	if len(t.reqSkip) == 0 || t.store.testNoSkip {
		return rc.First()
	}
	k, v := rc.Seek(t.reqSkip)
	if k != nil && bytes.Equal(k, t.reqSkip) {
		k, v = rc.Next()
	}
	return k, v
}

func (t *Tx) expireRequest(ik []byte) (int, error) {
	ik = append(t.scratch[:0], ik...)
	t.scratch = ik
	at, id := indexTime(ik), ik[8:]
	if err := t.requestExp.Delete(ik); err != nil {
		return 0, fmt.Errorf("delete request expiry entry: %w", err)
	}
	r, err := t.Request(id)
	if err != nil {
		return 0, err
	}
	if !r.Found || r.Expiry != at {
		return 0, nil
	}
	if err := t.requests.Delete(id); err != nil {
		return 0, fmt.Errorf("delete expired request: %w", err)
	}
	t.meta.RequestIDs--
	return 1, nil
}

// cursors returns the transaction's cursors on the state and request expiry
// indexes. Every use positions them first (First or Seek), as bbolt requires
// after writes.
func (t *Tx) cursors() (state, request *lcursor) {
	if !t.curOK {
		t.stateExpCur.init(t.stateExp)
		t.requestExpCur.init(t.requestExp)
		t.curOK = true
	}
	return &t.stateExpCur, &t.requestExpCur
}

// NextExpiry is the earliest expiry-index entry in this transaction (a lower
// bound).
func (t *Tx) NextExpiry() (int64, bool) {
	if t.cache != nil {
		return t.nextDueHint()
	}
	return nextExpiry(t.tx)
}

func nextExpiry(btx *bolt.Tx) (int64, bool) {
	var (
		next int64
		ok   bool
	)
	for _, name := range [][]byte{bucketStateExp, bucketRequestExp} {
		b := btx.Bucket(name)
		if b == nil {
			continue
		}
		if k, _ := b.Cursor().First(); len(k) >= 8 {
			if at := indexTime(k); !ok || at < next {
				next, ok = at, true
			}
		}
	}
	return next, ok
}

// Policy returns the encoded policy stored under name (nil if absent).
func (t *Tx) Policy(name string) ([]byte, error) {
	return t.store.unseal(bucketPolicies, []byte(name), t.policies.Get([]byte(name)))
}

// PutPolicy stores an encoded policy.
func (t *Tx) PutPolicy(name string, enc []byte) error {
	if name == "" || len(name) > MaxKeySize {
		return fmt.Errorf("policy name of %d bytes", len(name))
	}
	if err := t.policies.Put(t.copyBytes([]byte(name)), t.sealed([]byte(name), enc)); err != nil {
		return fmt.Errorf("put policy %q: %w", name, err)
	}
	return nil
}

// DeletePolicy removes a policy and reports whether it existed.
func (t *Tx) DeletePolicy(name string) (bool, error) {
	k := []byte(name)
	if len(k) == 0 || t.policies.Get(k) == nil {
		return false, nil
	}
	if err := t.policies.Delete(k); err != nil {
		return false, fmt.Errorf("delete policy %q: %w", name, err)
	}
	return true, nil
}

// ForEachPolicy calls fn for every policy in name order.
func (t *Tx) ForEachPolicy(fn func(name string, enc []byte) error) error {
	return t.policies.ForEach(func(k, v []byte) error {
		p, err := t.store.unseal(bucketPolicies, k, v)
		if err != nil {
			return err
		}
		return fn(string(k), p)
	})
}

// PutNode records a node's HTTP address.
func (t *Tx) PutNode(id, httpAddr string) error {
	if id == "" || len(id) > MaxKeySize {
		return fmt.Errorf("node id of %d bytes", len(id))
	}
	if err := t.nodes.Put(t.copyBytes([]byte(id)), t.sealed([]byte(id), []byte(httpAddr))); err != nil {
		return fmt.Errorf("put node %q: %w", id, err)
	}
	return nil
}

// DeleteNode forgets a node.
func (t *Tx) DeleteNode(id string) error {
	if id == "" {
		return nil
	}
	if err := t.nodes.Delete([]byte(id)); err != nil {
		return fmt.Errorf("delete node %q: %w", id, err)
	}
	return nil
}

// ForEachNode calls fn for every node in id order.
func (t *Tx) ForEachNode(fn func(id, httpAddr string) error) error {
	return t.nodes.ForEach(func(k, v []byte) error {
		a, err := t.store.unseal(bucketNodes, k, v)
		if err != nil {
			return err
		}
		return fn(string(k), string(a))
	})
}

// sealed copies payload into the arena with its checksum under key.
func (t *Tx) sealed(key, payload []byte) []byte {
	v := t.arena.alloc(len(payload) + sumLen)
	copy(v, payload)
	return seal(key, v)
}

// putIndex adds the index entry sortable(at) ‖ key, whose value is the
// checksum of its key.
func (t *Tx) putIndex(b *lbucket, at int64, key []byte) error {
	ik := t.arenaIndexKey(at, key)
	return b.Put(ik, seal(ik, t.arena.alloc(sumLen)))
}

// indexKey builds an index key in scratch memory, for lookups and deletes
// (bbolt does not retain keys passed to Get or Delete).
func (t *Tx) indexKey(at int64, key []byte) []byte {
	b := append(t.scratch[:0], 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint64(b, sortable(at))
	b = append(b, key...)
	t.scratch = b
	return b
}

// arenaIndexKey builds an index key that stays valid until commit, as Put
// requires.
func (t *Tx) arenaIndexKey(at int64, key []byte) []byte {
	b := t.arena.alloc(8 + len(key))
	binary.BigEndian.PutUint64(b, sortable(at))
	copy(b[8:], key)
	return b
}

// sortable maps int64 to uint64 preserving order, so big-endian index keys
// sort by time even for (theoretical) negative times.
func sortable(t int64) uint64 { return uint64(t) ^ (1 << 63) }

func indexTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)) }

// arena hands out byte slices that must stay valid until a bbolt transaction
// commits. Chunks are reused by later transactions: bbolt keeps no reference
// to Put keys or values once the transaction is closed.
type arena struct {
	chunks [][]byte
	cur    int
	off    int
}

const (
	arenaChunk     = 64 << 10
	arenaMaxChunks = 64 // keep at most 4 MiB between transactions
)

func (a *arena) alloc(n int) []byte {
	if n > arenaChunk/4 {
		return make([]byte, n) // big values (long sliding logs) get their own memory
	}
	for {
		if a.cur < len(a.chunks) {
			c := a.chunks[a.cur]
			if a.off+n <= len(c) {
				b := c[a.off : a.off+n : a.off+n]
				a.off += n
				return b
			}
			a.cur++
			a.off = 0
			continue
		}
		a.chunks = append(a.chunks, make([]byte, arenaChunk))
	}
}

func (a *arena) reset() {
	if len(a.chunks) > arenaMaxChunks {
		a.chunks = a.chunks[:arenaMaxChunks]
	}
	a.cur, a.off = 0, 0
}
