package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/internal/testcerts"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tcpConfig is fastConfig on a real loopback TCP transport.
func tcpConfig(t *testing.T, id, httpAddr string) Config {
	_, tr := raft.NewInmemTransport("")
	cfg := fastConfig(id, t.TempDir(), httpAddr, tr)
	cfg.Transport, cfg.RaftAddr = nil, freeAddr(t)
	return cfg
}

// tlsCluster is a cluster on real loopback TCP: Raft over the mutual-TLS
// stream layer and the internal endpoints on HTTPS requiring client
// certificates, as `limitd serve --tls-ca` runs them.
type tlsCluster struct {
	t     *testing.T
	ca    *testcerts.CA
	nodes []*Node
	srvs  []*httptest.Server
}

func (c *tlsCluster) nodeTLS(name string) *tls.Config {
	c.t.Helper()
	pair, err := c.ca.Node(name)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg, err := c.ca.TLS(pair)
	if err != nil {
		c.t.Fatal(err)
	}
	return cfg
}

func newTLSCluster(t *testing.T, size int) *tlsCluster {
	t.Helper()
	ca, err := testcerts.NewCA("limitd test CA")
	if err != nil {
		t.Fatal(err)
	}
	c := &tlsCluster{t: t, ca: ca}
	for i := 0; i < size; i++ {
		tc := c.nodeTLS(fmt.Sprintf("n%d", i))
		srv := httptest.NewUnstartedServer(nil)
		srv.TLS = tc.Clone()
		srv.TLS.ClientAuth = tls.VerifyClientCertIfGiven
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		cfg := tcpConfig(t, fmt.Sprintf("n%d", i), srv.Listener.Addr().String())
		cfg.TLS, cfg.HTTPScheme, cfg.HTTPClient = tc, "https", client
		n, err := Open(cfg, i == 0)
		if err != nil {
			t.Fatalf("open n%d: %v", i, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/internal/", n.Internal())
		srv.Config.Handler = mux
		srv.StartTLS()
		c.nodes = append(c.nodes, n)
		c.srvs = append(c.srvs, srv)
		t.Cleanup(func() { n.Close(); srv.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.nodes[0].WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < size; i++ {
		if err := c.nodes[0].Join(ctx, c.nodes[i].ID(), c.nodes[i].cfg.RaftAddr, c.srvs[i].Listener.Addr().String()); err != nil {
			t.Fatalf("join n%d over mutual TLS: %v", i, err)
		}
	}
	for _, n := range c.nodes {
		waitFor(t, func() bool { return n.Ready() == nil })
	}
	return c
}

// attacker is a Raft client with its own stream layer settings.
func attacker(t *testing.T, tc *tls.Config) raft.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	layer := &streamLayer{ln: ln, adv: ln.Addr(), tls: tc, localID: "attacker", logger: hclog.NewNullLogger()}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: layer, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { nt.Close() })
	return idTransport{nt}
}

// probe sends a harmless AppendEntries (term 0: refused by raft's logic, but
// answered) to node i and reports whether the transport delivered it.
func probe(tr raft.Transport, id, addr string) error {
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
	}, &resp)
}

// The cluster forms, forwards and decides over mutual TLS; a Raft RPC over
// plain TCP, over TLS without a client certificate, or with a certificate
// from another CA is refused at the connection, while the same RPC from a
// holder of a cluster certificate is answered.
func TestRaftOverMutualTLS(t *testing.T) {
	c := newTLSCluster(t, 3)
	spec := slidingLog(2, time.Hour)
	for i, n := range c.nodes {
		res, err := n.Check(context.Background(), check("tls-key", spec))
		if err != nil {
			t.Fatalf("check through n%d: %v", i, err)
		}
		if want := i < 2; res[0].Allowed != want {
			t.Fatalf("check %d through n%d: allowed=%v, want %v", i, i, res[0].Allowed, want)
		}
	}
	target := c.nodes[1]
	id, addr := target.ID(), target.cfg.RaftAddr

	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := probe(plain, id, addr); err == nil {
		t.Fatal("AppendEntries over plain TCP to a TLS node was answered")
	}
	noCert := c.nodeTLS("x")
	noCert.Certificates = nil
	if err := probe(attacker(t, noCert), id, addr); err == nil {
		t.Fatal("AppendEntries over TLS without a client certificate was answered")
	}
	other, err := testcerts.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := other.Node("rogue")
	rogue, _ := other.TLS(pair)
	rogue.RootCAs = c.nodeTLS("x").RootCAs // it trusts the cluster's servers; they must not trust it
	if err := probe(attacker(t, rogue), id, addr); err == nil {
		t.Fatal("AppendEntries with a certificate from another CA was answered")
	}
	if err := probe(attacker(t, c.nodeTLS("member")), id, addr); err != nil {
		t.Fatalf("control: the same RPC with a cluster certificate was not answered: %v", err)
	}
	// Forwarding endpoints refuse a client without a cluster certificate.
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.nodeTLS("x").RootCAs}}}
	resp, err := anon.Post(c.srvs[0].URL+pathCheck, "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("internal check without a client certificate: %d, want 401", resp.StatusCode)
	}
	if res, err := c.nodes[2].Check(context.Background(), check("tls-key", spec)); err != nil || res[0].Allowed {
		t.Fatalf("after the refused RPCs: %+v %v, want a refusal (limit 2 spent)", res, err)
	}
}

// A node accepts Raft connections meant for its own server ID only: a node
// started on another member's address is not replicated to as that member.
func TestRaftRefusesConnectionsForAnotherID(t *testing.T) {
	cfg := tcpConfig(t, "n0", "127.0.0.1:1")
	n, err := Open(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tr := attacker(t, nil)
	if err := probe(tr, "n2", cfg.RaftAddr); err == nil {
		t.Fatal("an RPC meant for server n2 was answered by n0")
	}
	if err := probe(tr, "n0", cfg.RaftAddr); err != nil {
		t.Fatalf("control: an RPC meant for n0 was not answered: %v", err)
	}
}
