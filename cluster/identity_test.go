package cluster_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/testcerts"
)

// nodeCerts makes a CA named name and returns it with a maker of TLS
// configurations whose certificates name their node (testcerts.NodeFor).
func nodeCerts(t *testing.T, name string) (*testcerts.CA, func(id string) *tls.Config) {
	t.Helper()
	ca, err := testcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca, func(id string) *tls.Config {
		pair, err := ca.NodeFor(id)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := ca.TLS(pair)
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
}

// identityCluster is a 3-node mutual-TLS cluster whose certificates name
// their nodes (testcerts.NodeFor, as scripts/certs.sh issues them).
func identityCluster(t *testing.T) (*clustertest.Cluster, func(id string) *tls.Config) {
	t.Helper()
	_, cert := nodeCerts(t, "limitd identity CA")
	c := clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: 3, TLS: func(i int) *tls.Config { return cert(fmt.Sprintf("n%d", i)) },
	})
	return c, cert
}

// Node identity in the certificate (a node speaks only as itself): with n2's
// certificate, an AppendEntries claiming to come from n0 at a higher term is
// refused at the transport, and n1 keeps its term; claiming n2 it is
// answered. A certificate naming no node is accepted as any (compatibility).
func TestRaftSenderBoundToCertificate(t *testing.T) {
	c, cert := identityCluster(t)
	addr := c.RaftAddr(1)
	id := c.Node(1).ID()
	term := func() string { return c.Node(1).Raft().Stats()["term"] }
	before := term()
	send := func(tc *tls.Config, claim string, term uint64) error {
		var resp raft.AppendEntriesResponse
		return attacker(t, tc).AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claim), Addr: []byte(c.RaftAddr(0))},
			Term:      term,
		}, &resp)
	}
	if err := send(cert("n2"), "n0", 51); err == nil {
		t.Fatal("with n2's certificate, an AppendEntries claiming n0 was answered")
	}
	if got := term(); got != before {
		t.Fatalf("n1's term moved from %s to %s", before, got)
	}
	if err := send(cert("n2"), "n2", 0); err != nil {
		t.Fatalf("control: n2's certificate speaking as n2 was not answered: %v", err)
	}
}

// The internal endpoints admit a named certificate only as its node: a
// node outside the cluster may join as itself only, and forwards nothing;
// a member forwards.
func TestInternalEndpointsBindCertificate(t *testing.T) {
	c, cert := identityCluster(t)
	post := func(tc *tls.Config, path, body string) (int, string) {
		t.Helper()
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := cl.Post(c.URL(0)+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	outsider := cert("n9")
	if code, body := post(outsider, cluster.PathCheck, ""); code != http.StatusForbidden || !strings.Contains(body, "n9") {
		t.Fatalf("n9 (not a member) forwarding a check: %d %s, want 403 naming n9", code, body)
	}
	if code, body := post(outsider, "/internal/v1/join", `{"id":"n1","raft_addr":"127.0.0.1:1"}`); code != http.StatusForbidden {
		t.Fatalf("n9 joining as n1: %d %s, want 403", code, body)
	}
	if code, body := post(cert("n1"), cluster.PathCheck, ""); code == http.StatusForbidden || code == http.StatusUnauthorized {
		t.Fatalf("member n1 forwarding: %d %s, want past authentication", code, body)
	}

	// Lease commands: a member takes and gives back only its own leases.
	// (Giving back n3's lease while n3 goes on spending it would let the
	// key admit more than its limit.)
	before := c.Node(c.Leader()).FSM().AppliedIndex()
	ret := fsm.EncodeReturnLease(nil, 0, "n3", []fsm.LeaseReturn{{ID: 7, Check: fsm.Check{Key: "k", Policy: "q"}, Unspent: 5}})
	if code, body := post(cert("n2"), cluster.PathLease, string(ret)); code != http.StatusForbidden || !strings.Contains(body, "n3") {
		t.Fatalf("n2 giving back n3's lease: %d %s, want 403 naming n3", code, body)
	}
	grant := fsm.EncodeGrantLease(nil, 0, "n3", []fsm.LeaseRequest{{ID: 8, Check: fsm.Check{Key: "k", Policy: "q"}}})
	if code, body := post(cert("n2"), cluster.PathLease, string(grant)); code != http.StatusForbidden {
		t.Fatalf("n2 taking a lease for n3: %d %s, want 403", code, body)
	}
	if got := c.Node(c.Leader()).FSM().AppliedIndex(); got != before {
		t.Fatalf("applied index %d → %d: a refused lease command was proposed", before, got)
	}
	own := fsm.EncodeReturnLease(nil, 0, "n2", []fsm.LeaseReturn{{ID: 7, Check: fsm.Check{Key: "k", Policy: "q"}, Unspent: 5}})
	if code, body := post(cert("n2"), cluster.PathLease, string(own)); code == http.StatusForbidden {
		t.Fatalf("n2 giving back its own lease: %d %s, want past the holder check", code, body)
	}
}

// A Raft frame whose field claims more than raftnet.MaxField (here 100 MB) is
// refused before it is read: the node closes the connection at once instead
// of waiting for (and allocating) the claimed bytes.
func TestRaftRefusesOversizedFrame(t *testing.T) {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 1, TCP: true})
	conn, err := net.DialTimeout("tcp", c.RaftAddr(0), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame := []byte("limitd-raft/1 " + c.Node(0).ID() + "\n")
	frame = append(frame, 0, 0x81, 0xa4, 'A', 'd', 'd', 'r', 0xc6, 0x06, 0x40, 0x00, 0x00) // {"Addr": <bin32 of 100 MB>}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the node kept a connection whose frame claims a 100 MB field open, waiting for it")
	}
	// The node still serves.
	if _, err := c.Node(0).Check(t.Context(), check("after-frame", slidingLog(1, time.Hour))); err != nil {
		t.Fatalf("check after the refused frame: %v", err)
	}
}

// The dialing side too: a server presenting another node's certificate is
// not the node the RPC is for, even on the right address and ID preamble.
func TestRaftDialerChecksServerIdentity(t *testing.T) {
	ca, cert := nodeCerts(t, "limitd dialer CA")
	for _, c := range []struct {
		serverCert string
		wantOK     bool
	}{{"n9", false}, {"n1", true}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		server := cluster.NewStreamTransport(ln, cert(c.serverCert), "n1")
		go func() { // answer every RPC
			for rpc := range server.Consumer() {
				rpc.Respond(&raft.AppendEntriesResponse{}, nil)
			}
		}()
		legacy, err := ca.Node("client") // names no node: probe's sender ID is free
		if err != nil {
			t.Fatal(err)
		}
		clientTLS, err := ca.TLS(legacy)
		if err != nil {
			t.Fatal(err)
		}
		err = probe(attacker(t, clientTLS), "n1", ln.Addr().String())
		server.Close()
		if (err == nil) != c.wantOK {
			t.Errorf("dialing n1 at a server with %s's certificate: %v, want answered=%v", c.serverCert, err, c.wantOK)
		}
	}
}
