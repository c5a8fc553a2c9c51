package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
)

// Hash slot ownership (DESIGN.md, "Hash slots and ownership"). A group's
// state machine keeps a table of the 4,096 hash slots, each owned, frozen
// (moving out) or absent, and decides in apply — at the entry's log
// position, identically on every replica — whether a check of a key is
// its to decide. The table lives in the policies bucket under
// hashSlotsKey (so snapshots, restores and the digest carry it with no
// layout change); a group without the record owns every slot, which is
// every store from before this table and every single-group cluster, and
// then the check path pays one nil pointer compare.
//
// A move of slot s with move id m from group A to group B:
//
//	A: CmdHashSlotFreeze{s, m}  → s frozen; the answer is the export blob
//	B: CmdHashSlotImport{s, m, blob, lastNow} → s owned, records written
//	(the map commits s → B)
//	A: CmdHashSlotDrop{s, m}    → s absent, its records deleted
//
// or, before the import, A: CmdHashSlotUnfreeze{s, m} → s owned again.
// Each is idempotent by move id, so a mover resumes after any crash by
// repeating its last step. Invariant: of the groups, at most one has a
// slot owned at any applied index, provided the mover unfreezes only a
// slot it has not imported (the map's commit is the point of no return).

// Command types of hash slot ownership (see the list in types.go).
const (
	CmdHashSlotsOwn     byte = 40 // leader time, []slot → error: the table of a new group (or tracking on, every slot)
	CmdHashSlotFreeze   byte = 41 // leader time, slot, move → []byte (the export) or error
	CmdHashSlotUnfreeze byte = 42 // slot, move → error
	CmdHashSlotImport   byte = 43 // leader time, slot, move, lastNow, blob → error
	CmdHashSlotDrop     byte = 44 // slot, move → error
)

// Codes of hash slot ownership (nodeapi's).
const (
	CodeWrongGroup = nodeapi.CodeWrongGroup
	CodeSlotMoving = nodeapi.CodeSlotMoving
)

const (
	hsOwned  = uint8(nodeapi.HashSlotOwned)
	hsFrozen = uint8(nodeapi.HashSlotFrozen)
	hsAbsent = uint8(nodeapi.HashSlotAbsent)
)

// hashSlotsKey is the table's record in the policies bucket (no policy name
// starts with \x00).
const hashSlotsKey = "\x00hashslots"

// MaxHashSlotExport bounds an export blob: it travels in one import entry,
// which must fit the largest entry a group accepts.
const MaxHashSlotExport = nodeapi.MaxEntryBytes - 4<<10

// maxHashSlotExport is the bound applied (a test lowers it).
var maxHashSlotExport = MaxHashSlotExport

// requestSlotPrefix: 'Q' ‖ be16(slot) ‖ request id, a record in the state
// bucket expiring with the request id's record, written in tracked groups
// for every request id an op records, so an export finds the slot's
// request ids by one prefix seek (request records do not name their keys).
const requestSlotPrefix byte = 'Q'

// leaseKeyPrefix is lease.go's 'L' ‖ storage key.
const leaseKeyPrefix byte = 'L'

// hashSlotTable is a group's ownership table. Copy on write: the apply
// goroutine stages a copy, readers see the published one.
type hashSlotTable struct {
	state [hashslot.Count]uint8
	move  [hashslot.Count]uint64
	// notOwned counts frozen and absent slots: while 0 a check needs no
	// hashing.
	notOwned int
	// exactAfter: request ids recorded before tracking began (they have no
	// 'Q' record) live until this leader time; a freeze before it would
	// leave them behind, so it is refused until then.
	exactAfter int64
}

const hsTableVersion byte = 1

func (t *hashSlotTable) encode() []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+2*hashslot.Count)
	b = append(b, hsTableVersion)
	b = binary.AppendVarint(b, t.exactAfter)
	for s := range t.state {
		b = append(b, t.state[s])
		b = binary.AppendUvarint(b, t.move[s])
	}
	return b
}

