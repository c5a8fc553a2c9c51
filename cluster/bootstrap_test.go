package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// --join entries: host:port or URLs; a host name stands for every address
// it resolves to (localhost here, as a headless service name would be in
// Kubernetes); duplicates collapse; a malformed entry is permanent.
func TestResolveJoin(t *testing.T) {
	n := &Node{cfg: Config{HTTPScheme: "https"}}
	got, err := n.resolveJoin(context.Background(), []string{"localhost:8080", "127.0.0.1:8080", "http://127.0.0.2:9000/"})
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
	_, err = n.resolveJoin(context.Background(), []string{"ftp://x:1"})
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
	n := &Node{cfg: Config{NodeID: "b"}}
	n.log = discardLogger()
	for _, c := range []struct {
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
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
