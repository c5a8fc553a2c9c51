// Package hashslot owns the mapping of a key to one of Count fixed hash
// slots, and the slot map: which Raft group owns each slot, at which epoch.
//
// The rule is Redis Cluster's: a key's hash tag is the text inside its first
// "{...}" when that text is non-empty, else the whole key; the slot is
// CRC16-XMODEM of the tag modulo Count. Count divides Redis's 16,384, so a
// key's limitd slot is its Redis slot modulo 4,096. The policy is never
// hashed: every limit of one key lives in one slot, so check/all over one
// key (or one {tag}) is decided by one group atomically.
//
// Count and the rule are fixed forever: a slot is stored with the state it
// owns, and a changed rule would name another slot for a stored key.
package hashslot

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Count is the number of hash slots.
const Count = 4096

// Slot is a hash slot, in [0, Count).
type Slot uint16

// Tag is the part of key that is hashed: the text inside the first "{...}"
// when it is non-empty, else the whole key (Redis's rule: "{}" and an
// unclosed "{" hash the whole key).
func Tag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// Of is key's slot.
func Of(key string) Slot { return Slot(crc16(Tag(key)) % Count) }

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial 0), Redis Cluster's key
// hash, bit by bit over a 256-entry table built at init.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for b := 0; b < 8; b++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// Run is a range of consecutive slots, First..Last inclusive, owned by one
// group.
type Run struct {
	First, Last Slot
	Group       uint32
}

// Map says which group owns each slot. Epoch grows with every change, so a
// holder of two maps keeps the newer; a route taken from an older map costs
// a retry (the owning group refuses a slot it does not own), never a wrong
// decision.
type Map struct {
	Epoch  uint64
	Owners [Count]uint32
}

// Even is the map of epoch 1 that splits the slots into len(groups)
// contiguous runs of sizes differing by at most one, in the order given.
func Even(groups []uint32) (*Map, error) {
	if len(groups) == 0 || len(groups) > Count {
		return nil, fmt.Errorf("hashslot: %d groups: want 1 to %d", len(groups), Count)
	}
	m := &Map{Epoch: 1}
	n := len(groups)
	for s := 0; s < Count; s++ {
		m.Owners[s] = groups[s*n/Count]
	}
	return m, nil
}

// Group is the group that owns slot s.
func (m *Map) Group(s Slot) uint32 { return m.Owners[s] }

// GroupOf is the group that owns key's slot.
func (m *Map) GroupOf(key string) uint32 { return m.Owners[Of(key)] }

// Runs are the map's runs of slots with one owner, in slot order.
func (m *Map) Runs() []Run {
	var runs []Run
	for s := 0; s < Count; s++ {
		g := m.Owners[s]
		if len(runs) > 0 && runs[len(runs)-1].Group == g {
			runs[len(runs)-1].Last = Slot(s)
			continue
		}
		runs = append(runs, Run{First: Slot(s), Last: Slot(s), Group: g})
	}
	return runs
}

// Groups are the distinct owning groups, in order of their first slot.
func (m *Map) Groups() []uint32 {
	var gs []uint32
	seen := map[uint32]bool{}
	for _, g := range m.Owners {
		if !seen[g] {
			seen[g] = true
			gs = append(gs, g)
		}
	}
	return gs
}

// Encoding: a version byte, the epoch, then the runs (count, then first,
// last and group of each). Runs keep an even map a few dozen bytes.
const mapVersion = 1

// MarshalBinary encodes the map.
func (m *Map) MarshalBinary() ([]byte, error) {
	runs := m.Runs()
	b := make([]byte, 0, 1+8+4+len(runs)*8)
	b = append(b, mapVersion)
	b = binary.BigEndian.AppendUint64(b, m.Epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(runs)))
	for _, r := range runs {
		b = binary.BigEndian.AppendUint16(b, uint16(r.First))
		b = binary.BigEndian.AppendUint16(b, uint16(r.Last))
		b = binary.BigEndian.AppendUint32(b, r.Group)
	}
	return b, nil
}

// ErrBadMap is returned for an encoding that is not a whole map: damaged
// state is refused, never served.
var ErrBadMap = errors.New("hashslot: damaged slot map")

// UnmarshalBinary decodes a map, refusing one whose runs do not cover every
// slot exactly once in order.
func (m *Map) UnmarshalBinary(b []byte) error {
	if len(b) < 13 || b[0] != mapVersion {
		return ErrBadMap
	}
	epoch := binary.BigEndian.Uint64(b[1:])
	n := binary.BigEndian.Uint32(b[9:])
	b = b[13:]
	if n == 0 || n > Count || uint64(len(b)) != uint64(n)*8 {
		return ErrBadMap
	}
	var out Map
	out.Epoch = epoch
	next := 0
	for i := uint32(0); i < n; i++ {
		first := int(binary.BigEndian.Uint16(b))
		last := int(binary.BigEndian.Uint16(b[2:]))
		g := binary.BigEndian.Uint32(b[4:])
		b = b[8:]
		if first != next || last < first || last >= Count {
			return ErrBadMap
		}
		for s := first; s <= last; s++ {
			out.Owners[s] = g
		}
		next = last + 1
	}
	if next != Count {
		return ErrBadMap
	}
	*m = out
	return nil
}