// decodeHashSlotTable reads the record strictly: a table that does not
// decode whole, or names a state that does not exist, is damage, never
// served (the store's checksum catches a flipped byte first).
func decodeHashSlotTable(enc []byte) (*hashSlotTable, error) {
	d := decoder{b: enc}
	if v := d.byte(); d.err == nil && v != hsTableVersion {
		return nil, fmt.Errorf("hash slot table version %d", v)
	}
	t := &hashSlotTable{exactAfter: d.varint()}
	for s := range t.state {
		st := d.byte()
		if d.err == nil && st > hsAbsent {
			return nil, fmt.Errorf("hash slot %d in state %d", s, st)
		}
		t.state[s], t.move[s] = st, d.uvarint()
		if st != hsOwned {
			t.notOwned++
		}
	}
	if d.err == nil && d.off != len(enc) {
		d.err = fmt.Errorf("%d trailing bytes", len(enc)-d.off)
	}
	if d.err != nil {
		return nil, fmt.Errorf("hash slot table: %v", d.err)
	}
	return t, nil
}

func (t *hashSlotTable) set(s hashslot.Slot, state uint8, move uint64) {
	if (t.state[s] == hsOwned) != (state == hsOwned) {
		if state == hsOwned {
			t.notOwned--
		} else {
			t.notOwned++
		}
	}
	t.state[s], t.move[s] = state, move
}

// keySlot is hashslot.Of on a key the entry holds, without copying it.
func keySlot(key []byte) hashslot.Slot {
	return hashslot.Of(unsafe.String(unsafe.SliceData(key), len(key)))
}

// refuseKey answers a check of key when its slot is not this group's to
// decide.
func (t *hashSlotTable) refuseKey(key []byte) *Error {
	if t.notOwned == 0 {
		return nil
	}
	s := keySlot(key)
	switch t.state[s] {
	case hsAbsent:
		return &Error{Code: CodeWrongGroup, Field: "key", Message: fmt.Sprintf("hash slot %d of this key is not owned by this group: refresh the slot map", s)}
	case hsFrozen:
		return &Error{Code: CodeSlotMoving, Field: "key", Message: fmt.Sprintf("hash slot %d of this key is moving to another group: retry shortly", s)}
	}
	return nil
}

// refuse answers an op any of whose keys' slots is not owned: the op is
// refused whole (nothing counted, no request id recorded), the first such
// key's answer, wrong_group before slot_moving.
func (t *hashSlotTable) refuse(checks []checkRef) *Error {
	if t.notOwned == 0 {
		return nil
	}
	var moving *Error
	for i := range checks {
		if e := t.refuseKey(checks[i].key); e != nil {
			if e.Code == CodeWrongGroup {
				return e
			}
			if moving == nil {
				moving = e
			}
		}
	}
	return moving
}

// hashSlotRefusals count the ops and commands refused for a slot not
// owned, on every replica alike (decided in apply).
type hashSlotRefusals struct {
	wrongGroup, moving atomic.Uint64
}

// HashSlotRefusals are the ops and per-key commands this replica's state
// machine refused with wrong_group and with slot_moving since it was
// opened (limitd_hashslot_refusals_total{code}).
func (f *FSM) HashSlotRefusals() (wrongGroup, slotMoving uint64) {
	return f.ap.hsRefusals.wrongGroup.Load(), f.ap.hsRefusals.moving.Load()
}

func (a *applier) counted(e *Error) *Error {
	switch {
	case e == nil:
	case e.Code == CodeWrongGroup:
		a.hsRefusals.wrongGroup.Add(1)
	default:
		a.hsRefusals.moving.Add(1)
	}
	return e
}

// refuseHashSlots is refuse, counted.
func (a *applier) refuseHashSlots(checks []checkRef) *Error { return a.counted(a.hs.refuse(checks)) }

// hashSlots is the published table (nil: the default, every slot owned).
type hashSlots struct {
	cur atomic.Pointer[hashSlotTable]
}

// stageHashSlots returns the apply goroutine's writable copy of the table.
func (a *applier) stageHashSlots() *hashSlotTable {
	if a.hsStaged {
		return a.hs
	}
	t := &hashSlotTable{}
	if a.hs != nil {
		*t = *a.hs
	}
	a.hs, a.hsStaged = t, true
	return t
}

func (a *applier) publishHashSlots() {
	if a.hsStaged {
		a.f.hashSlots.cur.Store(a.hs)
		a.hsStaged = false
	}
}

func (a *applier) discardHashSlots() {
	if a.hsStaged {
		a.hs, a.hsStaged = a.f.hashSlots.cur.Load(), false
	}
}

func (a *applier) storeHashSlots(tx *persist.Tx, t *hashSlotTable) error {
	return tx.PutPolicy(hashSlotsKey, t.encode())
}

// setHashSlot moves slot s to state by move and stores the table.
func (a *applier) setHashSlot(tx *persist.Tx, s hashslot.Slot, state uint8, move uint64) error {
	t := a.stageHashSlots()
	t.set(s, state, move)
	return a.storeHashSlots(tx, t)
}

