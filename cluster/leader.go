package cluster

// Where the leader is, cheaply: front ends tell clients on every response
// answered by a follower (the Limitd-Leader header), so that leader-aware
// clients skip the forwarding hop. Status would cost a configuration read
// and copies per request; these read Raft's leader under its own read lock.

// LeaderID returns the id of the Raft leader as this node last heard it
// ("" while none is known) and whether that is this node. It allocates
// nothing; callers may use it on every request and cache LeaderHTTPAddr by
// its result.
func (n *Node) LeaderID() (id string, self bool) {
	_, lid := n.raft.LeaderWithID()
	return string(lid), lid != "" && string(lid) == n.cfg.NodeID
}

// LeaderHTTPAddr returns the leader's id and the HTTP address it registered
// in the replicated node table (addr "" while no leader is known or it has
// not registered yet), in the form of Status.LeaderHTTP. It copies the node
// table: cache it by LeaderID.
func (n *Node) LeaderHTTPAddr() (id, addr string) { return n.leaderHTTP() }
