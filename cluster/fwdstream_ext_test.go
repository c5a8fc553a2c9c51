package cluster_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
)

// pathCounter counts, per serving node, the node-to-node requests by path,
// and refuses the check stream with 404 (as a release without it does)
// while refuse is set.
type pathCounter struct {
	mu     sync.Mutex
	counts map[string]int // "node/path"
	refuse atomic.Bool
}

func (pc *pathCounter) handler(i int, n *cluster.Node) http.Handler {
	inner := n.Internal()
	mux := http.NewServeMux()
	mux.Handle("/internal/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pc.mu.Lock()
		if pc.counts == nil {
			pc.counts = map[string]int{}
		}
		pc.counts[fmt.Sprintf("%d%s", i, r.URL.Path)]++
		pc.mu.Unlock()
		if r.URL.Path == cluster.PathCheckStream && pc.refuse.Load() {
			http.NotFound(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	return mux
}

func (pc *pathCounter) count(i int, path string) int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.counts[fmt.Sprintf("%d%s", i, path)]
}

// A follower's checks reach the leader on one persistent stream: many
// concurrent checks, one Upgrade, no request to /internal/v1/check, each
// check counted once. Fails if the follower forwards over HTTP or opens a
// connection per check.
func TestStreamRoundTrip(t *testing.T) {
	var pc pathCounter
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: clustertest.SteadyTimers, Handler: pc.handler})
	l := c.Leader()
	follower := c.Node((l + 1) % 3)
	spec := slidingLog(1000, time.Hour)
	for round := 0; round < 2; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				res, err := follower.Check(context.Background(), check(fmt.Sprintf("rt-%d", g%8), spec))
				if err != nil || !res[0].Allowed {
					errs <- fmt.Errorf("check %d: %+v %v", g, res, err)
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for k := 0; k < 8; k++ {
		if got := remaining(t, c.Node(l), fmt.Sprintf("rt-%d", k), spec); got != 1000-16 {
			t.Errorf("rt-%d: remaining %d, want %d (16 checks, each counted once)", k, got, 1000-16)
		}
	}
	if n := pc.count(l, cluster.PathCheckStream); n != 1 {
		t.Errorf("%d check streams opened for 128 checks in two rounds, want 1", n)
	}
	if n := pc.count(l, cluster.PathCheck); n != 0 {
		t.Errorf("%d checks forwarded over HTTP beside the stream", n)
	}
}

// The leader refuses the check stream (404: a release without it): the
// follower forwards over HTTP, and asks for the stream again only later.
// Fails if the follower gives up on its checks or retries the Upgrade for
// every check.
func TestStreamRefusedFallsBackToHTTP(t *testing.T) {
	var pc pathCounter
	pc.refuse.Store(true)
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: clustertest.SteadyTimers, Handler: pc.handler})
	l := c.Leader()
	follower := c.Node((l + 1) % 3)
	spec := slidingLog(5, time.Hour)
	for i := 0; i < 3; i++ {
		res, err := follower.Check(context.Background(), check("fallback", spec))
		if err != nil || !res[0].Allowed {
			t.Fatalf("check %d with the stream refused: %+v %v", i, res, err)
		}
	}
	if n := pc.count(l, cluster.PathCheck); n != 3 {
		t.Errorf("%d checks forwarded over HTTP, want 3", n)
	}
	if n := pc.count(l, cluster.PathCheckStream); n != 1 {
		t.Errorf("%d Upgrade requests for 3 checks, want 1 (then HTTP for a while)", n)
	}
	if got := remaining(t, c.Node(l), "fallback", spec); got != 2 {
		t.Errorf("remaining %d, want 2", got)
	}
}