func frozenBy(s hashslot.Slot, move uint64) *Error {
	return hsError(CodeConflict, "move", "hash slot %d is frozen by move %d", s, move)
}

// loadHashSlots reads the table's record (FSM.load); ok says the entry was
// the table's.
func loadHashSlots(dst **hashSlotTable, name string, enc []byte) (ok bool, err error) {
	if name != hashSlotsKey {
		return false, nil
	}
	t, err := decodeHashSlotTable(enc)
	if err != nil {
		return true, fmt.Errorf("%w: %v", persist.ErrCorrupt, err)
	}
	*dst = t
	return true, nil
}

// setHashSlots installs a loaded table (nil: the default).
func (f *FSM) setHashSlots(t *hashSlotTable) {
	f.hashSlots.cur.Store(t)
	f.ap.hs, f.ap.hsStaged = t, false
}

// HashSlotOwnership is this replica's ownership table as applied
// (nodeapi.HashSlotReader). Safe from any goroutine.
func (f *FSM) HashSlotOwnership() nodeapi.HashSlotOwnership {
	o := nodeapi.HashSlotOwnership{AppliedIndex: f.AppliedIndex()}
	t := f.hashSlots.cur.Load()
	if t == nil {
		o.Owned = hashslot.Count
		o.Runs = []nodeapi.HashSlotRun{{First: 0, Last: hashslot.Count - 1, State: nodeapi.HashSlotOwned}}
		return o
	}
	o.Tracked = true
	for s := 0; s < hashslot.Count; s++ {
		st := nodeapi.HashSlotState(t.state[s])
		switch st {
		case nodeapi.HashSlotOwned:
			o.Owned++
		case nodeapi.HashSlotFrozen:
			o.Frozen++
		default:
			o.Absent++
		}
		if n := len(o.Runs); n > 0 && o.Runs[n-1].State == st && int(o.Runs[n-1].Last) == s-1 {
			r := &o.Runs[n-1]
			r.Last = uint16(s)
			if r.Move != t.move[s] {
				r.Move = 0
			}
			continue
		}
		o.Runs = append(o.Runs, nodeapi.HashSlotRun{First: uint16(s), Last: uint16(s), State: st, Move: t.move[s]})
	}
	return o
}

var _ nodeapi.HashSlotReader = (*FSM)(nil)

// Encoders.

// EncodeHashSlotsOwn builds a CmdHashSlotsOwn entry: the group owns exactly
// slots, every other slot is absent. On a group that never had a table it
// sets one (a group with keys must take every slot: tracking on before its
// first move); on one that has it is accepted only when it names the
// slots already owned (a retry).
func EncodeHashSlotsOwn(now int64, slots []uint16) []byte {
	b := binary.AppendVarint([]byte{CmdHashSlotsOwn, cmdVersion}, now)
	b = binary.AppendUvarint(b, uint64(len(slots)))
	for _, s := range slots {
		b = binary.AppendUvarint(b, uint64(s))
	}
	return b
}

// EncodeHashSlotFreeze builds a CmdHashSlotFreeze entry.
func EncodeHashSlotFreeze(now int64, slot uint16, move uint64) []byte {
	b := binary.AppendVarint([]byte{CmdHashSlotFreeze, cmdVersion}, now)
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(slot)), move)
}

// EncodeHashSlotUnfreeze builds a CmdHashSlotUnfreeze entry.
func EncodeHashSlotUnfreeze(slot uint16, move uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint([]byte{CmdHashSlotUnfreeze, cmdVersion}, uint64(slot)), move)
}

// EncodeHashSlotImport builds a CmdHashSlotImport entry from a freeze's
// export; lastNow is the exporting group's LastTime (at least the export's
// own, which the blob carries too).
func EncodeHashSlotImport(now int64, slot uint16, move uint64, lastNow int64, blob []byte) []byte {
	b := binary.AppendVarint([]byte{CmdHashSlotImport, cmdVersion}, now)
	b = binary.AppendUvarint(binary.AppendUvarint(b, uint64(slot)), move)
	b = binary.AppendVarint(b, lastNow)
	return appendString(b, unsafe.String(unsafe.SliceData(blob), len(blob)))
}

// EncodeHashSlotDrop builds a CmdHashSlotDrop entry.
func EncodeHashSlotDrop(slot uint16, move uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint([]byte{CmdHashSlotDrop, cmdVersion}, uint64(slot)), move)
}

