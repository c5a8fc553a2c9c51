package nodeapi

import "time"

// Hash slot ownership: a data group's own record of which of the 4,096 hash
// slots (package hashslot) it answers for. The state machine keeps it
// (fsm/hashslot.go) and refuses, in apply, a check of a key whose slot it does
// not own, so a router with a stale slot map costs a retry, never a decision
// made in the wrong group.

// Error codes of hash slot ownership.
const (
	// CodeWrongGroup: the key's hash slot is not owned by the group that
	// received the check (a stale slot map). Nothing was counted; refresh
	// the map and send the check to the slot's group.
	CodeWrongGroup Code = "wrong_group"
	// CodeSlotMoving: the key's hash slot is moving between groups (frozen
	// in the old one). Nothing was counted; retry shortly.
	CodeSlotMoving Code = "slot_moving"
)

// SlotMovingRetryAfter is the wait suggested with slot_moving: a move holds
// its slot for one export and one import entry, about two Raft rounds.
const SlotMovingRetryAfter = 100 * time.Millisecond

// HashSlotState is one hash slot's state in a group's ownership table.
type HashSlotState uint8

const (
	HashSlotOwned  HashSlotState = 0 // checks of its keys are decided here
	HashSlotFrozen HashSlotState = 1 // moving out: checks answer slot_moving
	HashSlotAbsent HashSlotState = 2 // another group's: checks answer wrong_group
)

func (s HashSlotState) String() string {
	switch s {
	case HashSlotOwned:
		return "owned"
	case HashSlotFrozen:
		return "frozen"
	case HashSlotAbsent:
		return "absent"
	}
	return "unknown"
}

// HashSlotRun is a maximal run of consecutive hash slots in one state,
// First to Last inclusive. Move is the move id of the run's last transition
// when every slot of the run has the same one (0 otherwise or for none).
type HashSlotRun struct {
	First, Last uint16
	State       HashSlotState
	Move        uint64
}

// HashSlotOwnership is a group's ownership table as of its applied state.
type HashSlotOwnership struct {
	// Tracked: the table was set by a hash slot command. A group that
	// never had one (every single-group cluster) owns every slot.
	Tracked               bool
	Owned, Frozen, Absent int
	// Runs covers the 4,096 slots in order.
	Runs []HashSlotRun
	// AppliedIndex is the Raft index the table is read at.
	AppliedIndex uint64
}

// HashSlotReader reads a group's ownership table (a status page, the slot
// routes, the mover): fsm.FSM implements it.
type HashSlotReader interface {
	HashSlotOwnership() HashSlotOwnership
}
