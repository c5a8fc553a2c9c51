package clustertest

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"sync"

	"github.com/hashicorp/raft"
)

// network is the connectivity between nodes, for Raft (applied to the
// InmemTransports) and for node-to-node HTTP (consulted by faultTransport).
type network struct {
	mu     sync.RWMutex
	cut    [][]bool       // cut[i][j]: i cannot reach j
	deaf   []bool         // deaf[i]: i's Raft RPCs are delivered, their responses lost
	byAddr map[string]int // HTTP address → node
	rng    *rand.Rand
	drop   float64 // probability that a delivered forward loses its response
}

func newNetwork(size int, drop float64, seed int64) *network {
	n := &network{
		byAddr: map[string]int{},
		rng:    rand.New(rand.NewSource(seed ^ 0x5eed)),
		drop:   drop,
		deaf:   make([]bool, size),
	}
	for i := 0; i < size; i++ {
		n.cut = append(n.cut, make([]bool, size))
	}
	return n
}

func (fn *network) blocked(from, to int) bool {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	return fn.cut[from][to]
}

func (fn *network) dropResponse() bool {
	fn.mu.Lock()
	defer fn.mu.Unlock()
	return fn.drop > 0 && fn.rng.Float64() < fn.drop
}

func (fn *network) isDeaf(i int) bool {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	return fn.deaf[i]
}

func (fn *network) lookup(addr string) (int, bool) {
	fn.mu.RLock()
	defer fn.mu.RUnlock()
	i, ok := fn.byAddr[addr]
	return i, ok
}

// ErrPartitioned is the error of node-to-node HTTP across a network fault.
var ErrPartitioned = errors.New("network partition (fault injection)")

// faultRaftTransport is a node's Raft transport: an InmemTransport (which the
// partitions disconnect) plus the "deaf" fault, in which the RPCs this node
// sends are delivered but their responses are lost. A deaf leader's entries
// reach the followers, yet it never learns that they committed: it steps
// down with proposals whose fate it cannot know, and the next leader commits
// them. Pipelining is refused while deaf so every append takes that path.
type faultRaftTransport struct {
	*raft.InmemTransport
	node int
	net  *network
}

var errResponseLost = errors.New("raft response lost (fault injection)")

func (t *faultRaftTransport) lost(err error) error {
	if err == nil && t.net.isDeaf(t.node) {
		return errResponseLost
	}
	return err
}

func (t *faultRaftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.net.isDeaf(t.node) {
		return nil, raft.ErrPipelineReplicationNotSupported
	}
	return t.InmemTransport.AppendEntriesPipeline(id, target)
}

func (t *faultRaftTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.lost(t.InmemTransport.AppendEntries(id, target, args, resp))
}

func (t *faultRaftTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.lost(t.InmemTransport.RequestVote(id, target, args, resp))
}

func (t *faultRaftTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.lost(t.InmemTransport.RequestPreVote(id, target, args, resp))
}

func (t *faultRaftTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.lost(t.InmemTransport.InstallSnapshot(id, target, args, resp, data))
}

func (t *faultRaftTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.lost(t.InmemTransport.TimeoutNow(id, target, args, resp))
}

// faultTransport is node `from`'s HTTP client transport. A request to a node
// it cannot reach fails as a dial would (nothing was delivered); a request
// whose partition starts while it is in flight, or that the injector picks,
// loses its response after the receiver handled it.
type faultTransport struct {
	from int
	net  *network
	base http.RoundTripper
}

func (ft *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	to, known := ft.net.lookup(req.URL.Host)
	if known && ft.net.blocked(ft.from, to) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ErrPartitioned}
	}
	resp, err := ft.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && known && resp.StatusCode == http.StatusSwitchingProtocols {
		// A check stream: it crosses the same faults for as long as it lives.
		resp.Body = &faultStream{ReadWriteCloser: rwc, from: ft.from, to: to, net: ft.net}
		return resp, nil
	}
	if known && (ft.net.blocked(to, ft.from) || ft.net.dropResponse()) {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("response from %s lost: %w", req.URL.Host, ErrPartitioned)
	}
	return resp, nil
}

// faultStream is an upgraded connection from node `from` to node `to`: a
// write across a cut fails before anything is sent; a read across one, or
// one the injector picks, loses what arrived and closes the stream (the
// leader handled the requests, their answers are lost).
type faultStream struct {
	io.ReadWriteCloser
	from, to int
	net      *network
}

func (fs *faultStream) Write(p []byte) (int, error) {
	if fs.net.blocked(fs.from, fs.to) {
		fs.Close()
		return 0, fmt.Errorf("write to node%d: %w", fs.to, ErrPartitioned)
	}
	return fs.ReadWriteCloser.Write(p)
}

func (fs *faultStream) Read(p []byte) (int, error) {
	n, err := fs.ReadWriteCloser.Read(p)
	if n > 0 && (fs.net.blocked(fs.to, fs.from) || fs.net.dropResponse()) {
		fs.Close()
		return 0, fmt.Errorf("read from node%d lost: %w", fs.to, ErrPartitioned)
	}
	return n, err
}

func (c *Cluster) needInmem(what string) {
	c.t.Helper()
	if c.opts.TCP {
		c.t.Fatalf("clustertest: %s needs the in-memory transport", what)
	}
}

// applyNet makes the Raft transports match the connectivity matrix.
func (c *Cluster) applyNet() {
	if c.opts.TCP {
		return
	}
	for i := range c.trans {
		for j := range c.trans {
			if i == j {
				continue
			}
			if c.net.blocked(i, j) {
				c.trans[i].Disconnect(c.trans[j].LocalAddr())
			} else {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
}

// Partition separates the nodes in set from the others, both ways, for Raft
// and node-to-node HTTP; it replaces any earlier partition.
func (c *Cluster) Partition(set ...int) {
	c.t.Helper()
	c.needInmem("Partition")
	in := make([]bool, c.Size())
	for _, i := range set {
		in[i] = true
	}
	c.net.mu.Lock()
	for i := range in {
		for j := range in {
			c.net.cut[i][j] = in[i] != in[j]
		}
	}
	c.net.mu.Unlock()
	c.applyNet()
}

// Disconnect cuts node i off from every other node, both ways.
func (c *Cluster) Disconnect(i int) {
	c.t.Helper()
	c.Partition(i)
}

// Deafen makes node i's Raft RPCs lose their responses, and drops its
// replication pipelines so that the next appends go through the fault.
func (c *Cluster) Deafen(i int) {
	c.t.Helper()
	c.needInmem("Deafen")
	c.net.mu.Lock()
	c.net.deaf[i] = true
	c.net.mu.Unlock()
	c.trans[i].DisconnectAll()
	c.applyNet()
}

// Heal undoes every network fault.
func (c *Cluster) Heal() {
	c.t.Helper()
	c.needInmem("Heal")
	c.net.mu.Lock()
	for i := range c.net.cut {
		clear(c.net.cut[i])
	}
	clear(c.net.deaf)
	c.net.mu.Unlock()
	c.applyNet()
}
