package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Allow and deny lists: cluster-wide configuration replicated through the
// log like an RLS domain. The state machine keeps a list's canonical
// encoding opaque (the service validates a list and produces that encoding
// before anything is proposed, and compiles it on every node); what it
// enforces is what keeps the replicated configuration bounded: the name,
// the encoding's size and the number of lists (nodeapi's bounds), at apply,
// so every replica refuses the same entries.
//
// Lists live in the policies bucket under listKeyPrefix, a key no policy
// name may have (reservedPolicyName), so snapshots, restores and the digest
// cover them with no change to the storage layout.

// Command types for lists (see the list in types.go; never renumber).
const (
	CmdPutList    byte = 30 // list name, canonical encoding → error
	CmdDeleteList byte = 31 // list name → error (*Error not_found if absent)
)

const listKeyPrefix = "\x00list\x00"

// List is a list's replicated configuration (nodeapi's).
type List = nodeapi.List

// EncodePutList builds a CmdPutList entry.
func EncodePutList(name string, config []byte) []byte {
	dst := appendString([]byte{CmdPutList, cmdVersion}, name)
	return appendString(dst, string(config))
}

// EncodeDeleteList builds a CmdDeleteList entry.
func EncodeDeleteList(name string) []byte {
	return appendString([]byte{CmdDeleteList, cmdVersion}, name)
}

func init() {
	for _, typ := range []byte{CmdPutList, CmdDeleteList} {
		registerCommand(typ, commandType{
			name: map[byte]string{CmdPutList: "put list", CmdDeleteList: "delete list"}[typ],
			decode: func(c *command, d *decoder) {
				c.name = string(d.bytes())
				c.domain = nil
				if c.typ == CmdPutList {
					c.domain = d.bytes()
				}
			},
			validate: func(c *command) error {
				if e := listError(c); e != nil {
					return fmt.Errorf("%w: list %q: %v", ErrBadCommand, c.name, e)
				}
				return nil
			},
			apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
				e, err := a.applyList(tx, c)
				return errResponse(e), err
			},
		})
	}
}

func listError(c *command) *Error {
	switch {
	case c.name == "" || len(c.name) > nodeapi.MaxPolicyName:
		return &Error{Code: CodeInvalidArgument, Field: "name", Message: fmt.Sprintf("must be 1 to %d bytes", nodeapi.MaxPolicyName)}
	case c.typ == CmdPutList && (len(c.domain) == 0 || len(c.domain) > nodeapi.MaxListBytes):
		return &Error{Code: CodeInvalidArgument, Field: "entries", Message: fmt.Sprintf("the list must encode to 1 to %d bytes", nodeapi.MaxListBytes)}
	}
	return nil
}

// applyList applies CmdPutList or CmdDeleteList; the domain table's
// staging (publish after commit) serves lists unchanged.
func (a *applier) applyList(tx *persist.Tx, c *command) (*Error, error) {
	if e := listError(c); e != nil {
		return e, nil
	}
	t := &a.f.lists
	key := listKeyPrefix + c.name
	_, exists := t.lookup(c.name)
	if c.typ == CmdDeleteList {
		if !exists {
			return &Error{Code: CodeNotFound, Field: "name", Message: fmt.Sprintf("list %q does not exist", c.name)}, nil
		}
		if _, err := tx.DeletePolicy(key); err != nil {
			return nil, err
		}
		t.stage(c.name, nil)
		a.f.listEnds.set(c.name, nil)
		return nil, nil
	}
	if !exists && t.count() >= nodeapi.MaxLists {
		return &Error{Code: CodeInvalidArgument, Field: "name", Message: fmt.Sprintf("the cluster holds %d lists, the most it may", nodeapi.MaxLists)}, nil
	}
	cfg := bytes.Clone(c.domain) // the entry's bytes are reused
	if err := tx.PutPolicy(key, cfg); err != nil {
		return nil, err
	}
	t.stage(c.name, cfg)
	a.f.listEnds.set(c.name, cfg)
	return nil, nil
}

// count is the number of entries with staged changes applied (apply
// goroutine only).
func (t *domainTable) count() int {
	t.mu.RLock()
	n := len(t.m)
	for name, cfg := range t.pending {
		_, had := t.m[name]
		switch {
		case cfg == nil && had:
			n--
		case cfg != nil && !had:
			n++
		}
	}
	t.mu.RUnlock()
	return n
}

// loadList takes a policies-bucket entry that is a list; false otherwise.
func loadList(into map[string][]byte, key string, enc []byte) bool {
	name, ok := strings.CutPrefix(key, listKeyPrefix)
	if ok {
		into[name] = bytes.Clone(enc)
	}
	return ok
}

// List returns this replica's copy of a list.
func (f *FSM) List(name string) (List, bool) {
	f.lists.mu.RLock()
	defer f.lists.mu.RUnlock()
	cfg, ok := f.lists.m[name]
	return List{Name: name, Config: cfg}, ok
}

