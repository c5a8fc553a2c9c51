package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/logstore"
)

// No vote without a past: a wiped voter must not vote in a leader that lacks committed entries.
//
// hashicorp/raft grants a vote whenever it has no configuration ("very
// likely trying to bootstrap"). A voter whose data directory was wiped and
// that comes back under its old node ID has no configuration, so it votes
// for whichever candidate asks first — possibly one that misses committed
// entries, which then wins and erases them. limitd therefore gives every data
// directory an incarnation: a random id written when the directory is created,
// before any Raft state. A node that has not been admitted in its current
// incarnation neither grants nor asks for votes or pre-votes (voteGate
// below; the gate itself is raftnet.VoteGate). It is admitted when:
//
//   - its directory was restored from a backup (backup.Restore writes Raft
//     state and no incarnation file: the restored node is the cluster's
//     only voter, its past is the backup's, and it must elect itself);
//   - it bootstrapped the cluster, alone or with its --bootstrap-expect peers
//     (all of them had no state: there is no past to lose);
//   - a leader recorded its incarnation in the replicated node table
//     (incarnationKey): it does so only after the node holds every entry the
//     leader had when it accepted the join (admit.go).
//
// Admission is written to the incarnation file, so it survives restarts; a
// crash before admission keeps the node voteless.

// incarnationFile is the data directory's identity, beside fsm.db and the log.
const incarnationFile = "incarnation.json"

// incarnation is the content of incarnationFile.
type incarnation struct {
	ID string `json:"incarnation"`
	// Admitted: a leader (or the bootstrap) has made this incarnation a
	// voter with the whole history; it may vote.
	Admitted bool `json:"admitted"`
	// NodeID is the node the directory belongs to: a copy of another
	// node's directory started under a new --node-id is refused at open
	// (claimDataDir) instead of running forever, never ready. Empty in
	// files written before it was recorded.
	NodeID string `json:"node_id,omitempty"`
}

// claimDataDir checks that the directory of inc belongs to nodeID, and
// records nodeID in a file that names no node yet.
func claimDataDir(dir, nodeID string, inc incarnation) (incarnation, error) {
	switch inc.NodeID {
	case nodeID:
		return inc, nil
	case "":
		inc.NodeID = nodeID
		return inc, writeIncarnation(dir, inc)
	}
	return inc, fmt.Errorf("data directory %s belongs to node %q (%s), not to --node-id %q (which defaults to --raft-addr): start it as %q, or give node %q an empty data directory and --join (a copy of a member's directory under another id never becomes ready)",
		dir, inc.NodeID, incarnationFile, nodeID, inc.NodeID, nodeID)
}

// incarnationKey is the node table entry under which the leader records a
// member's admitted incarnation. Node ids never contain '/' in practice (they
// are names or host:port); the prefix keeps these records apart from the
// HTTP addresses without a new command.
func incarnationKey(nodeID string) string { return "incarnation/" + nodeID }

