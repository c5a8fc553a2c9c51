package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
)

// failingLogs fails every log write with ENOSPC once full is set, as a WAL
// that cannot create its next segment on a full disk does.
type failingLogs struct {
	cluster.LogStore
	full *atomic.Bool
}

func (f *failingLogs) StoreLogs(ls []*raft.Log) error {
	if f.full.Load() {
		return &syscallError{syscall.ENOSPC}
	}
	return f.LogStore.StoreLogs(ls)
}

func (f *failingLogs) StoreLog(l *raft.Log) error { return f.StoreLogs([]*raft.Log{l}) }

type syscallError struct{ errno syscall.Errno }

func (e *syscallError) Error() string { return "create segment file: " + e.errno.Error() }
func (e *syscallError) Unwrap() error { return e.errno }

// A leader whose Raft log cannot be written (disk full) stops: every waiter
// answers at once with an error naming the cause, Failed is closed, Health
// says why, and its Raft stops instead of cycling through elections; the
// other two nodes elect a leader and go on deciding.
func TestLogStoreFailureStopsNode(t *testing.T) {
	full := make([]*atomic.Bool, 3)
	for i := range full {
		full[i] = &atomic.Bool{}
	}
	c := clustertest.MakeCluster(t, 3, func(i int, cfg *cluster.Config) {
		cluster.SetWrapLogStore(cfg, func(s cluster.LogStore) cluster.LogStore { return &failingLogs{LogStore: s, full: full[i]} })
	})
	l := c.Leader()
	n := c.Node(l)
	spec := slidingLog(1_000_000, time.Hour)
	var wg sync.WaitGroup
	var ok atomic.Int64
	errs := make(chan error, 100)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := n.Check(context.Background(), check("k", spec))
				if err == nil {
					ok.Add(1)
					continue
				}
				errs <- err
				return
			}
		}()
	}
	waitFor(t, func() bool { return ok.Load() > 100 })
	full[l].Store(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("checks on a leader with a full disk still waiting after 10 s")
	}
	close(errs)
	for err := range errs {
		if !errors.Is(err, cluster.ErrUnavailable) && !errors.Is(err, cluster.ErrOutcomeUnknown) {
			t.Errorf("check on a leader with a full disk: %v, want cluster.ErrUnavailable or cluster.ErrOutcomeUnknown", err)
		}
	}
	select {
	case <-n.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("Failed not closed after the raft log could not be written")
	}
	if err := n.Health(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Health: %v, want the cause (no space left on device)", err)
	}
	if _, err := n.Check(context.Background(), check("k", spec)); !errors.Is(err, cluster.ErrUnavailable) || !strings.Contains(err.Error(), "raft log") {
		t.Fatalf("check after the failure: %v, want cluster.ErrUnavailable naming the raft log", err)
	}
	waitFor(t, func() bool { return n.Raft().State() == raft.Shutdown })
	// The others carry on.
	other := c.Node((l + 1) % 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := other.Check(ctx, check("after", spec)); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("the remaining nodes do not decide: %v", err)
		}
	}
}
