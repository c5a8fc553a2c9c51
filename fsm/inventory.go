package fsm

import (
	"bytes"
	"container/heap"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// The usage inventory (GET /v1/keys): the keys of one policy or one plan
// limit with what each has used, read in one read transaction of the file,
// so that a page is the state at one applied index (the transaction's meta
// record), decided at that index's leader time (Meta.LastTime), not the
// local clock: every replica at one index answers alike, and nothing is
// proposed. The file is the last finished commit, so a page may lag the
// replica's applied index by the commits not yet written (FSMCommitEvery,
// FSMFlushInterval); the index the page reports is the one it reflects.

type (
	KeysQuery = nodeapi.KeysQuery
	KeysPage  = nodeapi.KeysPage
	KeyUsage  = nodeapi.KeyUsage
)

// Cursor kinds: the first byte of a decoded cursor.
const (
	cursorKey    byte = 'k' // ‖ key: key order, strictly after key
	cursorSorted byte = 's' // ‖ sort ‖ varint(value) ‖ key: (value, key) order, strictly after
)

// ListKeys answers one page of the usage inventory. Errors: *Error not_found
// naming policy, plan or plan_limit; invalid_argument naming cursor or
// plan_limit; anything else is a storage failure.
func (f *FSM) ListKeys(q KeysQuery) (KeysPage, error) {
	cur, e := decodeKeysCursor(q.Cursor, q.Sort)
	if e != nil {
		return KeysPage{}, e
	}
	if q.Limit <= 0 {
		q.Limit = nodeapi.DefaultKeysLimit
	}
	var page KeysPage
	err := f.store.View(func(tx *persist.Tx) error {
		m := tx.Meta()
		page.AppliedIndex = m.AppliedIndex
		l := lister{q: q, now: m.LastTime, tx: tx}
		if err := l.resolve(); err != nil {
			return err
		}
		var err error
		if l.urecs, err = tx.StateReader(); err != nil {
			return err
		}
		if q.Sort == nodeapi.SortKey {
			return l.byKey(&page, cur)
		}
		return l.sorted(&page, cur)
	})
	return page, err
}

// lister is one listing's limit and scratch memory.
type lister struct {
	q   KeysQuery
	now int64
	tx  *persist.Tx

	base    []byte // the storage-key prefix of the limit: every key's state is base ‖ key
	spec    algo.Spec
	plan    *planConfig          // plan listings: the configuration at this index
	recs    *persist.StateReader // plan listings: the keys' assignments and overrides
	limit   string               // plan listings: the plan limit's name
	buf     []byte
	rec     []byte
	urecs   *persist.StateReader // the keys' usage records (history.go)
	history bool                 // the limit has a history option: refusals are counted
	urec    []byte
}

func (l *lister) resolve() error {
	q := &l.q
	if q.Plan == "" {
		enc, err := l.tx.Policy(q.Policy)
		if err != nil {
			return err
		}
		if enc == nil || strings.HasPrefix(q.Policy, "\x00") {
			return notFound(q.Policy)
		}
		d := decoder{b: enc}
		p, invalid := decodePolicy(&d)
		if d.err == nil {
			d.err = invalid
		}
		if d.err != nil {
			return fmt.Errorf("policy %q: %w: %v", q.Policy, persist.ErrCorrupt, d.err)
		}
		spec, err := p.Spec.Validate()
		if err != nil {
			return fmt.Errorf("policy %q: %w: %v", q.Policy, persist.ErrCorrupt, err)
		}
		l.spec, l.history = spec, p.Options.History > 0
		l.base = appendLimitPrefix(nil, 'p', q.Policy)
		return nil
	}
	// The plan configuration from the same transaction, not the replica's
	// published copy, which may be ahead of the file.
	c := emptyPlanConfig()
	if err := l.tx.ForEachPolicy(func(name string, enc []byte) error {
		_, err := c.loadEntry(name, enc)
		return err
	}); err != nil {
		return err
	}
	c.index()
	p, ok := c.plans[q.Plan]
	if !ok {
		return planNotFound("plan", q.Plan)
	}
	var pl *PlanLimit
	switch {
	case q.PlanLimit != "":
		for i := range p.Limits {
			if p.Limits[i].Name == q.PlanLimit {
				pl = &p.Limits[i]
			}
		}
		if pl == nil {
			return &Error{Code: CodeNotFound, Field: "plan_limit", Message: fmt.Sprintf("plan %q has no limit %q (it has %s)", p.Name, q.PlanLimit, limitNames(p))}
		}
	case len(p.Limits) == 1:
		pl = &p.Limits[0]
	default:
		return &Error{Code: CodeInvalidArgument, Field: "plan_limit", Message: fmt.Sprintf("required: plan %q has several limits (%s)", p.Name, limitNames(p))}
	}
	recs, err := l.tx.StateReader()
	if err != nil {
		return err
	}
	l.plan, l.limit, l.spec, l.recs = c, pl.Name, pl.Spec, recs
	l.history = pl.Options.History > 0
	l.base = appendLimitPrefix(nil, tagPlanLimit, pl.Name)
	return nil
}

func limitNames(p *Plan) string {
	names := make([]string, len(p.Limits))
	for i := range p.Limits {
		names[i] = p.Limits[i].Name
	}
	return strings.Join(names, ", ")
}

// appendLimitPrefix is storageKey's limit identity: tag ‖ uvarint(len) ‖ ident.
func appendLimitPrefix(dst []byte, tag byte, ident string) []byte {
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(ident)))
	return append(dst, ident...)
}

