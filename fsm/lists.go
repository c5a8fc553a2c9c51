package fsm

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

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
