package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// --join entries: host:port or URLs; a host name stands for every address
// it resolves to (localhost here, as a headless service name would be in
// Kubernetes); duplicates collapse; a malformed entry is permanent.
func TestResolveJoin(t *testing.T) {
	p := peerClient{scheme: "https"}
	got, err := p.resolveJoin(context.Background(), []string{"localhost:8080", "127.0.0.1:8080", "http://127.0.0.2:9000/"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, "https://127.0.0.1:8080") || !slices.Contains(got, "http://127.0.0.2:9000") {
		t.Errorf("resolved %q", got)
	}
	for _, u := range got {
		if strings.Contains(u, "localhost") {
			t.Errorf("host name not expanded: %q", got)
		}
	}
	if c := strings.Count(strings.Join(got, " "), "https://127.0.0.1:8080"); c != 1 {
		t.Errorf("127.0.0.1:8080 listed %d times: %q", c, got)
	}
	_, err = p.resolveJoin(context.Background(), []string{"ftp://x:1"})
	var perm *permanentError
	if !errors.As(err, &perm) {
		t.Errorf("ftp:// join address: %v, want a permanent error", err)
	}
}

// Only the lowest ID of exactly expect stateless nodes that all see each
// other bootstraps; a node with state anywhere means join instead.
func TestTryBootstrapDecision(t *testing.T) {
	info := func(id string, seen ...string) bootstrapInfo {
		return bootstrapInfo{ID: id, RaftAddr: id + ":1", Expect: 3, Seen: seen}
	}
	all := []string{"a", "b", "c"}
	n := &discovery{self: "b", log: discardLogger()}
	n.adm = &admission{dir: t.TempDir(), nodeID: "b", log: n.log}
	for i, c := range []struct {
		peers []bootstrapInfo
		want  string
	}{
		{[]bootstrapInfo{info("a", all...), info("b", all...)}, "2 of 3"},
		{[]bootstrapInfo{info("a", "a", "b"), info("b", all...), info("c", all...)}, "does not see c"},
		{[]bootstrapInfo{info("a", all...), info("b", all...), info("c", all...)}, "waiting for a"},
		{[]bootstrapInfo{info("a", all...), info("b", all...), info("c", all...), info("d", all...)}, "4 nodes"},
		{[]bootstrapInfo{{ID: "a", Expect: 2, Seen: all}, info("b", all...), info("c", all...)}, "expects 2"},
		{[]bootstrapInfo{{ID: "a", HasState: true}, info("b", all...)}, errClusterExists.Error()},
	} {
		done, why := n.tryBootstrap(c.peers, 3)
		if done || why == nil || !strings.Contains(why.Error(), c.want) {
			t.Errorf("%+v: done %v, %v; want %q", c.peers, done, why, c.want)
		}
		// Only agreeing to bootstrap (all three new, seeing each other)
		// lets a node without a past vote.
		if got, want := n.adm.admitted.Load(), i >= 2; got != want {
			t.Errorf("case %d: admitted %v, want %v", i, got, want)
		}
	}
}

// The lowest ID bootstraps only once every peer has agreed (admitted
// itself): a peer that had not would join the new cluster unadmitted and be
// demoted as "a new data directory" with no previous incarnation.
func TestBootstrapWaitsForEveryPeerToAgree(t *testing.T) {
	all := []string{"a", "b", "c"}
	n := &discovery{self: "a", log: discardLogger()} // no Raft: bootstrapping here panics
	n.adm = &admission{dir: t.TempDir(), nodeID: "a", log: n.log}
	peers := []bootstrapInfo{
		{ID: "a", RaftAddr: "a:1", Expect: 3, Seen: all, Incarnation: "ia"},
		{ID: "b", RaftAddr: "b:1", Expect: 3, Seen: all, Incarnation: "ib", Admitted: true},
		{ID: "c", RaftAddr: "c:1", Expect: 3, Seen: all, Incarnation: "ic"},
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("bootstrapped although c had not agreed (%v)", r)
		}
	}()
	done, why := n.tryBootstrap(peers, 3)
	if done || why == nil || !strings.Contains(why.Error(), "waiting for c to agree") {
		t.Fatalf("done %v, %v; want to wait for c", done, why)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A down peer: one WARN however many heartbeats fail, an INFO reminder per
// interval, one INFO when it is back; down again later is a new WARN.
func TestPeerReports(t *testing.T) {
	var buf strings.Builder
	r := peerReports{log: slog.New(slog.NewTextHandler(&buf, nil)), every: 30 * time.Second}
	t0 := time.Unix(1000, 0)
	for i := 0; i < 100; i++ { // 100 failed heartbeats over 50s
		r.failed("n3", t0.Add(time.Duration(i)*500*time.Millisecond))
	}
	r.resumed("n3", t0.Add(60*time.Second))
	r.resumed("n3", t0.Add(61*time.Second)) // no second "again"
	r.failed("n3", t0.Add(90*time.Second))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=WARN msg="peer unreachable" peer=n3`,
		`level=INFO msg="peer still unreachable" peer=n3 down_for=30s`,
		`level=INFO msg="peer reachable again" peer=n3 down_for=1m0s`,
		`level=WARN msg="peer unreachable" peer=n3`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged:\n%s\nwant %d lines", buf.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %s", i+1, lines[i], w)
		}
	}
}

// Join rounds back off exponentially from 200ms, capped at JoinBackoffMax, jittered within [d/2, d].
func TestJoinBackoff(t *testing.T) {
	d := joinBackoffMin
	var seq []time.Duration
	for i := 0; i < 8; i++ {
		seq = append(seq, d)
		if j := jitter(d); j < d/2 || j > d {
			t.Errorf("jitter(%v) = %v", d, j)
		}
		d = nextBackoff(d)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(seq, want) {
		t.Errorf("backoff %v, want %v", seq, want)
	}
}