// Lists returns every list sorted by name.
func (f *FSM) Lists() []List {
	f.lists.mu.RLock()
	ls := make([]List, 0, len(f.lists.m))
	for name, cfg := range f.lists.m {
		ls = append(ls, List{Name: name, Config: cfg})
	}
	f.lists.mu.RUnlock()
	sort.Slice(ls, func(i, j int) bool { return ls[i].Name < ls[j].Name })
	return ls
}

// ListsVersion changes whenever this replica's lists change (local, not
// replicated): the service recompiles its matchers when it does.
func (f *FSM) ListsVersion() uint64 { return f.lists.version.Load() }

// List entries' ends. An entry's "expires" is a leader-time instant; the
// end is agreed in apply: the first entry applied at a leader time at or
// past it ends it on every replica at the same index (the read path decides
// from the replicated time, FSM.LastTime, never a node's clock:
// DESIGN.md "Ends in leader time"). So that the replicated time reaches an
// end even when no check arrives, the earliest end is part of NextExpiry
// (the leader proposes a sweep once its clock passes it), and the sweep
// prunes the entries it has passed from the list's encoding. The state
// machine reads only the field it enforces, entries[].expires; the rest of
// the encoding stays the service's.

// listDoc is a list's canonical encoding as far as the state machine reads
// it; its field order and omitempty are the service's (ValidateList), so a
// pruned list encodes as the service would have encoded it.
type listDoc struct {
	Kind     string            `json:"kind"`
	Entries  []json.RawMessage `json:"entries"`
	Policies []string          `json:"policies,omitempty"`
}

// listEntryEnd is an entry's end, Unix ns (0: it never ends). An expiry the
// state machine cannot read (never produced by the service) has long ended,
// as the service's compiler reads it too.
func listEntryEnd(raw []byte) int64 {
	var e struct {
		Expires string `json:"expires"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return 1
	}
	if e.Expires == "" {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, e.Expires)
	if err != nil {
		return 1
	}
	return max(t.UnixNano(), 1)
}

// earliestListEnd is the earliest end among a list's entries (0: none ends,
// or the encoding is not one the state machine reads).
func earliestListEnd(cfg []byte) int64 {
	var doc listDoc
	if json.Unmarshal(cfg, &doc) != nil {
		return 0
	}
	var first int64
	for _, raw := range doc.Entries {
		if end := listEntryEnd(raw); end != 0 && (first == 0 || end < first) {
			first = end
		}
	}
	return first
}

// pruneList drops the entries whose end is at or before now; changed is
// false when none has ended (or the encoding is not readable: kept as is).
func pruneList(cfg []byte, now int64) (out []byte, changed bool) {
	var doc listDoc
	if json.Unmarshal(cfg, &doc) != nil {
		return cfg, false
	}
	kept := make([]json.RawMessage, 0, len(doc.Entries))
	for _, raw := range doc.Entries {
		if end := listEntryEnd(raw); end == 0 || end > now {
			kept = append(kept, raw)
		}
	}
	if len(kept) == len(doc.Entries) {
		return cfg, false
	}
	doc.Entries = kept
	out, err := json.Marshal(doc)
	if err != nil {
		return cfg, false
	}
	return out, true
}

// listEnds tracks each list's earliest entry end. The apply goroutine
// writes it as it applies puts, deletes and sweeps (and load sets it);
// NextExpiry reads next.
type listEnds struct {
	mu   sync.Mutex
	by   map[string]int64
	next atomic.Int64 // the earliest of by; 0: none
}

func (e *listEnds) set(name string, cfg []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by == nil {
		e.by = map[string]int64{}
	}
	if end := earliestListEnd(cfg); end != 0 {
		e.by[name] = end
	} else {
		delete(e.by, name)
	}
	var next int64
	for _, end := range e.by {
		if next == 0 || end < next {
			next = end
		}
	}
	e.next.Store(next)
}

// due lists, sorted, the lists with an entry ended at now.
func (e *listEnds) due(now int64) []string {
	if n := e.next.Load(); n == 0 || n > now {
		return nil
	}
	e.mu.Lock()
	var names []string
	for name, end := range e.by {
		if end <= now {
			names = append(names, name)
		}
	}
	e.mu.Unlock()
	sort.Strings(names)
	return names
}

// pruneLists removes, in a sweep at leader time now, the list entries that
// have ended (the read path already treats them as ended: this keeps the
// lists bounded by what is in force and NextExpiry moving).
func (a *applier) pruneLists(tx *persist.Tx, now int64) error {
	for _, name := range a.f.listEnds.due(now) {
		cfg, ok := a.f.lists.lookup(name)
		if !ok {
			a.f.listEnds.set(name, nil)
			continue
		}
		out, changed := pruneList(cfg, now)
		if !changed {
			a.f.listEnds.set(name, nil) // unreadable: nothing the sweep can end
			continue
		}
		if err := tx.PutPolicy(listKeyPrefix+name, out); err != nil {
			return err
		}
		a.f.lists.stage(name, out)
		a.f.listEnds.set(name, out)
	}
	return nil
}
