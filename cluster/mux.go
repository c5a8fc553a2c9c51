package cluster

import (
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster/raftnet"
)

// Several Raft groups in one process share the node's Raft port
// (raftnet.Mux, Config.RaftMux): each group is a Node of its own — its
// NetworkTransport, guard, vote gate, stores and state machine — and only
// the listener, its accept loop and the handshakes are shared
// (DESIGN.md, "One Raft port, several groups").

// GroupDataDir is where group g of a node keeps its state under the node's
// data dir: the root itself for group 0 (the layout of a one-group node,
// unchanged), groups/<g>/ for the others, so a group's files move whole.
func GroupDataDir(root string, g uint32) string {
	if g == 0 {
		return root
	}
	return filepath.Join(root, "groups", strconv.FormatUint(uint64(g), 10))
}

// muxCollectors counts the Raft connections the node's port refused before
// any group saw them. A port shared by several groups' Nodes is counted by
// each Node's registry; the daemon registers one.
func (n *Node) muxCollectors() []prometheus.Collector {
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_forward_wrong_group_total",
			Help: "Forwarded checks this node refused because they named another Raft group than its own."},
			func() float64 { return float64(n.fwdSrv.WrongGroup()) }),
	}
	m := n.raftMux()
	if m == nil {
		return cs
	}
	return append(cs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_raft_unknown_group_connections_total",
			Help: "Raft connections refused because their preamble named a group this node does not host."},
			func() float64 { return float64(m.Stats().UnknownGroup) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_raft_busy_connections_total",
			Help: "Raft connections closed at once because the port already had its bound of handshakes pending."},
			func() float64 { return float64(m.Stats().Busy) }))
}

// raftMux is the Raft port the node's transport is a group of; nil for a
// transport passed in (Config.Transport).
func (n *Node) raftMux() *raftnet.Mux {
	if n.cfg.RaftMux != nil {
		return n.cfg.RaftMux
	}
	if n.gate == nil {
		return nil
	}
	if t, ok := n.gate.Transport.(raftnet.Transport); ok {
		return t.Mux()
	}
	return nil
}
