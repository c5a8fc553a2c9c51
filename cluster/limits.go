package cluster

import (
	"time"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Bounds on what one Raft entry may carry, whatever entry point the ops came
// through (a client on the leader, a follower's forwarded batch, or a forged
// request to /internal/v1/check). The batchers never pack more into one
// entry; a single unit that cannot be split and exceeds them is refused with
// ErrTooLarge before anything is proposed.
const (
	// MaxEntryOps bounds the ops in one check entry (and Config.BatchMaxOps).
	MaxEntryOps = forward.MaxEntryOps
	// MaxEntryBytes bounds the encoded ops of one check entry (defined
	// in nodeapi, where the HTTP API takes its body ceiling from).
	MaxEntryBytes = nodeapi.MaxEntryBytes
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
var ErrTooLarge = nodeapi.ErrTooLarge

// opsSize is forward.OpsSize: an upper bound on the encoded size of ops.
func opsSize(ops []fsm.Op) int { return forward.OpsSize(ops) }
