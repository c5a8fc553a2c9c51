package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
)

// checkPeerIdentity admits a node-to-node request only as the node its
// certificate names (raftnet: the URI SAN limitd://node/<id>): a member
// of the configuration may call every internal endpoint (it forwards checks,
// admin commands and operators' joins); any other named node may only ask
// the bootstrap information and join as itself. So a certificate of a node
// outside the cluster (removed, or never admitted) cannot join as another
// node nor forward anything. A certificate naming no node (issued before
// this rule) is accepted as any node. It writes the refusal (403) itself.
func (n *Node) checkPeerIdentity(w http.ResponseWriter, r *http.Request) bool {
	if n.cfg.TLS == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return true // authenticate has required what TLS requires
	}
	id, named := raftnet.NodeIDFromCert(r.TLS.PeerCertificates[0])
	if !named || n.isMember(id) {
		return true
	}
	switch r.URL.Path {
	case pathBootstrap:
		return true
	case pathJoin:
		body, err := io.ReadAll(io.LimitReader(r.Body, maxMembershipBody+1))
		if err != nil {
			http.Error(w, "read join request: "+err.Error(), http.StatusBadRequest)
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(body)) // handleMembership reads it again
		var jr joinRequest
		if json.Unmarshal(body, &jr) == nil && jr.ID == id {
			return true
		}
		http.Error(w, fmt.Sprintf("this certificate names node %.64q, which may join only as itself (the request joins %.64q)", id, jr.ID), http.StatusForbidden)
		return false
	}
	http.Error(w, fmt.Sprintf("this certificate names node %.64q, which is not a member of the cluster", id), http.StatusForbidden)
	return false
}

// isMember reports whether id is a server in the latest configuration.
func (n *Node) isMember(id string) bool {
	f := n.raft.GetConfiguration()
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
func (n *Node) addressTaken(id, raftAddr string) *fsm.Error {
	f := n.raft.GetConfiguration()
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
