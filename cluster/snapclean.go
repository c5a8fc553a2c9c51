package cluster

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// removeTempSnapshots removes the snapshot directories a process left
// unfinished (raft's FileSnapshotStore writes a snapshot, taken or being
// installed from the leader, under "<name>.tmp" and renames it when it is
// complete). One left by a process killed halfway was never completed and
// nothing reads it: raft only warns about it, at every start, and it keeps
// its disk space for good. It runs at open, before the snapshot store and
// Raft, while the data directory's lock (fsm.db.lock) keeps any other
// process out, so no snapshot can be in progress.
func removeTempSnapshots(dataDir string, log *slog.Logger) {
	dir := filepath.Join(dataDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // none yet; the snapshot store reports a real problem
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			log.Warn("could not remove an unfinished snapshot", "path", p, "error", err)
			continue
		}
		log.Info("removed an unfinished snapshot left by an earlier process", "path", p)
	}
}
