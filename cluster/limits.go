package cluster

import (
	"errors"
	"time"

	"github.com/limitd/limitd/fsm"
)

// Bounds on what one Raft entry may carry, whatever entry point the ops came
// through (a client on the leader, a follower's forwarded batch, or a forged
// request to /internal/v1/check). The batchers never pack more into one
// entry; a single unit that cannot be split and exceeds them is refused with
// ErrTooLarge before anything is proposed.
const (
	// MaxEntryOps bounds the ops in one check entry (and Config.BatchMaxOps).
	MaxEntryOps = 8192
	// MaxEntryBytes bounds the encoded ops of one check entry, and so the
	// body of a forwarded batch. A public request within the HTTP API's
	// default body limit (1 MiB of JSON) always fits: the binary encoding of
	// a check is smaller than its JSON. The api package should take its
	// MaxBodyBytes ceiling from here.
	MaxEntryBytes = 4 << 20
	// MaxCommandBytes bounds one admin command (policy, key reset, node table).
	MaxCommandBytes = 64 << 10
	// DefaultBatchMaxOps is the default of Config.BatchMaxOps.
	DefaultBatchMaxOps = 2048
	// MaxRequestIDRetention bounds Config.RequestIDRetention: a request_id
	// is remembered at most a week (entries carry leader time + retention,
	// which overflowed int64 nanoseconds near 292 years).
	MaxRequestIDRetention = 7 * 24 * time.Hour
)

// ErrTooLarge: the ops cannot be proposed as one entry within MaxEntryOps and
// MaxEntryBytes and cannot be split (one atomic unit). Nothing was proposed.
// HTTP answers 413.
var ErrTooLarge = errors.New("too large for one raft entry")

// opsSize is an upper bound on the encoded size of ops (fsm.AppendOps),
// computed without encoding: every varint counted at its widest.
func opsSize(ops []fsm.Op) int {
	const varint = 10
	const specFixed = 2 + 3*varint + 2 + varint // algo.AppendSpec without the time zone
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
		}
	}
	return n
}