// hashSlotCmd is a decoded hash slot command.
type hashSlotCmd struct {
	now, lastNow int64
	slot         uint64 // may be out of range: refused in apply, never fatal
	move         uint64
	slots        []uint64
	blob         []byte // aliases the entry
}

func init() {
	slotMove := func(c *command, d *decoder) {
		c.hs.slot, c.hs.move = d.uvarint(), d.uvarint()
	}
	// reg registers a command whose answer is an *Error or nil.
	reg := func(typ byte, name string, decode func(c *command, d *decoder), apply func(a *applier, tx *persist.Tx, c *command) (*Error, error)) {
		registerCommand(typ, commandType{name: name, decode: decode,
			apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
				e, err := apply(a, tx, c)
				return errResponse(e), err
			}})
	}
	reg(CmdHashSlotsOwn, "own hash slots", func(c *command, d *decoder) {
		c.hs.now = d.varint()
		n := d.count(1)
		c.hs.slots = c.hs.slots[:0]
		for i := 0; i < n; i++ {
			c.hs.slots = append(c.hs.slots, d.uvarint())
		}
	}, (*applier).ownHashSlots)
	registerCommand(CmdHashSlotFreeze, commandType{
		name: "freeze hash slot",
		decode: func(c *command, d *decoder) {
			c.hs.now = d.varint()
			slotMove(c, d)
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			blob, e, err := a.freezeHashSlot(tx, c)
			if e != nil || err != nil {
				return errResponse(e), err
			}
			return blob, nil
		},
	})
	reg(CmdHashSlotUnfreeze, "unfreeze hash slot", slotMove, (*applier).unfreezeHashSlot)
	reg(CmdHashSlotImport, "import hash slot", func(c *command, d *decoder) {
		c.hs.now = d.varint()
		slotMove(c, d)
		c.hs.lastNow = d.varint()
		c.hs.blob = d.bytes()
	}, (*applier).importHashSlot)
	reg(CmdHashSlotDrop, "drop hash slot", slotMove, (*applier).dropHashSlot)
}

