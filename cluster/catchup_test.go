package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
)

// gatedSnapshots holds back every snapshot Raft opens to restore until the
// gate opens, and tells when one was opened: a slow install from the leader.
type gatedSnapshots struct {
	raft.SnapshotStore
	opened chan struct{} // closed at the first Open
	gate   chan struct{} // closed to let restores read
	once   sync.Once
}

func (s *gatedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return meta, rc, err
	}
	s.once.Do(func() { close(s.opened) })
	return meta, gatedReader{ReadCloser: rc, gate: s.gate}, nil
}

type gatedReader struct {
	io.ReadCloser
	gate chan struct{}
}

func (r gatedReader) Read(p []byte) (int, error) {
	<-r.gate
	return r.ReadCloser.Read(p)
}

// spendMany proposes count checks through n; an answer lost to a leader
// change does not matter here (only that entries reach the log).
func spendMany(t *testing.T, n *cluster.Node, prefix string, count int) {
	t.Helper()
	spec, err := algo.Spec{Algorithm: algo.SlidingLog, Limit: 1000, Window: time.Hour}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < count; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := n.Check(ctx, []fsm.Op{{Checks: []fsm.Check{{Key: fmt.Sprintf("%s/%d", prefix, i), Spec: &spec, Cost: 1}}}})
		cancel()
		if err != nil && !errors.Is(err, cluster.ErrOutcomeUnknown) && !errors.Is(err, cluster.ErrNoLeader) {
			t.Fatalf("check %d: %v", i, err)
		}
	}
}

func lastSnapshotIndex(t *testing.T, n *cluster.Node) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(n.Raft().Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A follower that restarts behind the leader's compacted log is not ready
// while the snapshot the leader sends it is being restored, however long the
// restore takes, and is ready once it holds the snapshot's state.
func TestReadyWaitsForSnapshotInstallAfterRestart(t *testing.T) {
	var gated sync.Map // node index → *gatedSnapshots, for the node under test's next start
	c := clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes:     3,
		Snapshots: clustertest.SnapshotPolicy{Threshold: 32, Trailing: 8, Interval: 50 * time.Millisecond},
		Config: func(i int, cfg *cluster.Config) {
			// raft-wal drops the head of its log by whole segments only:
			// the bbolt store compacts to the snapshot's trailing logs.
			cfg.LogStore = cluster.LogStoreBoltDB
			clustertest.SteadyTimers(i, cfg)
			cluster.SetWrapSnapshots(cfg, func(s raft.SnapshotStore) raft.SnapshotStore {
				if g, ok := gated.Load(i); ok {
					g := g.(*gatedSnapshots)
					g.SnapshotStore = s
					return g
				}
				return s
			})
		},
	})
	leader := c.Leader()
	f := (leader + 1) % 3
	c.Stop(f)
	stoppedAt := c.Node(leader).Raft().LastIndex()
	// Enough entries that the leader snapshots and drops the follower's next
	// entries from its log: it can only catch the follower up by a snapshot.
	deadline := time.Now().Add(clustertest.Timeout)
	for round := 0; lastSnapshotIndex(t, c.Node(c.Leader())) <= stoppedAt+64; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("the leader took no snapshot past index %d", stoppedAt+64)
		}
		spendMany(t, c.Node(c.Leader()), fmt.Sprintf("r%d", round), 100)
		time.Sleep(100 * time.Millisecond)
	}
	want := c.Node(c.Leader()).FSM().AppliedIndex()

	g := &gatedSnapshots{opened: make(chan struct{}), gate: make(chan struct{})}
	gated.Store(f, g)
	c.Start(f)
	n := c.Node(f)
	released := false
	defer func() {
		if !released {
			close(g.gate)
		}
	}()
	// Traffic makes the leader replicate to the follower (and find out that
	// it lacks entries the leader no longer has).
	for round := 0; ; round++ {
		select {
		case <-g.opened:
		case <-time.After(clustertest.Timeout):
			t.Fatal("the restarted follower never restored a snapshot from the leader")
		default:
			spendMany(t, c.Node(c.Leader()), fmt.Sprintf("after/%d", round), 5)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		break
	}
	// The restore is held: the follower knows its leader (heartbeats) and
	// its own commit index says nothing of the entries it lacks.
	for i := 0; i < 50; i++ {
		err := n.Ready()
		if err == nil {
			t.Fatalf("ready while restoring the leader's snapshot (applied index %d, leader's %d)", n.FSM().AppliedIndex(), want)
		}
		if !strings.Contains(err.Error(), "snapshot") && !strings.Contains(err.Error(), "catching up") {
			t.Fatalf("not ready for another reason than the install: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(g.gate)
	released = true
	c.WaitReady(f)
	if got := n.FSM().AppliedIndex(); got+64 < want {
		t.Fatalf("ready at applied index %d, the leader had applied %d before the restart", got, want)
	}
}

// gatedBootstrap holds the leader's answers to GET /internal/v1/bootstrap
// (which a restarted node asks for the leader's applied index) until open.
type gatedBootstrap struct {
	mu   sync.Mutex
	shut bool
}

func (g *gatedBootstrap) set(shut bool) { g.mu.Lock(); g.shut = shut; g.mu.Unlock() }
func (g *gatedBootstrap) closed() bool  { g.mu.Lock(); defer g.mu.Unlock(); return g.shut }

// A restarted follower is ready only once it has learned how far the leader
// has applied and caught up to it: its own log and commit index cannot tell
// it how far behind it is.
func TestReadyWaitsForTheLeadersProgressAfterRestart(t *testing.T) {
	gate := &gatedBootstrap{}
	c := clustertest.MakeClusterOpts(t, clustertest.Options{
		Nodes: 3,
		Handler: func(i int, n *cluster.Node) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/internal/", n.Internal())
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/internal/v1/bootstrap" && gate.closed() {
					http.Error(w, "held by the test", http.StatusServiceUnavailable)
					return
				}
				mux.ServeHTTP(w, r)
			})
		},
	})
	leader := c.Leader()
	f := (leader + 1) % 3
	gate.set(true)
	c.Restart(f)
	n := c.Node(f)
	// It knows the leader and has every entry it had, but not what the
	// leader has applied since.
	for i := 0; i < 50; i++ {
		if err := n.Ready(); err == nil {
			t.Fatal("ready before learning the leader's applied index")
		}
		time.Sleep(10 * time.Millisecond)
	}
	gate.set(false)
	c.WaitReady(f)
}
