// Package raftnet owns a node's Raft transport: hashicorp/raft's
// NetworkTransport over limitd's stream layer (mutual TLS, the target's
// server ID in a preamble), the guard that checks every accepted RPC before
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
//     server it means to reach ("limitd-raft/1 <id>"), and the accepting node
//     closes any connection meant for another ID. Raft's own RPC header
//     carries only the sender's ID and address, so without this a fresh node
//     started on a stopped member's address was replicated to as that member
//     and took its place. The ID reaches the stream layer through the target
//     address: Transport passes "<id>@<host:port>" to NetworkTransport.
//   - The sender's identity and bounded frames (guard.go): a node
//     certificate naming a node ID speaks only as that node, and no RPC
//     field may claim more than MaxField bytes.
const (
	preambleMagic = "limitd-raft/1 "
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

// Listen listens on cfg.Bind and returns the node's Raft transport.
func Listen(cfg Config, logger hclog.Logger) (Transport, error) {
	adv, err := net.ResolveTCPAddr("tcp", cfg.Addr)
	if err != nil {
		return Transport{}, fmt.Errorf("resolve raft address %s: %w", cfg.Addr, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return Transport{}, fmt.Errorf("raft address %s is not advertisable: give the address other nodes reach this one at", cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Bind)
	if err != nil {
		return Transport{}, fmt.Errorf("listen raft %s: %w", cfg.Bind, err)
	}
	return newTransport(ln, advertisedAddr{adv, cfg.Addr}, cfg.TLS, cfg.NodeID, raftMaxPool, raftIOTimeout, logger), nil
}

// NewOn is a Raft transport on ln (advertised as its address) over the
// stream layer, with one pooled connection per peer: for tests and tools
// that bring their own listener.
func NewOn(ln net.Listener, tc *tls.Config, localID string, timeout time.Duration, logger hclog.Logger) Transport {
	return newTransport(ln, ln.Addr(), tc, localID, 1, timeout, logger)
}

func newTransport(ln net.Listener, adv net.Addr, tc *tls.Config, localID string, pool int, timeout time.Duration, logger hclog.Logger) Transport {
	layer := &streamLayer{ln: ln, adv: adv, tls: tc, localID: localID, logger: logger}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: pool, Timeout: timeout, Logger: logger,
	})
	return Transport{nt, layer}
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

// streamLayer is a raft.StreamLayer over TCP, optionally mutual TLS, with
// the target-ID preamble.
type streamLayer struct {
	ln      net.Listener
	adv     net.Addr
	tls     *tls.Config // nil: plain TCP
	localID string
	logger  hclog.Logger

	refusals refusalLog // guard.go
	// votes, when set, answers vote requests the node may not grant on
	// the connection, before raft (votegate.go).
	votes atomic.Pointer[VoteGate]
}

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		c = tls.Server(c, s.tls)
	}
	// The handshake and preamble run on the connection's first read, in
	// raft's per-connection goroutine, not in this accept loop.
	return &acceptedConn{Conn: c, layer: s}, nil
}

func (s *streamLayer) Close() error   { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr { return s.adv }

// Dial connects to the server whose ID and address Transport encoded in
// address, completes the TLS handshake (verifying the server's certificate
// against the cluster CA) and sends the preamble.
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
	if _, err := io.WriteString(conn, preambleMagic+id+"\n"); err != nil {
		conn.Close()
		return nil, fmt.Errorf("raft preamble to %s: %w", addr, err)
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// acceptedConn completes the TLS handshake and checks the preamble before
// the first byte reaches raft; on failure every read and write fails, and
// raft closes the connection.
type acceptedConn struct {
	net.Conn
	layer *streamLayer
	once  sync.Once
	err   error
	rpcs  *rpcReader // the RPCs that passed the guard (guard.go)
}

// errWrongTarget: a connection meant for another server ID.
var errWrongTarget = errors.New("raft connection meant for another server")

func (c *acceptedConn) open() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		defer c.Conn.SetDeadline(time.Time{})
		defer func() {
			if c.err != nil {
				c.layer.refusals.refused(c.layer.logger, c.err)
			}
		}()
		sender := "" // the node the peer's certificate names; "": any
		if tc, ok := c.Conn.(*tls.Conn); ok {
			if err := tc.Handshake(); err != nil {
				c.err = fmt.Errorf("raft TLS handshake from %s: %w", c.RemoteAddr(), err)
				return
			}
			if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
				sender, _ = NodeIDFromCert(certs[0])
			}
		}
		id, err := readPreamble(c.Conn)
		if err != nil {
			c.err = fmt.Errorf("raft connection from %s: %w", c.RemoteAddr(), err)
			return
		}
		if id != c.layer.localID {
			c.err = fmt.Errorf("%w: a connection from %s is meant for server %q, this is %q (is this node on another member's address?)",
				errWrongTarget, c.RemoteAddr(), id, c.layer.localID)
			return
		}
		c.rpcs = newRPCReader(c.Conn, sender, c.layer)
	})
	return c.err
}

func (c *acceptedConn) Read(b []byte) (int, error) {
	if err := c.open(); err != nil {
		return 0, err
	}
	return c.rpcs.Read(b)
}

func (c *acceptedConn) Write(b []byte) (int, error) {
	if err := c.open(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// readPreamble reads "limitd-raft/1 <id>\n" one byte at a time: raft reads
// the rest of the stream through its own buffer, so nothing past the newline
// may be consumed here.
func readPreamble(r io.Reader) (string, error) {
	line := make([]byte, 0, 64)
	var b [1]byte
	for len(line) <= len(preambleMagic)+maxServerIDLen {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", fmt.Errorf("read preamble: %w", err)
		}
		if b[0] == '\n' {
			return strings.TrimPrefix(string(line), preambleMagic), nil
		}
		line = append(line, b[0])
		if n := len(line); n <= len(preambleMagic) && line[n-1] != preambleMagic[n-1] {
			return "", fmt.Errorf("not a limitd raft preamble: %.40q", line)
		}
	}
	return "", errors.New("raft preamble too long")
}
