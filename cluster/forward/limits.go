package forward

import "github.com/limitd/limitd/fsm"

// MaxEntryOps bounds the ops in one check entry; with nodeapi.MaxEntryBytes
// it is what a forwarded unit may hold.
const MaxEntryOps = 8192

// OpsSize is an upper bound on the encoded size of ops (fsm.AppendOps),
// computed without encoding: every varint counted at its widest.
func OpsSize(ops []fsm.Op) int {
	const varint = 10
	const specFixed = 2 + 3*varint + 2 + varint + varint // algo.AppendSpec without the time zone (with a concurrency max_hold)
	n := 1 + varint
	for i := range ops {
		op := &ops[i]
		n += 1 + varint + len(op.RequestID) + varint
		for j := range op.Checks {
			c := &op.Checks[j]
			n += 1 + varint + len(c.Key) + varint + len(c.Policy) + varint
			if c.Spec != nil {
				n += varint + specFixed + len(c.Spec.Timezone)
			}
			if c.SlotOp != 0 {
				n += varint + len(c.Slot) // a release's or renewal's slot (fsm/slots.go)
			}
		}
	}
	return n
}
