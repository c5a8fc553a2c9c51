package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Bounded shutdown: SIGTERM ends the process in time. hashicorp/raft's Shutdown waits for every
// replication goroutine; one blocked in the network transport's pipeline
// (netPipeline.AppendEntries waiting on a follower that stalled after a
// rejected append) held a leader's SIGTERM for over 85 s, with its ports and
// store lock. Close therefore waits ShutdownTimeout, then closes the
// transport under Raft — which fails the blocked calls — and waits as long
// again; a Raft that still has not stopped is left behind (the process is
// exiting) and the stores are closed regardless: the log is fsynced at every
// append, so this is never worse than a kill -9, which limitd survives.

// ErrShutdownTimeout: Raft did not stop within twice Config.ShutdownTimeout
// even with its transport closed; the stores were closed anyway.
var ErrShutdownTimeout = errors.New("raft did not shut down in time")

// shutdownRaft runs raft.Shutdown within the bound described above.
func (n *Node) shutdownRaft() error {
	done := make(chan error, 1)
	go func() { done <- n.raft.Shutdown().Error() }()
	wait := func() (error, bool) {
		t := time.NewTimer(n.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case err := <-done:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	err, ok := wait()
	if !ok {
		n.log.Warn("raft shutdown is taking too long: closing its transport", "waited", n.cfg.ShutdownTimeout)
		// Even a transport the caller passed in: it is unusable once Raft is gone.
		closeTransport(n.gate, false)
		err, ok = wait()
	}
	if !ok {
		n.log.Error("raft did not shut down: closing the stores anyway", "waited", 2*n.cfg.ShutdownTimeout, "raft_goroutines", raftStacks())
		return fmt.Errorf("%w (%v, transport closed after %v)", ErrShutdownTimeout, 2*n.cfg.ShutdownTimeout, n.cfg.ShutdownTimeout)
	}
	if err != nil {
		return fmt.Errorf("raft shutdown: %w", err)
	}
	return nil
}

// raftStacks returns the stacks of the goroutines inside hashicorp/raft, for
// the report of a shutdown that did not finish (what it waits for).
func raftStacks() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out [][]byte
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("hashicorp/raft")) {
			out = append(out, g)
		}
	}
	return string(bytes.Join(out, []byte("\n\n")))
}
