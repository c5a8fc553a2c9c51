package cluster

import (
	"context"
	"time"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Allow and deny lists, replicated through the log like RLS domains
// (fsm/lists.go). The Raft layer only replicates them: the service
// validates a list and hands over its canonical encoding, and every node
// compiles and answers lists from its own replicated copy.

// PutList stores a list's canonical encoding (validated by the caller)
// through the leader. Errors as PutPolicy's.
func (n *Node) PutList(ctx context.Context, name string, canonical []byte) error {
	return n.applyAdmin(ctx, fsm.EncodePutList(name, canonical))
}

// DeleteList removes a list through the leader; *nodeapi.Error not_found
// when it does not exist.
func (n *Node) DeleteList(ctx context.Context, name string) error {
	return n.applyAdmin(ctx, fsm.EncodeDeleteList(name))
}

// List returns this replica's canonical encoding of a list.
func (n *Node) List(name string) ([]byte, bool) {
	l, ok := n.fsm.List(name)
	return l.Config, ok
}

// Lists returns this replica's lists sorted by name.
func (n *Node) Lists() []nodeapi.List { return n.fsm.Lists() }

// ListsVersion changes whenever this replica's lists change.
func (n *Node) ListsVersion() uint64 { return n.fsm.ListsVersion() }

// LeaderTime is the time a check decided on this node now is decided at:
// the local clock, but never before the leader time of the last entry
// applied here (the same lower bound the leader stamps entries with), so
// an expiry in leader time is never read as earlier than a replica that
// applied the same entries would read it.
func (n *Node) LeaderTime() int64 {
	return max(time.Now().UnixNano(), n.fsm.LastTime())
}
