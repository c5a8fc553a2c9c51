package cluster

import (
	"context"
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
	cfg := tcpConfig(t, "n0", "127.0.0.1:1")
	_, port, _ := net.SplitHostPort(cfg.RaftAddr)
	cfg.RaftAddr = net.JoinHostPort("localhost", port)
	cfg.RaftBind = "127.0.0.1:" + port
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
