package cluster_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A placement record written through a follower reaches the leader (it is
// no client's command: the node-to-node endpoint applies it) and every
// replica reads it; the groups record and node ids are refused, by the
// Catalog and by the endpoint itself.
func TestClusterRecordThroughTheLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := c.Leader()
	f := (l + 1) % 3
	if err := c.Node(f).Catalog().PutClusterRecord(ctx, "cluster/group/1", "leader=n1 term=2 replicas=n0,n1"); err != nil {
		t.Fatal(err)
	}
	c.WaitConverged()
	for i, n := range c.Nodes() {
		if v, ok := n.Catalog().ClusterRecord("cluster/group/1"); !ok || v != "leader=n1 term=2 replicas=n0,n1" {
			t.Fatalf("node %d reads %q %v", i, v, ok)
		}
	}
	for _, key := range []string{"cluster/groups", c.Node(l).ID(), "other/x"} {
		if err := c.Node(f).Catalog().PutClusterRecord(ctx, key, "127.0.0.1:1"); err == nil {
			t.Errorf("the Catalog wrote %q", key)
		}
		resp, err := http.Post(c.URL(l)+"/internal/v1/cluster-record", "application/json",
			strings.NewReader(`{"key":"`+key+`","value":"127.0.0.1:1"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("the endpoint wrote %q: %d", key, resp.StatusCode)
		}
	}
	if addr, _ := c.Node(f).Catalog().NodeHTTPAddr(c.Node(l).ID()); addr != c.HTTPAddr(l) {
		t.Fatalf("the leader's address read back as %q", addr)
	}
}