// usage decides key's stored state as a peek at the listing's time. ok is
// false for a key the listing leaves out: a state equivalent to a fresh key
// (expired, not yet swept) or, in a plan listing, a key whose plan at this
// index is another one (plan limits of one name share their states).
func (l *lister) usage(key, data []byte) (u KeyUsage, ok bool, err error) {
	spec := &l.spec
	if l.plan != nil {
		s, mine, err := l.planSpec(key)
		if err != nil || !mine {
			return u, false, err
		}
		spec = &s
	}
	d, next, err := algo.Decide(l.buf[:0], spec, data, l.now, 0)
	if err != nil {
		// A state the algorithm cannot read answers the key's checks with
		// an error; the listing leaves it out rather than fail every page.
		return u, false, nil
	}
	if cap(next) > cap(l.buf) {
		l.buf = next[:0]
	}
	if next == nil {
		return u, false, nil
	}
	capacity := spec.Limit
	if spec.Algorithm.HasBurst() && spec.Burst > 0 {
		capacity = spec.Burst
	}
	return KeyUsage{Used: max(capacity-d.Remaining, 0), Remaining: d.Remaining, ResetAfter: d.ResetAfter}, true, nil
}

// planSpec is the listed limit's spec for key if key's plan is the listed
// one: assignment > longest prefix rule > default, as decidePlan resolves
// it, with the key's unexpired override.
func (l *lister) planSpec(key []byte) (algo.Spec, bool, error) {
	l.rec = append(append(l.rec[:0], tagAssignment), key...)
	st, err := l.recs.State(l.rec)
	if err != nil {
		return algo.Spec{}, false, err
	}
	var mine bool
	switch {
	case st.Found:
		mine = string(st.Data) == l.q.Plan // compared, not converted: no allocation per key
	default:
		if _, p, ok := l.plan.rule(key); ok {
			mine = p == l.q.Plan
		} else {
			mine = l.plan.def == l.q.Plan
		}
	}
	if !mine {
		return algo.Spec{}, false, nil
	}
	spec := l.spec
	l.rec[0] = tagOverride
	st, err = l.recs.State(l.rec)
	if err != nil || !st.Found {
		return spec, true, err
	}
	d := decoder{b: st.Data}
	o := decodeOverride(&d)
	if d.err != nil {
		return spec, false, fmt.Errorf("override of %q: %w: %v", key, persist.ErrCorrupt, d.err)
	}
	if o.Expires > 0 && o.Expires <= l.now {
		return spec, true, nil
	}
	for _, lo := range o.Limits {
		if lo.Name == l.limit {
			if s, e := overridden(spec, lo); e == nil {
				spec = s
			}
		}
	}
	return spec, true, nil
}

// byKey is a page in key order: the first Limit keys strictly after the
// cursor's key. A key that exists from one page to the next is on exactly
// one of them, whatever was written in between (the scan seeks to the
// cursor, it counts nothing).
func (l *lister) byKey(page *KeysPage, cur keysCursor) error {
	prefix := append(append([]byte(nil), l.base...), l.q.Prefix...)
	var after []byte
	if cur.key != nil {
		after = append(append([]byte(nil), l.base...), cur.key...)
	}
	var last []byte
	err := l.tx.ScanStates(prefix, after, func(k []byte, st persist.State) (bool, error) {
		key := k[len(l.base):]
		u, ok, err := l.usage(key, st.Data)
		if err != nil || !ok {
			return err == nil, err
		}
		if len(page.Keys) == l.q.Limit {
			// One more listed key exists: the page is not the last.
			page.Cursor = encodeKeysCursor(keysCursor{key: last})
			return false, nil
		}
		if u.Refused, err = l.refused(key); err != nil {
			return false, err
		}
		u.Key = string(key)
		page.Keys = append(page.Keys, u)
		last = key
		return true, nil
	})
	return err
}

// ranked is a key of a sorted listing: v is the sort value made ascending
// (used and refused negated), key is valid for the transaction.
type ranked struct {
	v   int64
	key []byte
	u   KeyUsage
}

func (a *ranked) less(b *ranked) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return bytes.Compare(a.key, b.key) < 0
}

// topN is a max-heap of the Limit least entries seen: its root is the one
// a lesser entry evicts.
type topN []ranked