// The stream drops after the leader proposed a follower's check and before
// it answered: the follower reports ErrOutcomeUnknown and does not send the
// check again, so it is counted once. Fails if a request in flight on a
// dropped stream is retried.
func TestStreamDropAfterProposeNotRetried(t *testing.T) {
	c := clustertest.MakeCluster(t, 3, clustertest.SteadyTimers)
	l := c.Leader()
	leader := c.Node(l)
	follower := c.Node((l + 1) % 3)
	spec := slidingLog(5, time.Hour)
	if _, err := follower.Check(context.Background(), check("warm", spec)); err != nil {
		t.Fatalf("first check (opens the stream): %v", err)
	}
	var proposals atomic.Int32
	cut := make(chan int, 1)
	cluster.SetPropose(leader, func(cmd []byte, timeout time.Duration) raft.ApplyFuture {
		f := leader.Raft().Apply(cmd, timeout)
		if proposals.Add(1) == 1 {
			if err := f.Error(); err != nil {
				t.Errorf("the proposal failed: %v", err)
			}
			cut <- cluster.CloseStreams(leader)
		}
		return f
	})
	res, err := follower.Check(context.Background(), check("dropped", spec))
	if !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Fatalf("check whose stream dropped after the leader proposed it: %+v %v, want cluster.ErrOutcomeUnknown", res, err)
	}
	if n := <-cut; n == 0 {
		t.Fatalf("no stream to cut: the check did not travel on the stream (%v)", err)
	}
	if got := proposals.Load(); got != 1 {
		t.Fatalf("%d proposals for one check: the follower sent it again", got)
	}
	if got := remaining(t, leader, "dropped", spec); got != 4 {
		t.Fatalf("remaining %d, want 4 (counted once)", got)
	}
	// The follower opens a new stream for the next check.
	if _, err := follower.Check(context.Background(), check("after", spec)); err != nil {
		t.Fatalf("check after the drop: %v", err)
	}
}

// Leadership moves while a follower's check is on the stream: the old
// leader answers not_leader without proposing, the follower sends it to the
// new leader (a new stream) or decides it itself, and it is counted once.
// Fails if not_leader on the stream is not retried, or retried as sent.
func TestStreamLeaderChange(t *testing.T) {
	var pc pathCounter
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: clustertest.SteadyTimers, Handler: pc.handler})
	old := c.Leader()
	var moved atomic.Bool
	leader := c.Node(old)
	cluster.SetStreamBeforeDecide(leader, func() {
		if moved.CompareAndSwap(false, true) {
			if err := leader.Raft().LeadershipTransfer().Error(); err != nil {
				t.Errorf("leadership transfer: %v", err)
			}
		}
	})
	fi := (old + 1) % 3
	spec := slidingLog(5, time.Hour)
	res, err := c.Node(fi).Check(context.Background(), check("moved-stream", spec))
	if err != nil || !res[0].Allowed {
		t.Fatalf("check on the stream while leadership moved: %+v %v", res, err)
	}
	if !moved.Load() {
		t.Fatal("the check never reached the old leader's stream")
	}
	nl := c.Leader()
	if nl == old {
		t.Fatalf("leadership did not move from node%d", old)
	}
	if nl != fi && pc.count(nl, cluster.PathCheckStream) != 1 {
		t.Errorf("the follower opened %d streams to the new leader node%d, want 1", pc.count(nl, cluster.PathCheckStream), nl)
	}
	for i, n := range c.Nodes() {
		if got := remaining(t, n, "moved-stream", spec); got != 4 {
			t.Errorf("node%d: remaining %d, want 4 (counted once)", i, got)
		}
	}
}

// upgrade asks addr for a check stream over rt with the given token ("":
// none) and returns the status, and the connection after a 101.
func upgrade(t *testing.T, rt http.RoundTripper, url, token string) (int, io.ReadWriteCloser) {
	t.Helper()
	return upgradeAs(t, rt, url, token, "")
}

// upgradeAs is upgrade naming the node that asks ("": none).
func upgradeAs(t *testing.T, rt http.RoundTripper, url, token, node string) (int, io.ReadWriteCloser) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+cluster.PathCheckStream, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", cluster.StreamProto)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if node != "" {
		req.Header.Set("X-Limitd-Node", node)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp.StatusCode, resp.Body.(io.ReadWriteCloser)
}

