package clustertest

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/limitd/limitd/cluster/raftnet"
)

// Several Raft groups per node over one Raft port per node, as a process
// of the multi-group build hosts them: Ports stands for the processes (one
// shared port, raftnet.Mux, and one data directory each), and each group is
// a Cluster of its own over them (Options.Ports, Options.Group), so every
// fault and wait of the harness works per group.

// Ports is one shared Raft port and data directory per node.
type Ports struct {
	muxes []*raftnet.Mux
	dirs  []string
}

// NewPorts opens a shared Raft port on loopback for each of n nodes (node
// i's ID is "n<i>", as the harness names them), with mutual TLS when tlsc
// is set; they close when the test ends, after the clusters over them.
func NewPorts(t testing.TB, n int, tlsc func(i int) *tls.Config) *Ports {
	t.Helper()
	p := &Ports{}
	for i := 0; i < n; i++ {
		p.dirs = append(p.dirs, t.TempDir())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var tc *tls.Config
		if tlsc != nil {
			tc = tlsc(i)
		}
		p.muxes = append(p.muxes, raftnet.NewMuxOn(ln, tc, fmt.Sprintf("n%d", i), 2*time.Second, hclog.NewNullLogger()))
	}
	// Registered before any cluster over the ports: cleanups run last in,
	// first out, so the ports close after every group's nodes.
	t.Cleanup(func() {
		for _, m := range p.muxes {
			m.Close()
		}
	})
	return p
}

// Mux is node i's shared Raft port.
func (p *Ports) Mux(i int) *raftnet.Mux { return p.muxes[i] }

// Addr is node i's Raft address, every group's.
func (p *Ports) Addr(i int) string { return p.muxes[i].Addr().String() }

// DataDir is node i's data directory (group 0's; group g's is under it).
func (p *Ports) DataDir(i int) string { return p.dirs[i] }

// Groups is G Raft groups over the same nodes and ports.
type Groups struct {
	Ports  *Ports
	Groups []*Cluster // by group id
}

// MakeGroups starts opts.Nodes nodes on shared ports, each running groups
// Raft groups (ids 0 … groups-1), each group a Cluster bootstrapped by its
// node 0 and joined by the others, and waits until every group is ready and
// converged. opts.Ports and opts.Group are set per group; opts.TLS, if
// set, secures the ports too.
func MakeGroups(t testing.TB, groups int, opts Options) *Groups {
	t.Helper()
	if opts.SkipShort && testing.Short() {
		t.Skip("-short: starts Raft clusters")
	}
	gs := &Groups{Ports: NewPorts(t, opts.Nodes, opts.TLS)}
	for g := 0; g < groups; g++ {
		o := opts
		o.Ports, o.Group = gs.Ports, uint32(g)
		gs.Groups = append(gs.Groups, MakeClusterOpts(t, o))
	}
	return gs
}

// Group is group g's cluster.
func (gs *Groups) Group(g int) *Cluster { return gs.Groups[g] }
