package raftnet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// One Raft port, several groups. A Mux owns a node's Raft listener and its
// one accept loop; each Raft group the node hosts is a Transport of its own
// (Mux.Group: its NetworkTransport, connection pool, guard and vote gate)
// over a virtual stream layer fed by the mux. hashicorp/raft has no
// multi-raft: the port, like the fsyncs and ticks, is ours to share.
//
// The accept loop hands every connection to a goroutine of its own, which
// runs the TLS handshake and reads the preamble under handshakeTimeout; at
// most maxPendingHandshakes run at once, and a connection past that bound is
// closed at once and counted (Stats.Busy), so silent peers cannot hold the
// port. The preamble names the target server and the group ("limitd-raft/2
// <id> <group>"; today's "limitd-raft/1 <id>" means group 0, which is what a
// node sends for group 0, so a node of an earlier build and this one form
// group 0 together: the rolling-upgrade rule). A connection for a group this
// node does not host is closed and counted (Stats.UnknownGroup).
//
// The group is the connection's for its life: raft's RPCs carry no group,
// so the guard (guard.go) also reads the group from each RPC's header
// address (EncodePeer writes "host:port#g" for g > 0) and refuses an RPC
// written for another group: a frame of group 1 replayed on group 2's
// connection never reaches group 2's raft.
const (
	maxPendingHandshakes = 256
)

// Mux is a node's shared Raft port (see above). Its methods are safe for
// concurrent use.
type Mux struct {
	ln      net.Listener
	adv     net.Addr
	tls     *tls.Config
	localID string
	pool    int
	timeout time.Duration
	logger  hclog.Logger

	refusals refusalLog
	pending  chan struct{} // one per handshake running
	unknown  atomic.Uint64
	busy     atomic.Uint64

	mu     sync.Mutex
	groups map[uint32]*streamLayer
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// MuxStats counts the connections the mux refused before any group saw them.
type MuxStats struct {
	UnknownGroup uint64 // the preamble named a group this node does not host
	Busy         uint64 // maxPendingHandshakes were already running
}

// ListenMux listens on cfg.Bind and returns the node's shared Raft port;
// cfg.Addr is what every group advertises.
func ListenMux(cfg Config, logger hclog.Logger) (*Mux, error) {
	adv, err := net.ResolveTCPAddr("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("resolve raft address %s: %w", cfg.Addr, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %s is not advertisable: give the address other nodes reach this one at", cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("listen raft %s: %w", cfg.Bind, err)
	}
	return newMux(ln, advertisedAddr{adv, cfg.Addr}, cfg.TLS, cfg.NodeID, raftMaxPool, raftIOTimeout, logger), nil
}

// NewMuxOn is a shared Raft port on ln (advertised as its address), with one
// pooled connection per peer and group: for tests and tools.
func NewMuxOn(ln net.Listener, tc *tls.Config, localID string, timeout time.Duration, logger hclog.Logger) *Mux {
	return newMux(ln, ln.Addr(), tc, localID, 1, timeout, logger)
}

func newMux(ln net.Listener, adv net.Addr, tc *tls.Config, localID string, pool int, timeout time.Duration, logger hclog.Logger) *Mux {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	m := &Mux{ln: ln, adv: adv, tls: tc, localID: localID, pool: pool, timeout: timeout, logger: logger,
		pending: make(chan struct{}, maxPendingHandshakes), groups: map[uint32]*streamLayer{}, done: make(chan struct{})}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Group registers group g on the port and returns its transport; Close on
// the transport (raft's shutdown) unregisters it, leaving the port open.
// A group is registered once at a time.
func (m *Mux) Group(g uint32) (Transport, error) {
	return m.group(g, false)
}

// owned is group 0 of a mux that only it uses: its Close closes the port.
func (m *Mux) owned() Transport {
	t, _ := m.group(0, true) // a new mux: cannot fail
	return t
}

func (m *Mux) group(g uint32, owned bool) (Transport, error) {
	layer := &streamLayer{mux: m, group: g, owned: owned, adv: m.adv, tls: m.tls, localID: m.localID,
		logger: m.logger, refusals: &m.refusals, conns: make(chan net.Conn), closed: make(chan struct{})}
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return Transport{}, net.ErrClosed
	case m.groups[g] != nil:
		m.mu.Unlock()
		return Transport{}, fmt.Errorf("raft group %d is already open on %s", g, m.adv)
	}
	m.groups[g] = layer
	m.mu.Unlock()
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: m.pool, Timeout: m.timeout, Logger: m.logger,
	})
	return Transport{nt, layer}, nil
}

