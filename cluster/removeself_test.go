package cluster_test

import (
	"context"
	"testing"
	"time"
)

// TestRemoveLeaderThroughItself: removing the leader through itself answers
// success (the removal is committed; the leader then steps down, and the
// node-table cleanup it can no longer propose is not the caller's failure),
// and so does the same removal asked through a follower of the leader.
func TestRemoveLeaderThroughItself(t *testing.T) {
	for _, through := range []string{"leader", "follower"} {
		t.Run(through, func(t *testing.T) {
			c := newTestCluster(t, 3)
			l := c.Leader()
			via := l
			if through == "follower" {
				via = (l + 1) % 3
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Node(via).Remove(ctx, c.Node(l).ID()); err != nil {
				t.Fatalf("remove the leader through the %s: %v", through, err)
			}
			select {
			case <-c.Node(l).Removed():
			case <-ctx.Done():
				t.Fatal("the removed leader did not notice its removal")
			}
			other := (l + 1) % 3
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, err := c.Node(other).Status(ctx)
				if err == nil && len(st.Members) == 2 && st.LeaderID != "" && st.LeaderID != c.Node(l).ID() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after removing the leader: %+v %v", st, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
