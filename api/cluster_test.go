package api

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/nodeapi"
)

// apiCluster is the cluster harness with each node's full API (including
// the /internal/ forwarding endpoints) on its loopback HTTP server, so that
// requests sent to a follower really travel to the leader.
type apiCluster struct {
	*clustertest.Cluster
	t *testing.T
}

func newAPICluster(t *testing.T, size int) *apiCluster {
	t.Helper()
	return newAPIClusterJoin(t, size, true)
}

// newAPIClusterJoin is newAPICluster; joinHTTP false joins the other nodes
// without http_addr (which the join API documents as optional).
func newAPIClusterJoin(t *testing.T, size int, joinHTTP bool) *apiCluster {
	t.Helper()
	c := &apiCluster{t: t}
	c.Cluster = clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: size, SkipShort: true,
		Handler: func(_ int, n *cluster.Node) http.Handler {
			return newAPI(n, Config{Logger: discardLogger()}).Handler()
		},
		// Join through the HTTP API of node 0, as `limitd --join` does.
		Join: func(h *clustertest.Cluster, i int) error {
			body := fmt.Sprintf(`{"id":"n%d","raft_addr":"%s","http_addr":"%s"}`, i, h.RaftAddr(i), h.HTTPAddr(i))
			if !joinHTTP {
				body = fmt.Sprintf(`{"id":"n%d","raft_addr":"%s"}`, i, h.RaftAddr(i))
			}
			resp, err := http.Post(h.URL(0)+"/v1/cluster/join", "application/json", strings.NewReader(body))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			switch {
			case resp.StatusCode == http.StatusOK:
				return nil
			case strings.Contains(string(b), `"code":"`+CodeOutcomeUnknown+`"`):
				return fmt.Errorf("join n%d: %d %s: %w", i, resp.StatusCode, b, nodeapi.ErrOutcomeUnknown)
			default:
				return fmt.Errorf("join n%d: %d %s", i, resp.StatusCode, b)
			}
		},
	})
	c.waitReady()
	return c
}

func (c *apiCluster) do(i int, method, path, body string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.URL(i)+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s on node %d: %v", method, path, i, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *apiCluster) json(i int, method, path, body string) map[string]any {
	c.t.Helper()
	code, b := c.do(i, method, path, body)
	if code != 200 {
		c.t.Fatalf("%s %s on node %d: %d %s", method, path, i, code, b)
	}
	return response{code: code, body: []byte(b)}.json(c.t)
}

func (c *apiCluster) waitReady() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < c.Size(); i++ {
		for {
			code, _ := c.do(i, "GET", "/readyz", "")
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d not ready", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (c *apiCluster) leader() int {
	c.t.Helper()
	return c.Leader()
}

// TestClusterForwardingAndIdempotency: requests sent to followers are decided
// by the leader and counted once; a request_id retried on other nodes and
// after a leader change is answered from the first decision.
func TestClusterForwardingAndIdempotency(t *testing.T) {
	c := newAPICluster(t, 3)
	l := c.leader()
	f1, f2 := (l+1)%3, (l+2)%3

	// An admin write through a follower reaches every node.
	c.json(f1, "PUT", "/v1/policies/api", `{"algorithm":"sliding_log","limit":5,"window":"1h"}`)
	st := c.json(f2, "GET", "/v1/cluster", "")
	if len(st["members"].([]any)) != 3 || st["leader_id"] != fmt.Sprintf("n%d", l) {
		t.Fatalf("cluster status: %v", st)
	}

	allowed := 0
	for i := 0; i < 8; i++ {
		m := c.json([]int{f1, f2}[i%2], "POST", "/v1/check", `{"key":"fwd","policy":"api"}`)
		if m["allowed"] == true {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("allowed %d through followers, want exactly the limit 5", allowed)
	}
	for i := 0; i < c.Size(); i++ {
		m := c.json(i, "GET", "/v1/keys/fwd?policy=api", "")
		if got := num(t, m["decision"].(map[string]any), "remaining"); got != 0 {
			t.Fatalf("node %d sees remaining %d, want 0", i, got)
		}
	}

	// The same request_id on three nodes, then after a leader change.
	const body = `{"key":"idem","policy":"api","cost":2,"request_id":"req-42"}`
	first := c.json(f1, "POST", "/v1/check", body)
	if first["allowed"] != true || num(t, first, "remaining") != 3 || first["replayed"] != nil {
		t.Fatalf("first: %v", first)
	}
	for _, i := range []int{l, f2} {
		if m := c.json(i, "POST", "/v1/check", body); m["replayed"] != true || num(t, m, "remaining") != 3 {
			t.Fatalf("retry on node %d: %v", i, m)
		}
	}
	if err := c.Node(l).TransferLeadership(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	newLeader := c.leader()
	for newLeader == l {
		time.Sleep(10 * time.Millisecond)
		newLeader = c.leader()
	}
	c.waitReady()
	for i := 0; i < c.Size(); i++ {
		if m := c.json(i, "POST", "/v1/check", body); m["replayed"] != true || num(t, m, "remaining") != 3 {
			t.Fatalf("retry on node %d after the leader change: %v", i, m)
		}
	}
	m := c.json(f2, "GET", "/v1/keys/idem?policy=api", "")
	if got := num(t, m["decision"].(map[string]any), "remaining"); got != 3 {
		t.Fatalf("remaining %d after 6 retries of a cost-2 check, want 3 (counted once)", got)
	}
}

// TestJoinWithoutHTTPAddr: http_addr is optional in a join (a join without it once
// answered 500). A node joined without it registers its own address when it
// becomes leader, so the others forward to it.
func TestJoinWithoutHTTPAddr(t *testing.T) {
	c := newAPIClusterJoin(t, 3, false)
	// Hand leadership to n1, which joined without an HTTP address.
	l := c.leader()
	if l != 1 {
		if err := c.Node(l).TransferLeadershipTo("n1", c.RaftAddr(1)); err != nil {
			t.Fatalf("leadership transfer: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := c.json(2, "GET", "/v1/cluster", "")
		if m["leader_id"] == "n1" && m["leader_http_addr"] == c.HTTPAddr(1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 leads but its address is not known: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.json(0, "PUT", "/v1/policies/api", `{"algorithm":"fixed_window","limit":1,"window":"1h"}`)
	if m := c.json(2, "POST", "/v1/check", `{"key":"k","policy":"api"}`); m["allowed"] != true {
		t.Fatalf("check through a follower: %v", m)
	}
	if m := c.json(0, "POST", "/v1/check", `{"key":"k","policy":"api"}`); m["allowed"] != false {
		t.Fatalf("second check through the other follower: %v", m)
	}
	// Bad ports are refused before anything is proposed.
	for _, body := range []string{
		`{"id":"n9","raft_addr":"127.0.0.1:99999"}`,
		`{"id":"n9","raft_addr":"127.0.0.1:0"}`,
		`{"id":"n9","raft_addr":"127.0.0.1:8309","http_addr":"127.0.0.1:65536"}`,
	} {
		code, resp := c.do(0, "POST", "/v1/cluster/join", body)
		if code != 400 || !strings.Contains(resp, `"code":"invalid_argument"`) {
			t.Fatalf("join %s: %d %s, want 400", body, code, resp)
		}
	}
}
