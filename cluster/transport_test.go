package cluster_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/internal/testcerts"
)

// tlsCluster is the harness on real loopback TCP: Raft over the mutual-TLS
// stream layer and the internal endpoints on HTTPS requiring client
// certificates, as `limitd serve --tls-ca` runs them.
type tlsCluster struct {
	*clustertest.Cluster
	t  *testing.T
	ca *testcerts.CA
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
	c.Cluster = clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: size,
		TLS:   func(i int) *tls.Config { return c.nodeTLS(fmt.Sprintf("n%d", i)) },
	})
	return c
}

// attacker is a Raft client with its own stream layer settings.
func attacker(t *testing.T, tc *tls.Config) raft.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := cluster.NewStreamTransport(ln, tc, "attacker")
	t.Cleanup(func() { tr.Close() })
	return tr
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
	for i, n := range c.Nodes() {
		res, err := n.Check(context.Background(), check("tls-key", spec))
		if err != nil {
			t.Fatalf("check through n%d: %v", i, err)
		}
		if want := i < 2; res[0].Allowed != want {
			t.Fatalf("check %d through n%d: allowed=%v, want %v", i, i, res[0].Allowed, want)
		}
	}
	id, addr := c.Node(1).ID(), c.RaftAddr(1)

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
	resp, err := anon.Post(c.URL(0)+cluster.PathCheck, "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("internal check without a client certificate: %d, want 401", resp.StatusCode)
	}
	if res, err := c.Node(2).Check(context.Background(), check("tls-key", spec)); err != nil || res[0].Allowed {
		t.Fatalf("after the refused RPCs: %+v %v, want a refusal (limit 2 spent)", res, err)
	}
}

// A node accepts Raft connections meant for its own server ID only: a node
// started on another member's address is not replicated to as that member.
func TestRaftRefusesConnectionsForAnotherID(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 1, TCP: true})
	addr := c.RaftAddr(0)
	tr := attacker(t, nil)
	if err := probe(tr, "n2", addr); err == nil {
		t.Fatal("an RPC meant for server n2 was answered by n0")
	}
	if err := probe(tr, "n0", addr); err != nil {
		t.Fatalf("control: an RPC meant for n0 was not answered: %v", err)
	}
}