func hsError(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// hsTarget is a command's slot, checked, and the table it applies to.
func (a *applier) hsTarget(c *command) (hashslot.Slot, *hashSlotTable, *Error) {
	s, e := c.hs.slotOf()
	return s, a.hs, e
}

// slotOf checks a command's slot and move id.
func (c *hashSlotCmd) slotOf() (hashslot.Slot, *Error) {
	if c.slot >= hashslot.Count {
		return 0, hsError(CodeInvalidArgument, "hash_slot", "must be below %d", hashslot.Count)
	}
	if c.move == 0 {
		return 0, hsError(CodeInvalidArgument, "move", "a move id is required (not 0)")
	}
	return hashslot.Slot(c.slot), nil
}

func (a *applier) ownHashSlots(tx *persist.Tx, c *command) (*Error, error) {
	clamp(tx, c.hs.now)
	var want [hashslot.Count]bool
	for _, s := range c.hs.slots {
		if s >= hashslot.Count {
			return hsError(CodeInvalidArgument, "hash_slots", "hash slot %d: must be below %d", s, hashslot.Count), nil
		}
		want[s] = true
	}
	if cur := a.hs; cur != nil {
		for s := range want {
			if want[s] != (cur.state[s] == hsOwned) {
				return hsError(CodeConflict, "hash_slots", "this group already has its hash slot table, and hash slot %d is %s here", s, nodeapi.HashSlotState(cur.state[s])), nil
			}
		}
		return nil, nil // a retry of the command that set it
	}
	all := true
	for _, w := range want {
		all = all && w
	}
	if !all && tx.Meta().Keys > 0 {
		return hsError(CodeConflict, "hash_slots", "a group that holds keys owns every hash slot when it starts tracking them: move hash slots out instead"), nil
	}
	t := a.stageHashSlots()
	for s, w := range want {
		if !w {
			t.set(hashslot.Slot(s), hsAbsent, 0)
		}
	}
	if tx.Meta().RequestIDs > 0 {
		latest, err := tx.MaxRequestExpiry()
		if err != nil {
			return nil, err
		}
		t.exactAfter = latest
	}
	return nil, a.storeHashSlots(tx, t)
}

func (a *applier) freezeHashSlot(tx *persist.Tx, c *command) ([]byte, *Error, error) {
	now := clamp(tx, c.hs.now)
	s, e := c.hs.slotOf()
	if e != nil {
		return nil, e, nil
	}
	t := a.hs
	if t == nil {
		return nil, hsError(CodeConflict, "hash_slot", "this group does not track its hash slots yet: own them first (every slot)"), nil
	}
	switch {
	case t.state[s] == hsAbsent:
		return nil, hsError(CodeWrongGroup, "hash_slot", "hash slot %d is not owned by this group", s), nil
	case t.state[s] == hsFrozen && t.move[s] != c.hs.move:
		return nil, frozenBy(s, t.move[s]), nil
	case t.state[s] == hsOwned && now < t.exactAfter:
		return nil, hsError(CodeUnavailable, "hash_slot", "request ids recorded before this group tracked its hash slots live until %d: retry then", t.exactAfter), nil
	}
	blob, err := a.exportHashSlot(tx, s, c.hs.move)
	if err != nil {
		return nil, nil, err
	}
	if len(blob) > maxHashSlotExport {
		// Refused before the slot is frozen: it keeps serving.
		return nil, hsError(CodePayloadTooLarge, "hash_slot", "hash slot %d exports %d bytes, more than the %d an entry carries", s, len(blob), maxHashSlotExport), nil
	}
	if t.state[s] == hsOwned {
		if err := a.setHashSlot(tx, s, hsFrozen, c.hs.move); err != nil {
			return nil, nil, err
		}
	}
	return blob, nil, nil
}

func (a *applier) unfreezeHashSlot(tx *persist.Tx, c *command) (*Error, error) {
	s, t, e := a.hsTarget(c)
	if e != nil {
		return e, nil
	}
	switch {
	case t == nil || t.state[s] == hsOwned:
		return nil, nil // never frozen, or unfrozen already
	case t.state[s] == hsAbsent:
		return hsError(CodeWrongGroup, "hash_slot", "hash slot %d was dropped by this group", s), nil
	case t.move[s] != c.hs.move:
		return frozenBy(s, t.move[s]), nil
	}
	return nil, a.setHashSlot(tx, s, hsOwned, c.hs.move)
}

func (a *applier) dropHashSlot(tx *persist.Tx, c *command) (*Error, error) {
	s, t, e := a.hsTarget(c)
	if e != nil {
		return e, nil
	}
	switch {
	case t == nil || t.state[s] == hsOwned:
		return hsError(CodeConflict, "hash_slot", "hash slot %d is owned here: freeze it (and import it elsewhere) before dropping it", s), nil
	case t.state[s] == hsAbsent && t.move[s] == c.hs.move:
		return nil, nil // dropped already
	case t.state[s] == hsAbsent:
		return hsError(CodeWrongGroup, "hash_slot", "hash slot %d is not owned by this group", s), nil
	case t.move[s] != c.hs.move:
		return frozenBy(s, t.move[s]), nil
	}
	recs, err := a.slotRecords(tx, s)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if err := a.deleteSlotRecord(tx, r.key); err != nil {
			return nil, err
		}
	}
	// The slot's request-id records stay until they expire: every op of
	// the slot is refused before the request table is read, so none is
	// replayed here, and an op that spanned another slot keeps its replay.
	return nil, a.setHashSlot(tx, s, hsAbsent, c.hs.move)
}

func (a *applier) deleteSlotRecord(tx *persist.Tx, key []byte) error {
	st, err := tx.State(key)
	if err != nil {
		return err
	}
	if err := tx.DeleteState(key, st); err != nil {
		return err
	}
	if key[0] == banKeyPrefix {
		a.banSwept(key) // ban.go: out of the ban index
	}
	if c := a.f.opts.OverLimit; c != nil && (key[0] == 'p' || key[0] == 's') {
		if ident, user, ok := splitStateKey(key); ok {
			c.Forget(overlimit.LimitID{Policy: key[0] == 'p', Ident: string(ident)}, user)
		}
	}
	return nil
}