// loadIncarnation reads the data directory's incarnation, creating it (not
// admitted) for a new directory, or (admitted) for a directory restored from
// a backup: the only one with Raft state and no file, since Open writes the
// file before any Raft state. It runs before any Raft state is created.
func loadIncarnation(dir string) (incarnation, bool, error) {
	path := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(path)
	if err == nil {
		var inc incarnation
		if err := json.Unmarshal(b, &inc); err != nil || inc.ID == "" {
			return inc, false, fmt.Errorf("incarnation file %s is damaged (%v): if this node's data directory is lost, move the whole directory aside and start the node again with --join (docs/OPERATIONS.md, replacing a broken node)", path, err)
		}
		return inc, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return incarnation{}, false, fmt.Errorf("read incarnation %s: %w", path, err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return incarnation{}, false, fmt.Errorf("new incarnation: %w", err)
	}
	restored := logstore.HasLog(dir)
	inc := incarnation{ID: hex.EncodeToString(r[:]), Admitted: restored}
	if err := writeIncarnation(dir, inc); err != nil {
		return inc, false, err
	}
	return inc, true, nil
}

// writeIncarnation replaces the file atomically and durably.
func writeIncarnation(dir string, inc incarnation) error {
	path := filepath.Join(dir, incarnationFile)
	b, _ := json.Marshal(inc)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write incarnation %s: %w", path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("write incarnation %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// admission is a node's incarnation and whether it may vote.
type admission struct {
	dir      string
	nodeID   string
	id       string // the incarnation id: never changes
	admitted atomic.Bool
	mu       sync.Mutex // serialises writes of the file
	log      *slog.Logger
	// recorded returns the incarnation the replicated node table holds for
	// this node ("" if none).
	recorded func() string
	// lastRefusal: unix nanos of the last "refusing to vote" line.
	lastRefusal atomic.Int64
}

// mayVote reports whether this incarnation may grant or ask for votes: it
// was admitted, or the leader's record of it has just been applied here.
func (a *admission) mayVote() bool {
	if a.admitted.Load() {
		return true
	}
	if a.recorded != nil && a.recorded() == a.id {
		a.admit("a leader recorded this incarnation after it caught up")
		return true
	}
	return false
}

// admit marks this incarnation as a voter with a past, durably.
func (a *admission) admit(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.admitted.Load() {
		return
	}
	inc := incarnation{ID: a.id, Admitted: true, NodeID: a.nodeID}
	if err := writeIncarnation(a.dir, inc); err != nil {
		// Voting stays allowed in memory: the record is replicated, and on
		// restart the node reads it again from the node table.
		a.log.Warn("could not persist admission", "error", err)
	}
	a.admitted.Store(true)
	a.log.Info("this node may vote now", "incarnation", inc.ID, "reason", why)
}

// refusingVotes logs, at most once every voteReportEvery (the vote gate
// calls it on each refusal), that this node refuses to vote.
func (a *admission) refusingVotes() {
	now := time.Now().UnixNano()
	if last := a.lastRefusal.Load(); now-last < int64(voteReportEvery) || !a.lastRefusal.CompareAndSwap(last, now) {
		return
	}
	a.log.Warn("refusing to vote: this node's data directory is new (incarnation not yet admitted by a leader); it votes once a leader has given it the whole history",
		"incarnation", a.id)
}

// voteReportEvery rate-limits the "refusing votes" line.
const voteReportEvery = 10 * time.Second

// admitFromLog admits this incarnation if the local log already holds the
// leader's record of it. The leader appends that record only after the
// promotion committed, and a log that matches the leader's up to the record
// holds every entry committed before it. This covers a node killed after it
// received the record but before it applied and persisted it: after a whole
// cluster restart its state machine replays the entry only once a leader is
// elected, which may need its vote. Only an unadmitted node scans.
func (a *admission) admitFromLog(logs raft.LogStore, record []byte) error {
	if a.admitted.Load() {
		return nil
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return fmt.Errorf("read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand && bytes.Equal(l.Data, record) {
			a.admit(fmt.Sprintf("the log holds the leader's record of this incarnation (entry %d)", i))
			return nil
		}
	}
	return nil
}

// watchAdmission persists the admission as soon as the leader's record is
// applied, rather than at the next vote request; and while this node is a
// member that is not admitted, it asks the leader to admit it by joining
// again (through Join, with its HTTP address: the leader then asks it for its
// incarnation). That covers a node added without an HTTP address, and a
// leader elected before it finished a promotion its predecessor began.
func (n *Node) watchAdmission() {
	defer n.wg.Done()
	t := time.NewTicker(logstore.MarkEndEvery)
	defer t.Stop()
	// The first request a second after start: a node joining normally is
	// usually admitted by then without one.
	last := time.Now().Add(time.Second - JoinBackoffMax)
	for !n.adm.mayVote() {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		if n.cfg.HTTPAddr == "" || time.Since(last) < JoinBackoffMax {
			continue
		}
		if _, member := n.vit.membership(); !member {
			continue
		}
		if _, addr := n.leaderHTTP(); addr == "" {
			continue
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.ApplyTimeout)
		if err := n.Join(ctx, n.cfg.NodeID, string(n.trans.LocalAddr()), n.cfg.HTTPAddr); err != nil {
			n.log.Debug("ask the leader for admission", "error", err)
		}
		cancel()
	}
}
