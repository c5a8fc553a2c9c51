package logstore

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Damage is named, with its fix: 64 damaged bytes in a raft-wal segment used to stop a
// node with Raft's "failed to get last log at index 87259: log not found",
// naming neither the file nor what to do. Before Raft starts, the entries it
// reads first (the first and last in the log) are read here, and a failure
// names the store, the segment file, the index and the recovery step.

// RecoveryStep is what an operator does with a node whose local state is
// damaged or diverged: it becomes a new member (docs/OPERATIONS.md).
const RecoveryStep = "stop this node, move its data directory aside (keep it for analysis), and start it again with an empty data directory and --join to the other members: " +
	"it rejoins as a new incarnation, is caught up from the leader and votes again only then (docs/OPERATIONS.md, \"Replacing a broken node\"); " +
	"for a single-node cluster, restore the latest backup instead"

// CheckEnd refuses a log that ends before the end last marked (MarkEnd).
func CheckEnd(logs Store, path string) error {
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

// MarkEndEvery is how often WatchEnd marks the log's end.
const MarkEndEvery = 100 * time.Millisecond

// WatchEnd marks the log's end while the node runs, until closing closes.
func (g *Guarded) WatchEnd(closing <-chan struct{}) {
	t := time.NewTicker(MarkEndEvery)
	defer t.Stop()
	for {
		select {
		case <-closing:
			g.MarkEnd()
			return
		case <-t.C:
			if err := g.MarkEnd(); err != nil {
				return // the store reported the failure (Guarded.check)
			}
		}
	}
}

// CheckReadable reads the first and last entries of the log at path.
func CheckReadable(logs raft.LogStore, path string) error {
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
	return fmt.Errorf("raft log damaged: entry %d in %s cannot be read (%v); to recover, %s", idx, where, err, RecoveryStep)
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