func (h topN) Len() int           { return len(h) }
func (h topN) Less(i, j int) bool { return h[j].less(&h[i]) }
func (h topN) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topN) Push(x any)        { *h = append(*h, x.(ranked)) }
func (h *topN) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sortValue is u's value under the sort, ascending.
func sortValue(sortBy string, u *KeyUsage) int64 {
	switch sortBy {
	case nodeapi.SortUsed:
		return -u.Used
	case nodeapi.SortRemaining:
		return u.Remaining
	default: // refused
		if u.Refused != nil {
			return -*u.Refused
		}
		return 0
	}
}

// sorted is a page in (value, key) order: every matching key is decided
// and the Limit least entries strictly after the cursor kept in a heap of
// Limit entries, so memory is bounded by the page, time by the keys. Each
// page is its own snapshot: a key whose value changed between pages may
// move across the cursor (be skipped or listed twice); key order has no
// such caveat.
func (l *lister) sorted(page *KeysPage, cur keysCursor) error {
	prefix := append(append([]byte(nil), l.base...), l.q.Prefix...)
	h := make(topN, 0, l.q.Limit+1)
	after := ranked{v: cur.v, key: cur.key}
	more := false
	err := l.tx.ScanStates(prefix, nil, func(k []byte, st persist.State) (bool, error) {
		key := k[len(l.base):]
		u, ok, err := l.usage(key, st.Data)
		if err != nil || !ok {
			return err == nil, err
		}
		if l.q.Sort == nodeapi.SortRefused {
			if u.Refused, err = l.refused(key); err != nil {
				return false, err
			}
		}
		r := ranked{v: sortValue(l.q.Sort, &u), key: key, u: u}
		if cur.key != nil && !after.less(&r) {
			return true, nil
		}
		if len(h) < l.q.Limit {
			heap.Push(&h, r)
			return true, nil
		}
		more = true
		if r.less(&h[0]) {
			h[0] = r
			heap.Fix(&h, 0)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	sort.Slice(h, func(i, j int) bool { return h[i].less(&h[j]) })
	page.Keys = make([]KeyUsage, len(h))
	for i := range h {
		page.Keys[i] = h[i].u
		page.Keys[i].Key = string(h[i].key)
		if page.Keys[i].Refused == nil && l.history {
			if page.Keys[i].Refused, err = l.refused(h[i].key); err != nil {
				return err
			}
		}
	}
	if more {
		lastR := h[len(h)-1]
		page.Cursor = encodeKeysCursor(keysCursor{sort: l.q.Sort, v: lastR.v, key: lastR.key})
	}
	return nil
}

// keysCursor is a decoded cursor: the last key of the previous page and, for
// a sorted listing, its sort and sort value.
type keysCursor struct {
	sort string
	v    int64
	key  []byte // nil: the first page
}

var sortCodes = map[string]byte{nodeapi.SortUsed: 'u', nodeapi.SortRemaining: 'r', nodeapi.SortRefused: 'x'}

// encodeKeysCursor is opaque to clients (base64url): what it holds may
// change between versions without changing the API.
func encodeKeysCursor(c keysCursor) string {
	var b []byte
	if c.sort == "" {
		b = append([]byte{cursorKey}, c.key...)
	} else {
		b = append([]byte{cursorSorted, sortCodes[c.sort]}, binary.AppendVarint(nil, c.v)...)
		b = append(b, c.key...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func badCursor(why string) *Error {
	return &Error{Code: CodeInvalidArgument, Field: "cursor", Message: why}
}

func decodeKeysCursor(s, sortBy string) (keysCursor, *Error) {
	if s == "" {
		return keysCursor{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 {
		return keysCursor{}, badCursor("not a cursor this listing returned")
	}
	switch b[0] {
	case cursorKey:
		if sortBy != "" {
			return keysCursor{}, badCursor("a cursor of a listing in key order, not sorted by " + sortBy)
		}
		return keysCursor{key: b[1:]}, nil
	case cursorSorted:
		if sortBy == "" || b[1] != sortCodes[sortBy] {
			return keysCursor{}, badCursor("a cursor of a listing in another order")
		}
		v, n := binary.Varint(b[2:])
		if n <= 0 || len(b) == 2+n {
			return keysCursor{}, badCursor("not a cursor this listing returned")
		}
		return keysCursor{sort: sortBy, v: v, key: b[2+n:]}, nil
	default:
		return keysCursor{}, badCursor("not a cursor this listing returned")
	}
}

// refused is key's refusals decided through the log in the current window
// of the listed limit (history.go), 0 when its usage record is of an
// earlier window or absent; nil (unknown) for a limit without a history
// option, which counts none.
func (l *lister) refused(key []byte) (*int64, error) {
	if !l.history {
		return nil, nil
	}
	l.urec = append(append(append(l.urec[:0], tagUsage), l.base...), key...)
	st, err := l.urecs.State(l.urec)
	n := int64(0)
	if err != nil || !st.Found {
		return &n, err
	}
	r, err := decodeUsageRec(st.Data)
	if err != nil {
		return nil, fmt.Errorf("usage record of %q: %w: %v", key, persist.ErrCorrupt, err)
	}
	if r.start <= l.now && l.now < r.end {
		n = r.refused
	}
	return &n, nil
}