// drop unregisters layer (if it is still its group's).
func (m *Mux) drop(layer *streamLayer) {
	m.mu.Lock()
	if m.groups[layer.group] == layer {
		delete(m.groups, layer.group)
	}
	m.mu.Unlock()
}

func (m *Mux) lookup(g uint32) *streamLayer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.groups[g]
}

// Addr is the advertised address every group of the port shares.
func (m *Mux) Addr() net.Addr { return m.adv }

// Groups is the ids of the groups open on the port.
func (m *Mux) Groups() []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	gs := make([]uint32, 0, len(m.groups))
	for g := range m.groups {
		gs = append(gs, g)
	}
	return gs
}

// Stats counts the connections refused before reaching a group.
func (m *Mux) Stats() MuxStats {
	return MuxStats{UnknownGroup: m.unknown.Load(), Busy: m.busy.Load()}
}

// Close closes the port and every group's accepts, and waits for the
// handshakes running (each bounded by handshakeTimeout, cut short here).
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	layers := make([]*streamLayer, 0, len(m.groups))
	for _, l := range m.groups {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	err := m.ln.Close()
	for _, l := range layers {
		l.closeOnce.Do(func() { close(l.closed) })
	}
	m.wg.Wait()
	return err
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of descriptors): back off as
			// net/http does rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.refusals.refused(m.logger, fmt.Errorf("raft accept: %w", err))
			select {
			case <-m.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		select {
		case m.pending <- struct{}{}:
		default:
			m.busy.Add(1)
			m.refusals.refused(m.logger, fmt.Errorf("raft connection from %s: %d handshakes already pending", c.RemoteAddr(), maxPendingHandshakes))
			c.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer func() { <-m.pending }()
			m.handshake(c)
		}()
	}
}

// errUnknownGroup: a preamble naming a group this node does not host.
var errUnknownGroup = errors.New("raft connection for a group this node does not host")

// handshake runs the TLS handshake and reads the preamble of an accepted
// connection under handshakeTimeout, then hands it to its group's stream
// layer, or closes it.
func (m *Mux) handshake(c net.Conn) {
	deadline := time.Now().Add(handshakeTimeout)
	c.SetDeadline(deadline)
	stop := make(chan struct{})
	defer close(stop)
	raw := c    // c becomes the TLS connection below; the watcher keeps the socket
	go func() { // Close cuts a pending handshake short
		select {
		case <-m.done:
			raw.SetDeadline(time.Now())
		case <-stop:
		}
	}()
	refuse := func(err error) {
		m.refusals.refused(m.logger, err)
		c.Close()
	}
	sender := "" // the node the peer's certificate names; "": any
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.Handshake(); err != nil {
			refuse(fmt.Errorf("raft TLS handshake from %s: %w", c.RemoteAddr(), err))
			return
		}
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			sender, _ = NodeIDFromCert(certs[0])
		}
		c = tc
	}
	id, g, err := readPreamble(c)
	if err != nil {
		refuse(fmt.Errorf("raft connection from %s: %w", c.RemoteAddr(), err))
		return
	}
	if id != m.localID {
		refuse(fmt.Errorf("%w: a connection from %s is meant for server %q, this is %q (is this node on another member's address?)",
			errWrongTarget, c.RemoteAddr(), id, m.localID))
		return
	}
	layer := m.lookup(g)
	if layer == nil {
		m.unknown.Add(1)
		refuse(fmt.Errorf("%w: a connection from %s for group %d", errUnknownGroup, c.RemoteAddr(), g))
		return
	}
	c.SetDeadline(time.Time{})
	ac := &acceptedConn{Conn: c, rpcs: newRPCReader(c, sender, layer)}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case layer.conns <- ac:
	case <-layer.closed:
		c.Close()
	case <-t.C: // the group's raft is not accepting: a stuck or closing node
		c.Close()
	}
}

// groupAddr is the RPC header address of group g: addr itself for group 0
// (as every build writes it), "addr#g" otherwise.
func groupAddr(addr string, g uint32) string {
	if g == 0 {
		return addr
	}
	return addr + "#" + strconv.FormatUint(uint64(g), 10)
}

// splitGroupAddr undoes groupAddr; ok is false for a suffix that is not a
// group id as groupAddr writes it.
func splitGroupAddr(s string) (addr string, g uint32, ok bool) {
	i := strings.LastIndexByte(s, '#')
	if i < 0 {
		return s, 0, true
	}
	g, ok = parseGroup(s[i+1:])
	if !ok || g == 0 {
		return s, 0, false
	}
	return s[:i], g, true
}
