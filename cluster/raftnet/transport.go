// Package raftnet owns a node's Raft transport: hashicorp/raft's
// NetworkTransport over limitd's stream layer (mutual TLS, the target's
// server ID and group in a preamble), the shared port that carries several
// Raft groups (mux.go), the guard that checks every accepted RPC before
// raft decodes it (guard.go: the sender bound to its certificate, bounded
// frames, one reading of every header), the vote gate that keeps a node
// without a past from voting (votegate.go), and the bound on pipelined
// sends (pipeline.go). It knows nothing of the state machine, forwarding
// or membership: the node passes its addresses, TLS and a may-vote callback.
package raftnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The Raft transport: hashicorp/raft's NetworkTransport over our own stream
// layer, which adds three things to plain TCP.
//
//   - Mutual TLS (when Config.TLS is set): every Raft connection is TLS, and
//     the accepting node requires a client certificate signed by the cluster
//     CA (Config.TLS.ClientCAs), so nobody without a node certificate can send
//     an RPC (without it, anyone reaching the port could have forged AppendEntries applied).
//   - The target's server ID: the dialer sends a one-line preamble naming the
//     server it means to reach ("limitd-raft/1 <id>"; "limitd-raft/2 <id>
//     <group>" for a group other than 0, mux.go), and the accepting node
//     closes any connection meant for another ID. Raft's own RPC header
//     carries only the sender's ID and address, so without this a fresh node
//     started on a stopped member's address was replicated to as that member
//     and took its place. The ID reaches the stream layer through the target
//     address: Transport passes "<id>@<host:port>" to NetworkTransport.
//   - The sender's identity and bounded frames (guard.go): a node
//     certificate naming a node ID speaks only as that node, and no RPC
//     field may claim more than MaxField bytes.
const (
	preamblePrefix  = "limitd-raft/"
	preambleMagic   = "limitd-raft/1 "
	preambleMagicV2 = "limitd-raft/2 "
	maxGroupDigits  = 10 // a uint32 in decimal
	// handshakeTimeout bounds the TLS handshake and preamble of an accepted
	// connection, so a silent peer cannot hold one open.
	handshakeTimeout = 10 * time.Second
	maxServerIDLen   = 1024
	raftMaxPool      = 8
	raftIOTimeout    = 5 * time.Second
)

// LoadTLS reads a node's certificate, key and cluster CA bundle (PEM files)
// into the configuration Config.TLS (and cluster.Config.TLS) expects: it presents the certificate as
// server and client, trusts only the CA for servers and clients, and requires
// client certificates. Rotation is a rolling restart (docs/SECURITY.md).
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificates found", caFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// Config is what a node's Raft transport needs.
type Config struct {
	NodeID string      // this node's server ID: accepted connections must name it
	Addr   string      // the advertised address (host:port), as peers dial it
	Bind   string      // the address to listen on
	TLS    *tls.Config // nil: plain TCP
}

// Listen listens on cfg.Bind and returns the node's Raft transport: group
// 0 of a Mux of its own, which its Close closes (mux.go).
func Listen(cfg Config, logger hclog.Logger) (Transport, error) {
	m, err := ListenMux(cfg, logger)
	if err != nil {
		return Transport{}, err
	}
	return m.owned(), nil
}

// NewOn is a Raft transport on ln (advertised as its address) over the
// stream layer, with one pooled connection per peer: for tests and tools
// that bring their own listener.
func NewOn(ln net.Listener, tc *tls.Config, localID string, timeout time.Duration, logger hclog.Logger) Transport {
	return newMux(ln, ln.Addr(), tc, localID, 1, timeout, logger).owned()
}

// advertisedAddr is the Raft address as configured: it is what this node
// bootstraps and joins with, so peers store it and dial it by that name and
// a host name is resolved again at every connection (a Kubernetes pod keeps
// its DNS name across restarts, not its IP; TLS verifies that name).
type advertisedAddr struct {
	*net.TCPAddr
	name string
}

func (a advertisedAddr) String() string { return a.name }

// Transport hands the target's server ID to the stream layer inside the
// address of every outgoing RPC; layer is its stream layer (the vote gate
// answers refused votes there, votegate.go).
type Transport struct {
	*raft.NetworkTransport
	layer *streamLayer
}

// Group is the Raft group this transport carries (0: the node's first,
// today's only group).
func (t Transport) Group() uint32 { return t.layer.group }

// Mux is the node's shared Raft port this transport is a group of.
func (t Transport) Mux() *Mux { return t.layer.mux }

// EncodePeer writes the address raft puts in every RPC header (RPCHeader.Addr)
// with this transport's group ("host:port#g"; group 0 unchanged, as today's
// nodes write it), so the guard of the receiving group can refuse an RPC
// written for another group (guard.go, groupOfAddr). The addresses in a
// group's configuration stay plain host:port.
func (t Transport) EncodePeer(id raft.ServerID, p raft.ServerAddress) []byte {
	return []byte(groupAddr(string(p), t.layer.group))
}

// DecodePeer undoes EncodePeer: raft learns the leader's plain address.
func (t Transport) DecodePeer(b []byte) raft.ServerAddress {
	addr, _, _ := splitGroupAddr(string(b))
	return raft.ServerAddress(addr)
}

func withID(id raft.ServerID, target raft.ServerAddress) raft.ServerAddress {
	return raft.ServerAddress(string(id) + "@" + string(target))
}

// splitTarget undoes withID. An address without an ID yields id "".
func splitTarget(s string) (id, addr string) {
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "", s
}

func (t Transport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return t.NetworkTransport.AppendEntriesPipeline(id, withID(id, target))
}

