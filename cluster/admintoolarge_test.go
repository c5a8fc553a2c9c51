package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// An admin command over MaxCommandBytes (an 809 KB RLS configuration in
// a report) is refused with ErrTooLarge, which the service answers as
// payload_too_large (HTTP 413), not internal (500).
func TestOversizedAdminCommandIsTooLarge(t *testing.T) {
	c := clustertest.MakeCluster(t, 1, nil)
	var y strings.Builder
	y.WriteString("domain: big\ndescriptors:\n")
	for i := 0; i < 4000; i++ {
		fmt.Fprintf(&y, "  - key: k%d\n    value: v%d\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", i, i)
	}
	err := c.Node(0).Catalog().PutRLSDomain(context.Background(), "big", []byte(y.String()))
	if !errors.Is(err, cluster.ErrTooLarge) {
		t.Fatalf("a %d-byte domain: %v, want ErrTooLarge", y.Len(), err)
	}
}

// A join at a Raft address another member has is a conflict naming that
// member (HTTP 409), on the leader and forwarded from a follower; it
// answered 500.
func TestJoinAtTakenAddressConflicts(t *testing.T) {
	c := clustertest.MakeCluster(t, 2, nil)
	for i := 0; i < 2; i++ {
		err := c.Node(i).Join(context.Background(), "intruder", c.RaftAddr(1), "")
		var fe *fsm.Error
		if !errors.As(err, &fe) || fe.Code != fsm.CodeConflict || !strings.Contains(fe.Message, c.Node(1).ID()) {
			t.Fatalf("join through n%d at n1's address: %v, want conflict naming %s", i, err, c.Node(1).ID())
		}
	}
}