// importHashSlot writes an export into this group and owns its slot.
func (a *applier) importHashSlot(tx *persist.Tx, c *command) (*Error, error) {
	clamp(tx, c.hs.now)
	s, t, e := a.hsTarget(c)
	if e != nil {
		return e, nil
	}
	if t == nil {
		return hsError(CodeConflict, "hash_slot", "hash slot %d is owned here already (this group does not track its slots)", s), nil
	}
	switch {
	case t.state[s] == hsOwned && t.move[s] == c.hs.move:
		return nil, nil // imported already
	case t.state[s] != hsAbsent:
		return hsError(CodeConflict, "hash_slot", "hash slot %d is %s here", s, nodeapi.HashSlotState(t.state[s])), nil
	}
	x, err := decodeExport(c.hs.blob)
	if err != nil {
		return hsError(CodeInvalidArgument, "blob", "%v", err), nil
	}
	if x.slot != s || x.move != c.hs.move {
		return hsError(CodeInvalidArgument, "blob", "the export is of slot %d by move %d, not slot %d by move %d", x.slot, x.move, s, c.hs.move), nil
	}
	// Time never runs backwards for the moved keys: this group decides
	// from now on at no earlier time than the one that exported them.
	if m := max(x.lastNow, c.hs.lastNow); m > tx.Meta().LastTime {
		tx.SetLastTime(m)
	}
	for _, r := range x.states {
		st, err := tx.State(r.key)
		if err != nil {
			return nil, err
		}
		if err := tx.PutState(r.key, st, r.data, r.expiry); err != nil {
			return nil, err
		}
		if r.key[0] == banKeyPrefix {
			if policy, key, ok := splitBanKey(r.key); ok {
				if n, until, err := decodeBan(r.data); err == nil {
					a.f.bans.stage(policy, key, banEntry{until: until, offences: n})
				}
			}
		}
	}
	for _, r := range x.requests {
		prev, err := tx.Request(r.key)
		if err != nil {
			return nil, err
		}
		if prev.Found && prev.Expiry > r.expiry {
			continue // a later use of the id here; ids are the clients' to keep unique
		}
		if err := tx.PutRequest(r.key, prev, r.data, r.expiry); err != nil {
			return nil, err
		}
		if err := a.putRequestSlot(tx, s, r.key, r.expiry); err != nil {
			return nil, err
		}
	}
	return nil, a.setHashSlot(tx, s, hsOwned, c.hs.move)
}

// The request-id index of a tracked group.

func requestSlotKey(dst []byte, s hashslot.Slot, id []byte) []byte {
	dst = append(dst[:0], requestSlotPrefix, byte(s>>8), byte(s))
	return append(dst, id...)
}

func (a *applier) putRequestSlot(tx *persist.Tx, s hashslot.Slot, id []byte, expiry int64) error {
	a.hsKeyBuf = requestSlotKey(a.hsKeyBuf, s, id)
	st, err := tx.State(a.hsKeyBuf)
	if err != nil {
		return err
	}
	return tx.PutState(a.hsKeyBuf, st, []byte{1}, expiry)
}

// indexRequest records, in a tracked group, the slots of an op whose
// request id was just recorded (applyOp).
func (a *applier) indexRequest(tx *persist.Tx, id []byte, checks []checkRef, expiry int64) error {
	var done [4]hashslot.Slot
	n := 0
	for i := range checks {
		s := keySlot(checks[i].key)
		if slices.Contains(done[:n], s) {
			continue
		}
		if n < len(done) {
			done[n] = s
			n++
		}
		if err := a.putRequestSlot(tx, s, id, expiry); err != nil {
			return err
		}
	}
	return nil
}

// Export and the slot's records.

// slotRecord is one record of a slot: a state-bucket record, or a request
// id's record.
type slotRecord struct {
	key, data []byte
	expiry    int64
}

// slotRecords collects every per-key record of slot s in key order, copied:
// key states under every policy, inline limit and plan limit, and the
// records beside them (leases, bans, notify marks, usage history,
// reservations, plan assignments and overrides), and the slot's 'Q'
// request-id index. A concurrency limit's slots are part of its key's
// state. Not per key, so not moved: policy fences ('F'), degraded charge
// ids ('D'), the outbox ('O'), top keys (memory only).
func (a *applier) slotRecords(tx *persist.Tx, s hashslot.Slot) ([]slotRecord, error) {
	var recs []slotRecord
	qp := requestSlotKey(nil, s, nil)
	match := func(key []byte) bool {
		if key[0] == requestSlotPrefix {
			return bytes.HasPrefix(key, qp)
		}
		u, ok := userKeyOf(key)
		return ok && keySlot(u) == s
	}
	err := tx.ScanLiveStates(nil, match, func(key []byte, st persist.State) error {
		recs = append(recs, slotRecord{key: bytes.Clone(key), data: bytes.Clone(st.Data), expiry: st.Expiry})
		return nil
	})
	slices.SortFunc(recs, func(x, y slotRecord) int { return bytes.Compare(x.key, y.key) })
	return recs, err
}