func (t Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.NetworkTransport.AppendEntries(id, withID(id, target), args, resp)
}

func (t Transport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.NetworkTransport.RequestVote(id, withID(id, target), args, resp)
}

func (t Transport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.NetworkTransport.RequestPreVote(id, withID(id, target), args, resp)
}

func (t Transport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.NetworkTransport.InstallSnapshot(id, withID(id, target), args, resp, data)
}

func (t Transport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.NetworkTransport.TimeoutNow(id, withID(id, target), args, resp)
}

// streamLayer is one group's raft.StreamLayer: it accepts the connections
// the Mux's accept loop handshook and named for its group, and dials its
// group's peers with the target-ID (and group) preamble.
type streamLayer struct {
	mux     *Mux
	group   uint32
	owned   bool // Close closes the mux too (Listen, NewOn)
	adv     net.Addr
	tls     *tls.Config // nil: plain TCP
	localID string
	logger  hclog.Logger

	refusals *refusalLog // guard.go; the mux's, shared by its groups
	// votes, when set, answers vote requests the node may not grant on
	// the connection, before raft (votegate.go).
	votes atomic.Pointer[VoteGate]

	conns     chan net.Conn // from the mux's handshakes (mux.go)
	closed    chan struct{}
	closeOnce sync.Once
}

func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops this group's accepts; the shared port stays open for the
// other groups unless this layer owns the mux.
func (s *streamLayer) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.mux.drop(s)
	if s.owned {
		return s.mux.Close()
	}
	return nil
}

func (s *streamLayer) Addr() net.Addr { return s.adv }

// Dial connects to the server whose ID and address Transport encoded in
// address, completes the TLS handshake (verifying the server's certificate
// against the cluster CA) and sends the preamble: today's for group 0, so a
// node of an earlier build understands it, else one naming the group.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, addr := splitTarget(string(address))
	deadline := time.Now().Add(timeout)
	conn, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		cfg := s.tls.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
		tc := tls.Client(conn, cfg)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("raft TLS handshake with %s: %w", addr, err)
		}
		// The server is the node its certificate names, if it names one
		// (guard.go): another node's certificate at this address is not
		// the server this RPC is for.
		if named, ok := NodeIDFromCert(tc.ConnectionState().PeerCertificates[0]); ok && id != "" && named != id {
			conn.Close()
			return nil, fmt.Errorf("%w: %s presents the certificate of node %q, not of %q", errWrongTarget, addr, named, id)
		}
		conn = tc
	}
	conn.SetWriteDeadline(deadline)
	if _, err := io.WriteString(conn, preamble(id, s.group)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("raft preamble to %s: %w", addr, err)
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// acceptedConn is a connection whose TLS handshake and preamble the mux
// checked (mux.go); raft reads it through the guard.
type acceptedConn struct {
	net.Conn
	rpcs *rpcReader // the RPCs that passed the guard (guard.go)
}

// errWrongTarget: a connection meant for another server ID.
var errWrongTarget = errors.New("raft connection meant for another server")

func (c *acceptedConn) Read(b []byte) (int, error) { return c.rpcs.Read(b) }

// preamble is the line a dialer sends: "limitd-raft/1 <id>" for group 0
// (what every build understands), "limitd-raft/2 <id> <group>" otherwise.
func preamble(id string, group uint32) string {
	if group == 0 {
		return preambleMagic + id + "\n"
	}
	return preambleMagicV2 + id + " " + strconv.FormatUint(uint64(group), 10) + "\n"
}

// readPreamble reads a preamble one byte at a time (raft reads the rest of
// the stream through its own buffer, so nothing past the newline may be
// consumed here) and returns the target ID and group: "limitd-raft/1 <id>"
// is group 0, "limitd-raft/2 <id> <group>" names one (decimal, as written).
func readPreamble(r io.Reader) (string, uint32, error) {
	line := make([]byte, 0, 64)
	var b [1]byte
	for len(line) <= len(preambleMagicV2)+maxServerIDLen+1+maxGroupDigits {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", 0, fmt.Errorf("read preamble: %w", err)
		}
		if b[0] == '\n' {
			return parsePreamble(string(line))
		}
		line = append(line, b[0])
		if n := len(line); n <= len(preamblePrefix) && line[n-1] != preamblePrefix[n-1] {
			return "", 0, fmt.Errorf("not a limitd raft preamble: %.40q", line)
		}
	}
	return "", 0, errors.New("raft preamble too long")
}

func parsePreamble(line string) (string, uint32, error) {
	if id, ok := strings.CutPrefix(line, preambleMagic); ok {
		return id, 0, nil
	}
	rest, ok := strings.CutPrefix(line, preambleMagicV2)
	if !ok {
		return "", 0, fmt.Errorf("not a limitd raft preamble: %.40q", line)
	}
	i := strings.LastIndexByte(rest, ' ')
	if i < 0 {
		return "", 0, fmt.Errorf("raft preamble %.80q names no group", line)
	}
	g, ok := parseGroup(rest[i+1:])
	if !ok {
		return "", 0, fmt.Errorf("raft preamble %.80q: group %.20q is not a group id", line, rest[i+1:])
	}
	return rest[:i], g, nil
}

// parseGroup reads a group id as preamble and EncodePeer write it: decimal,
// no sign or leading zero, so one group has one spelling.
func parseGroup(s string) (uint32, bool) {
	g, err := strconv.ParseUint(s, 10, 32)
	if err != nil || strconv.FormatUint(g, 10) != s {
		return 0, false
	}
	return uint32(g), true
}
