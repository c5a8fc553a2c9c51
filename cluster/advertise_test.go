package cluster

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// A Raft address given as a host name is what the cluster configuration
// stores (and peers dial, resolving it again), not the IP it resolved to at
// start: a restarted Kubernetes pod keeps its name, not its IP.
func TestRaftAdvertisesTheConfiguredName(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cfg := Config{
		NodeID: "n0", RaftAddr: net.JoinHostPort("localhost", port), RaftBind: "127.0.0.1:" + port,
		HTTPAddr: "127.0.0.1:1", DataDir: t.TempDir(), LogOutput: io.Discard,
		HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
	}
	n, err := Open(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	servers := f.Configuration().Servers
	if len(servers) != 1 || string(servers[0].Address) != cfg.RaftAddr {
		t.Fatalf("configuration %+v: want the one server at %s", servers, cfg.RaftAddr)
	}
}
