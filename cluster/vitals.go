package cluster

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// vitals is whether this node can serve at all: a fatal error (its state
// machine stopped applying, its Raft log could not be written, its history
// diverged from the leader's, its disk stalled) stops it for good, and its
// removal from the configuration ends its service. It owns those states and
// the channels that announce them (Node.Failed, Node.Removed); Node.Health
// and every proposal path read unavailable.
type vitals struct {
	fatal       atomic.Pointer[error]
	halted      chan struct{} // closed when the state machine stops applying
	haltOnce    sync.Once
	wasMember   atomic.Bool   // this node has seen itself in the configuration
	removed     chan struct{} // closed when this node is removed from the configuration
	removedFlag atomic.Bool

	self raft.ServerID
	log  *slog.Logger
	raft *raft.Raft // nil until Raft starts
	ol   *OverLimit // stops answering with the node
	// placed: a data group's node (Config.LeaderHint), which leaves and
	// rejoins its group's configuration as placement moves replicas, and
	// forwards while it holds none: its removal is no end of service.
	placed bool
}

// onFatal is the state machine's OnFatal: it stopped applying (a failed
// commit, such as a full disk, or an entry it cannot apply).
func (v *vitals) onFatal(err error) {
	v.fail(fmt.Errorf("the state machine stopped applying: %w", err), false)
}

// logStoreFailed: a write to the Raft log or stable store failed (disk
// full, I/O error). Raft on this node stops, so a node that cannot write
// its log does not take part in elections it would win and lose again.
func (v *vitals) logStoreFailed(err error) {
	v.fail(fmt.Errorf("the raft log could not be written: %w", err), true)
}

// fail stops the node from serving, once: every waiter answers at once
// (await watches halted), checks answer ErrUnavailable naming the cause, and
// Failed is closed so the process can exit for its supervisor.
func (v *vitals) fail(err error, stopRaft bool) {
	if !v.fatal.CompareAndSwap(nil, &err) {
		return
	}
	v.haltOnce.Do(func() { close(v.halted) })
	v.ol.disable()
	v.log.Error("this node stopped serving; fix the cause and restart it", "error", err)
	switch {
	case v.raft == nil:
	case stopRaft:
		go v.raft.Shutdown()
	case v.raft.State() == raft.Leader:
		go v.raft.LeadershipTransfer()
	}
}

// membership reports whether the latest Raft configuration has servers, and
// whether this node is one of them.
func (v *vitals) membership() (known, member bool) {
	f := v.raft.GetConfiguration()
	if f.Error() != nil {
		return false, false
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		if s.ID == v.self {
			v.wasMember.Store(true)
			return true, true
		}
	}
	return len(servers) > 0, false
}

// watchMembership notices this node's removal: it was in the configuration
// and no longer is. (A joining node catching up passes through older
// configurations without itself before it first appears: not a removal.)
func (v *vitals) watchMembership() {
	known, member := v.membership()
	if known && !member && v.wasMember.Load() && !v.removedFlag.Load() && !v.placed {
		v.removedFlag.Store(true)
		close(v.removed)
		v.log.Warn("this node was removed from the cluster configuration; it no longer serves")
	}
}

// unavailable is non-nil (an error matching ErrUnavailable that names the
// cause) when this node cannot serve checks at all.
func (v *vitals) unavailable() error {
	if p := v.fatal.Load(); p != nil {
		return &unavailableError{Cause: *p}
	}
	if v.removedFlag.Load() {
		return &unavailableError{Cause: errRemoved}
	}
	return nil
}