// userKeyOf is the user key inside a per-key record's storage key.
func userKeyOf(k []byte) ([]byte, bool) {
	if len(k) < 2 {
		return nil, false
	}
	switch k[0] {
	case 'p', 's', tagPlanLimit:
		_, u, ok := splitStateKey(k)
		return u, ok
	case tagAssignment, tagOverride:
		return k[1:], true
	case leaseKeyPrefix, banKeyPrefix, notifyKeyPrefix, tagUsage:
		_, u, ok := splitStateKey(k[1:])
		return u, ok
	case tagUsageWindow:
		if len(k) < 1+8 {
			return nil, false
		}
		_, u, ok := splitStateKey(k[1 : len(k)-8])
		return u, ok
	case reservationKeyPrefix:
		n, w := binary.Uvarint(k[1:])
		if w <= 0 || uint64(len(k)-1-w) < n {
			return nil, false
		}
		_, u, ok := splitStateKey(k[1+w : 1+w+int(n)])
		return u, ok
	}
	return nil, false
}

// splitStateKey reads a key state's storage key, tag ‖ uvarint(len) ‖
// identity ‖ key.
func splitStateKey(k []byte) (ident, key []byte, ok bool) {
	if len(k) < 2 || k[0] != 'p' && k[0] != 's' && k[0] != tagPlanLimit {
		return nil, nil, false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)-1-w) <= n {
		return nil, nil, false // a key is never empty
	}
	return k[1+w : 1+w+int(n)], k[1+w+int(n):], true
}

// The export blob: deterministic (records in key order, from the state the
// entry is applied to), so every replica computes the same bytes.
//
//	version ‖ uvarint(slot) ‖ uvarint(move) ‖ varint(lastNow) ‖
//	uvarint(n) ‖ n × (bytes(key) ‖ varint(expiry) ‖ bytes(data)) ‖
//	uvarint(m) ‖ m × (bytes(request id) ‖ varint(expiry) ‖ bytes(record)) ‖
//	be32(CRC-32C of all before)
const hsExportVersion byte = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type slotExport struct {
	slot             hashslot.Slot
	move             uint64
	lastNow          int64
	states, requests []slotRecord
}

func (a *applier) exportHashSlot(tx *persist.Tx, s hashslot.Slot, move uint64) ([]byte, error) {
	recs, err := a.slotRecords(tx, s)
	if err != nil {
		return nil, err
	}
	x := slotExport{slot: s, move: move, lastNow: tx.Meta().LastTime}
	for _, r := range recs {
		if r.key[0] != requestSlotPrefix {
			x.states = append(x.states, r)
			continue
		}
		id := r.key[3:]
		req, err := tx.Request(id)
		if err != nil {
			return nil, err
		}
		if req.Found {
			x.requests = append(x.requests, slotRecord{key: id, data: bytes.Clone(req.Result), expiry: req.Expiry})
		}
	}
	return x.encode(), nil
}

func (x *slotExport) encode() []byte {
	b := []byte{hsExportVersion}
	b = binary.AppendUvarint(b, uint64(x.slot))
	b = binary.AppendUvarint(b, x.move)
	b = binary.AppendVarint(b, x.lastNow)
	for _, rs := range [][]slotRecord{x.states, x.requests} {
		b = binary.AppendUvarint(b, uint64(len(rs)))
		for _, r := range rs {
			b = appendString(b, string(r.key))
			b = binary.AppendVarint(b, r.expiry)
			b = appendString(b, string(r.data))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errExport = errors.New("damaged hash slot export")

// decodeExport reads and checks an export: its checksum, and that every
// record is of its slot, in strictly increasing key order, and decodes.
func decodeExport(b []byte) (*slotExport, error) {
	if len(b) < 5 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum", errExport)
	}
	d := decoder{b: b[:len(b)-4]}
	if v := d.byte(); d.err == nil && v != hsExportVersion {
		return nil, fmt.Errorf("%w: version %d", errExport, v)
	}
	slot := d.uvarint()
	x := &slotExport{slot: hashslot.Slot(slot), move: d.uvarint(), lastNow: d.varint()}
	if d.err == nil && slot >= hashslot.Count {
		return nil, fmt.Errorf("%w: slot %d", errExport, slot)
	}
	for part, dst := range []*[]slotRecord{&x.states, &x.requests} {
		n := d.count(3)
		for i := 0; i < n && d.err == nil; i++ {
			r := slotRecord{key: d.bytes(), expiry: d.varint(), data: d.bytes()}
			if d.err != nil {
				break
			}
			if k := len(*dst); k > 0 && bytes.Compare((*dst)[k-1].key, r.key) >= 0 {
				return nil, fmt.Errorf("%w: records out of order", errExport)
			}
			if err := x.checkRecord(part == 1, r); err != nil {
				return nil, err
			}
			*dst = append(*dst, r)
		}
	}
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b)-d.off)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", errExport, d.err)
	}
	return x, nil
}

