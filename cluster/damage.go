package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/fsm"
)

// Damage is named, with its fix: 64 damaged bytes in a raft-wal segment used to stop a
// node with Raft's "failed to get last log at index 87259: log not found",
// naming neither the file nor what to do. Before Raft starts, the entries it
// reads first (the first and last in the log) are read here, and a failure
// names the store, the segment file, the index and the recovery step.

// recoveryStep is what an operator does with a node whose local state is
// damaged or diverged: it becomes a new member (docs/OPERATIONS.md).
const recoveryStep = "stop this node, move its data directory aside (keep it for analysis), and start it again with an empty data directory and --join to the other members: " +
	"it rejoins as a new incarnation, is caught up from the leader and votes again only then (docs/OPERATIONS.md, \"Replacing a broken node\"); " +
	"for a single-node cluster, restore the latest backup instead"

// checkLogEnd refuses a log that ends before the end last marked (markEnd).
func checkLogEnd(logs logStore, path string) error {
	mark, err := logs.GetUint64(keyLogEnd)
	if err != nil || mark == 0 {
		return nil // never marked ("not found"): nothing to compare
	}
	last, err := logs.LastIndex()
	if err != nil {
		return damagedLog(path, 0, fmt.Errorf("read last index: %w", err))
	}
	if last < mark {
		return damagedLog(path, last+1, fmt.Errorf("the log ends at index %d but held entries up to %d: the entries after %d were lost (damaged data is dropped when the log is opened)", last, mark, last))
	}
	return nil
}

// markLogEndEvery is how often the log's end is marked.
const markLogEndEvery = 100 * time.Millisecond

// watchLogEnd marks the log's end while the node runs.
func (n *Node) watchLogEnd(g *guardedLogStore) {
	defer n.wg.Done()
	t := time.NewTicker(markLogEndEvery)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
			g.markEnd()
			return
		case <-t.C:
			if err := g.markEnd(); err != nil {
				return // the store reported the failure (guardedLogStore.check)
			}
		}
	}
}

// checkLogReadable reads the first and last entries of the log at path.
func checkLogReadable(logs raft.LogStore, path string) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return damagedLog(path, 0, fmt.Errorf("read first index: %w", err))
	}
	last, err := logs.LastIndex()
	if err != nil {
		return damagedLog(path, 0, fmt.Errorf("read last index: %w", err))
	}
	if last == 0 {
		return nil
	}
	for _, idx := range []uint64{first, last} {
		var l raft.Log
		if err := logs.GetLog(idx, &l); err != nil {
			return damagedLog(path, idx, err)
		}
	}
	return nil
}

func damagedLog(path string, idx uint64, err error) error {
	where := path
	if seg := walSegmentFor(path, idx); seg != "" {
		where = seg
	}
	return fmt.Errorf("raft log damaged: entry %d in %s cannot be read (%v); to recover, %s", idx, where, err, recoveryStep)
}

// walSegmentFor names the raft-wal segment file that holds idx: segment
// files are named <first index, 20 digits>-<id>.wal.
func walSegmentFor(dir string, idx uint64) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	type seg struct {
		base uint64
		name string
	}
	var segs []seg
	for _, e := range ents {
		name := e.Name()
		b, _, ok := strings.Cut(name, "-")
		if !ok || !strings.HasSuffix(name, ".wal") {
			continue
		}
		base, err := strconv.ParseUint(b, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, seg{base, name})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	found := ""
	for _, s := range segs {
		if s.base <= idx || found == "" {
			found = filepath.Join(dir, s.name)
		}
	}
	return found
}

// historyDiverged stops the node for good: its applied state is ahead of the
// log its leader gives it. Health, /readyz, /v1/cluster and the log say so,
// and limitd serve exits with the recovery step.
func (n *Node) historyDiverged(err error) { n.fail(err, true) }

// restoreGuard is the state machine as Raft sees it. It refuses a snapshot
// that would take this replica back behind what it already applied: in one
// history a leader sends a snapshot only when it no longer holds the entries a
// follower needs, and those lie above every index the follower applied (a
// replica applies only committed entries, and every leader holds them). A
// snapshot behind the applied index therefore comes from a history that
// diverged from this node's (or its state was damaged), so the node stops as
// it does when a leader replaces applied log entries (logstore.go). Restore of
// a state machine set aside after an unclean stop starts from index 0 and is
// never behind.
type restoreGuard struct {
	*fsm.FSM
	diverged func(error)
}

// Restore installs the snapshot and stops the node if it went back in the log.
func (g restoreGuard) Restore(rc io.ReadCloser) error {
	before := g.FSM.AppliedIndex()
	if err := g.FSM.Restore(rc); err != nil {
		return err
	}
	if after := g.FSM.AppliedIndex(); after < before {
		err := fmt.Errorf("history diverged: a snapshot up to index %d was installed, but this node's state machine had already applied up to %d, so its earlier answers reflect entries that snapshot's history does not have; to recover, %s", after, before, recoveryStep)
		g.diverged(err)
		return err
	}
	return nil
}
