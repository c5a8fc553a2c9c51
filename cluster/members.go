package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// isMember reports whether id is a server in the latest configuration.
func isMember(r *raft.Raft, id string) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(id) {
			return true
		}
	}
	return false
}

// addressTaken refuses a join at a Raft address another member has: 409
// naming that member (it answered 500).
func addressTaken(r *raft.Raft, id, raftAddr string) *fsm.Error {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil // AddVoter reports the same failure
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) == raftAddr && string(s.ID) != id {
			return &fsm.Error{Code: fsm.CodeConflict, Field: "raft_addr",
				Message: fmt.Sprintf("raft address %.64q is member %.64q's; remove that member first, or give this node its own address", raftAddr, s.ID)}
		}
	}
	return nil
}