// The check stream is an internal endpoint like the others: without the
// admin token, without a certificate, or with the certificate of a node
// outside the cluster, the Upgrade is refused; a member with the token gets
// its stream. Fails if the stream bypasses authenticate.
func TestStreamUpgradeAuthenticated(t *testing.T) {
	_, cert := nodeCerts(t, "limitd stream CA")
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3,
		TLS:    func(i int) *tls.Config { return cert(fmt.Sprintf("n%d", i)) },
		Config: func(i int, cfg *cluster.Config) { clustertest.SteadyTimers(i, cfg); cfg.AdminToken = "s3cret" },
	})
	l := c.Leader()
	url := c.URL(l)
	before := c.Node(l).FSM().AppliedIndex()
	for _, tc := range []struct {
		name  string
		tc    *tls.Config
		token string
		want  int
	}{
		{"member without the token", cert("n1"), "", http.StatusUnauthorized},
		{"member with a wrong token", cert("n1"), "guess", http.StatusUnauthorized},
		{"no client certificate", &tls.Config{RootCAs: cert("n1").RootCAs}, "s3cret", http.StatusUnauthorized},
		{"outsider n9", cert("n9"), "s3cret", http.StatusForbidden},
	} {
		if code, _ := upgrade(t, &http.Transport{TLSClientConfig: tc.tc}, url, tc.token); code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	if code, _ := upgrade(t, &http.Transport{TLSClientConfig: cert("n1")}, url, "s3cret"); code != http.StatusSwitchingProtocols {
		t.Fatalf("member n1 with the token: %d, want 101", code)
	}
	if got := c.Node(l).FSM().AppliedIndex(); got != before {
		t.Errorf("applied index %d → %d during refused upgrades", before, got)
	}
	// And followers' checks travel on it over TLS with the token.
	spec := slidingLog(5, time.Hour)
	if res, err := c.Node((l+1)%3).Check(context.Background(), check("tls-stream", spec)); err != nil || !res[0].Allowed {
		t.Fatalf("forwarded check over TLS: %+v %v", res, err)
	}
}

// A frame over the bound closes the leader's stream before the leader reads
// it, and nothing is proposed. Fails if the leader reads (and allocates)
// the claimed bytes or keeps the connection.
func TestStreamOversizedFrameClosesConnection(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	before := c.Node(0).FSM().AppliedIndex()
	code, rwc := upgrade(t, &http.Transport{}, c.URL(0), "")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", code)
	}
	if _, err := rwc.Write(binary.BigEndian.AppendUint32(nil, uint32(cluster.MaxStreamRequest+1))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := bufio.NewReader(rwc).ReadByte(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
			t.Fatalf("after an oversized frame: %v, want the connection closed", err)
		}
	case <-time.After(clustertest.Timeout):
		t.Fatal("the leader kept a stream that sent an oversized frame")
	}
	if got := c.Node(0).FSM().AppliedIndex(); got != before {
		t.Fatalf("applied index %d → %d: something was proposed", before, got)
	}
}

// A leader serves at most 4 check streams per peer: a fifth Upgrade from
// the same node is refused (503 no_leader, so the follower forwards over
// HTTP), while another node still gets its stream. Fails without the
// per-peer bound.
func TestStreamConnectionsPerPeerBound(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	rt := &http.Transport{}
	for i := 0; i < 4; i++ {
		if code, _ := upgradeAs(t, rt, c.URL(0), "", "n7"); code != http.StatusSwitchingProtocols {
			t.Fatalf("stream %d of n7: %d, want 101", i+1, code)
		}
	}
	if code, _ := upgradeAs(t, rt, c.URL(0), "", "n7"); code != http.StatusServiceUnavailable {
		t.Fatalf("a fifth stream of n7: %d, want 503", code)
	}
	if code, _ := upgradeAs(t, rt, c.URL(0), "", "n8"); code != http.StatusSwitchingProtocols {
		t.Fatalf("n8's first stream beside n7's four: %d, want 101", code)
	}
}