func (x *slotExport) checkRecord(request bool, r slotRecord) error {
	if request {
		if len(r.key) == 0 || len(r.key) > MaxRequestIDBytes {
			return fmt.Errorf("%w: a request id of %d bytes", errExport, len(r.key))
		}
		if _, _, err := decodeRequestRecord(r.data); err != nil {
			return fmt.Errorf("%w: request %q: %v", errExport, r.key, err)
		}
		return nil
	}
	if len(r.key) == 0 || len(r.key) > persist.MaxKeySize {
		return fmt.Errorf("%w: a key of %d bytes", errExport, len(r.key))
	}
	if r.key[0] == requestSlotPrefix {
		return fmt.Errorf("%w: a request index record among the states", errExport)
	}
	if u, ok := userKeyOf(r.key); !ok || keySlot(u) != x.slot {
		return fmt.Errorf("%w: record %q is not of slot %d", errExport, r.key, x.slot)
	}
	return nil
}

// applyOwned answers, in a group with slots it does not own, the commands
// other than checks that write a key's records (checks and resets are
// refused where they are decided): a frozen slot's records must not change
// after its export, an absent slot's are another group's. done: resp is
// the command's answer; otherwise the command applies as always.
func (a *applier) applyOwned(tx *persist.Tx, c *command) (resp interface{}, done bool, err error) {
	t := a.hs
	switch c.typ {
	case CmdAssignPlans:
		for i, as := range c.pl.assigns {
			if e := a.counted(t.refuseKey([]byte(as.Key))); e != nil {
				return error(e.Under(fmt.Sprintf("assignments[%d]", i))), true, nil
			}
		}
	case CmdPutOverride, CmdDeleteOverride:
		if e := a.counted(t.refuseKey([]byte(c.pl.key))); e != nil {
			return error(e), true, nil
		}
	case CmdUnban:
		if e := a.counted(t.refuseKey([]byte(c.addr))); e != nil {
			return error(e), true, nil
		}
	case CmdChargeDegraded:
		cs, err := decodeDegradedCharges(c.domain)
		if err != nil {
			return nil, false, nil // the command answers its own malformed input
		}
		for i := range cs {
			if e := a.counted(t.refuseKey([]byte(cs[i].Key))); e != nil {
				return error(e.Under(fmt.Sprintf("charges[%d]", i))), true, nil
			}
		}
	case CmdGrantLease, CmdReturnLease:
		return a.applyOwnedLeases(tx, c)
	}
	return nil, false, nil
}

// applyOwnedLeases applies the leases of owned keys and answers the others
// with their refusal (a grant) or nothing credited (a return).
func (a *applier) applyOwnedLeases(tx *persist.Tx, c *command) (interface{}, bool, error) {
	refused := make([]*Error, len(c.leases))
	n := 0
	for i := range c.leases {
		if refused[i] = a.counted(a.hs.refuseKey(c.leases[i].check.key)); refused[i] != nil {
			n++
		}
	}
	if n == 0 {
		return nil, false, nil
	}
	all := c.leases
	kept := make([]leaseRef, 0, len(all)-n)
	for i := range all {
		if refused[i] == nil {
			kept = append(kept, all[i])
		}
	}
	c.leases = kept
	r, err := commands[c.typ].apply(a, tx, c)
	c.leases = all
	if err != nil {
		return nil, true, err
	}
	j := 0
	if c.typ == CmdGrantLease {
		gs, _ := r.([]LeaseGrant)
		out := make([]LeaseGrant, len(all))
		for i := range all {
			if refused[i] != nil {
				out[i] = LeaseGrant{ID: all[i].id, Err: refused[i]}
			} else {
				out[i], j = gs[j], j+1
			}
		}
		return out, true, nil
	}
	credited, _ := r.([]int64)
	out := make([]int64, len(all))
	for i := range all {
		if refused[i] == nil {
			out[i], j = credited[j], j+1
		}
	}
	return out, true, nil
}
