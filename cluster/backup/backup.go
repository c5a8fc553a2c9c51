// Package backup owns limitd's backup files: taking one from a running node
// (Taker), verifying and describing one (ReadHeader, Inspect), and building a
// fresh data directory from one (Restore). It reads a node's Raft and state
// machine and changes neither; it knows nothing of forwarding or membership.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster/logstore"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// A backup is a consistent snapshot of the replicated state taken from a
// running node, in a file that restores a fresh data directory:
//
//	magic "LMTDBKP1" (8) ‖ header length uint32 ‖ header (JSON) ‖ SHA-256 of the header (32)
//	‖ state stream
//
// The header says what the state reflects (BackupHeader). The state stream is
// exactly what the state machine's Raft snapshots hold (persist: magic, size,
// the bbolt file, its SHA-256), so keys, policies, request ids, the node
// table and the applied index travel together and a damaged or truncated
// file is refused by the same checks Raft's own snapshots get.
var backupMagic = [8]byte{'L', 'M', 'T', 'D', 'B', 'K', 'P', '1'}

// Format is the version of the header.
const Format = 1

// maxBackupHeader bounds the header length so a damaged file cannot make a
// reader allocate without limit.
const maxBackupHeader = 1 << 20

// Header describes a backup.
type Header struct {
	Format int `json:"format"`
	// Index and Term are the Raft index the state reflects (its applied
	// index) and that entry's term.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// NodeID is the node that produced the snapshot; Members the Raft
	// configuration then.
	NodeID    string           `json:"node_id"`
	CreatedAt time.Time        `json:"created_at"`
	Members   []nodeapi.Member `json:"members"`
}

// Backup is a snapshot opened for streaming; Close releases it.
type Backup struct {
	Header Header
	rc     io.ReadCloser
}

// Taker takes backups of a running node: it reads the node's Raft and
// state machine and changes neither (beyond the log compaction any Raft
// snapshot does). Restoring is Restore, offline.
type Taker struct {
	Raft         *raft.Raft
	FSM          *fsm.FSM
	DataDir      string
	NodeID       string
	ApplyTimeout time.Duration
	Logger       hclog.Logger
	Ahead        Ahead // nil: this node never applies ahead of raft
}

// Ahead is a follower's applying ahead of raft (cluster's apply-ahead),
// which a backup pauses.
type Ahead interface {
	// Pause stops applying ahead until resume is called.
	Pause() (resume func())
	// Highest is the last index applied ahead of raft.
	Highest() uint64
}

// Open takes a snapshot of this node's state for a backup. On the
// leader it first waits until everything committed is applied (a barrier),
// so the backup holds every acknowledged decision. It uses Raft's own
// snapshot (raft.Snapshot, which also compacts the log as a scheduled
// snapshot would), or, when Raft has applied nothing since the node started,
// the latest stored one if it is not behind the state.
// Everything that can fail before the first byte fails here.
//
// A follower may have applied committed entries ahead of raft (Ahead), so
// that its state is past the index of the snapshot raft would take now; a
// backup's state must be at its header's index (Restore refuses one
// ahead of it), so on a follower applying ahead pauses and the snapshot
// waits for raft to catch up with the state.
func (b *Taker) Open(ctx context.Context) (*Backup, error) {
	timeout := b.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if b.Raft.State() == raft.Leader {
		if err := b.Raft.Barrier(timeout).Error(); err != nil {
			return nil, fmt.Errorf("backup: wait for applies: %w", err)
		}
	}
	if b.Ahead != nil {
		resume := b.Ahead.Pause()
		defer resume()
		if err := b.awaitRaftApplied(ctx, time.Now().Add(timeout)); err != nil {
			return nil, err
		}
	}
	var meta *raft.SnapshotMeta
	var rc io.ReadCloser
	f := b.Raft.Snapshot()
	err := f.Error()
	switch {
	case err == nil:
		meta, rc, err = f.Open()
		if err != nil {
			return nil, fmt.Errorf("backup: open snapshot: %w", err)
		}
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		// The latest stored snapshot is at the applied index already.
		snaps, serr := raft.NewFileSnapshotStoreWithLogger(b.DataDir, 2, b.Logger)
		if serr != nil {
			return nil, fmt.Errorf("backup: open snapshot store: %w", serr)
		}
		list, serr := snaps.List()
		if serr != nil || len(list) == 0 {
			return nil, fmt.Errorf("backup: no stored snapshot to read: %v", serr)
		}
		// Raft says "nothing new" only when it applied nothing since it
		// started; the state database may still be ahead of the stored
		// snapshot (a restarted node before its first entry). Never hand out
		// an older state than the node has acknowledged.
		if applied := b.FSM.AppliedIndex(); list[0].Index < applied {
			return nil, fmt.Errorf("backup: this node's latest snapshot (index %d) is behind its state (index %d) and it has applied nothing since it started: take the backup from the leader", list[0].Index, applied)
		}
		meta, rc, err = snaps.Open(list[0].ID)
		if err != nil {
			return nil, fmt.Errorf("backup: open snapshot %s: %w", list[0].ID, err)
		}
	default:
		return nil, fmt.Errorf("backup: take snapshot: %w", err)
	}
	h := Header{Format: Format, Index: meta.Index, Term: meta.Term, NodeID: b.NodeID,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	nodes := b.FSM.Nodes()
	for _, s := range meta.Configuration.Servers {
		h.Members = append(h.Members, nodeapi.Member{ID: string(s.ID), RaftAddr: string(s.Address),
			HTTPAddr: nodes[string(s.ID)], Suffrage: s.Suffrage.String()})
	}
	return &Backup{Header: h, rc: rc}, nil
}

// awaitRaftApplied waits until raft has handed the state machine every entry
// applied ahead of it (with applying ahead paused, raft's commit index soon
// reaches them), so the snapshot raft takes next is at or after the state.
func (b *Taker) awaitRaftApplied(ctx context.Context, deadline time.Time) error {
	for {
		state, applied := b.Ahead.Highest(), b.FSM.RaftApplied()
		if applied >= state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backup: this node applied entries up to index %d ahead of raft, which has applied up to %d and did not catch up in time: try again, or take the backup from the leader", state, applied)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("backup: wait for raft to apply up to the state: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// OpenBackup is Open for consumers that know only nodeapi (service.Backuper:
// the HTTP API's GET /v1/cluster/snapshot).
func (b *Taker) OpenBackup(ctx context.Context) (nodeapi.Backup, error) {
	bk, err := b.Open(ctx)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return bk, nil
}

// Point is the Raft index the backup's state reflects and that entry's term
// (nodeapi.Backup).
func (b *Backup) Point() (index, term uint64) { return b.Header.Index, b.Header.Term }

// WriteTo writes the backup file format to w.
func (b *Backup) WriteTo(w io.Writer) (int64, error) {
	hdr, err := json.Marshal(b.Header)
	if err != nil {
		return 0, fmt.Errorf("backup header: %w", err)
	}
	n, err := w.Write(frame(backupMagic, hdr))
	total := int64(n)
	if err != nil {
		return total, fmt.Errorf("write backup header: %w", err)
	}
	m, err := io.Copy(w, b.rc)
	total += m
	if err != nil {
		return total, fmt.Errorf("write backup state: %w", err)
	}
	return total, nil
}

// Close releases the snapshot.
func (b *Backup) Close() error { return b.rc.Close() }

// ReadHeader reads and verifies a backup's header; r is then at the
// state stream.
func ReadHeader(r io.Reader) (Header, error) {
	var h Header
	hdr, err := readFramed(r, backupMagic, "backup", "header")
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(hdr, &h); err != nil {
		return h, fmt.Errorf("damaged backup: header: %w", err)
	}
	if h.Format != Format {
		return h, fmt.Errorf("backup format %d is not supported (this limitd reads format %d)", h.Format, Format)
	}
	return h, nil
}

// frame is magic ‖ length uint32 ‖ body ‖ SHA-256 of the body (readFramed).
func frame(magic [8]byte, body []byte) []byte {
	sum := sha256.Sum256(body)
	b := make([]byte, 0, 12+len(body)+len(sum))
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	return append(b, sum[:]...)
}

// readFramed reads magic ‖ length uint32 ‖ body ‖ SHA-256 of the body, the
// framing of a backup's header and an archive's manifest (kind "backup" or
// "archive", part "header" or "manifest", for the errors), and returns the
// verified body.
func readFramed(r io.Reader, magic [8]byte, kind, part string) ([]byte, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, fmt.Errorf("not a limitd %s: %s", kind, shortRead(err, part))
	}
	if !bytes.Equal(pre[:8], magic[:]) {
		return nil, fmt.Errorf("not a limitd %s (bad magic %q)", kind, pre[:8])
	}
	size := binary.BigEndian.Uint32(pre[8:])
	if size == 0 || size > maxBackupHeader {
		return nil, fmt.Errorf("damaged %s: %s length %d out of range", kind, part, size)
	}
	buf := make([]byte, int(size)+sha256.Size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("damaged %s: %s", kind, shortRead(err, part))
	}
	body, sum := buf[:size], buf[size:]
	if want := sha256.Sum256(body); !bytes.Equal(sum, want[:]) {
		return nil, fmt.Errorf("damaged %s: %s checksum mismatch", kind, part)
	}
	return body, nil
}

func shortRead(err error, what string) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "truncated " + what
	}
	return err.Error()
}

// Summary is what a verified backup holds.
type Summary struct {
	Header
	Keys       int64             `json:"keys"`
	RequestIDs int64             `json:"request_ids"`
	Policies   []fsm.Policy      `json:"-"`
	Nodes      map[string]string `json:"nodes"` // node id → HTTP address, as replicated
	// Digest is GET /v1/cluster/digest of the state: equal to the source's at Index.
	// It covers the keys, request ids, policies, domains, Nodes and the clock.
	Digest string `json:"digest"`
	// StateIndex is the state machine's applied index, which the digest
	// endpoint reports with it: at most Index, which also counts Raft's own
	// entries (no-ops, configuration) that change no state.
	StateIndex uint64 `json:"state_index"`
	Size       int64  `json:"size_bytes"`
}

// Inspect verifies a backup completely (header checksum, state length
// and checksum, bbolt consistency, schema, applied index = header index) by
// restoring it into a scratch state machine under scratchDir, and reports
// what it holds.
func Inspect(r io.Reader, scratchDir string) (Summary, error) {
	dir, err := os.MkdirTemp(scratchDir, "limitd-inspect-")
	if err != nil {
		return Summary{}, fmt.Errorf("inspect: %w", err)
	}
	defer os.RemoveAll(dir)
	cr := &countReader{r: r}
	h, err := ReadHeader(cr)
	if err != nil {
		return Summary{}, err
	}
	f, err := restoreState(filepath.Join(dir, "fsm.db"), h, cr)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	s := Summary{Header: h, Policies: f.Policies(), Nodes: f.Nodes(), Size: cr.n}
	st := f.Stats()
	s.Keys, s.RequestIDs = st.Keys, st.RequestIDs
	if s.Digest, s.StateIndex, err = f.DigestAt(); err != nil {
		return s, fmt.Errorf("inspect: digest: %w", err)
	}
	return s, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// restoreState restores the state stream into a new state machine at path
// and checks it reflects the header's index. The caller closes it.
func restoreState(path string, h Header, r io.Reader) (*fsm.FSM, error) {
	f, err := fsm.Open(path, fsm.Options{})
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	if err := f.Restore(io.NopCloser(r)); err != nil {
		f.Close()
		return nil, fmt.Errorf("damaged backup: %w", err)
	}
	// The state machine's own index may trail the snapshot's: Raft does not
	// pass no-op and barrier entries to it. It can never be ahead.
	if got := f.AppliedIndex(); got > h.Index {
		f.Close()
		return nil, fmt.Errorf("damaged backup: the state is at index %d, after the header's %d", got, h.Index)
	}
	return f, nil
}

// RestoreConfig says who the restored node is.
type RestoreConfig struct {
	DataDir  string // must not exist or be empty
	NodeID   string // default: RaftAddr; start the node with the same --node-id
	RaftAddr string // the node's Raft address, as it will be advertised
	LogStore string // "wal" (default) or "boltdb"
}

// Restore builds a fresh data directory from a backup, as `etcdutl
// snapshot restore` does: the state database at the backup's index, a Raft
// snapshot at that index whose configuration is this node alone, and the
// Raft term. The node started on it (`limitd serve` with the same node id
// and Raft address, without --join) elects itself and serves the restored
// state; other nodes then join it. Nothing is left behind on error.
func Restore(cfg RestoreConfig, r io.Reader) (h Header, err error) {
	if cfg.RaftAddr == "" {
		return h, errors.New("restore: the node's Raft address is required")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.RaftAddr
	}
	if entries, err := os.ReadDir(cfg.DataDir); err == nil && len(entries) > 0 {
		return h, fmt.Errorf("restore: data dir %s is not empty: restore into a new directory", cfg.DataDir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return h, fmt.Errorf("restore: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return h, fmt.Errorf("restore: create %s: %w", cfg.DataDir, err)
	}
	defer func() {
		if err != nil {
			cleanDir(cfg.DataDir)
		}
	}()
	if h, err = ReadHeader(r); err != nil {
		return h, err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "restore", Level: hclog.Warn, Output: io.Discard})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, logger)
	if err != nil {
		return h, fmt.Errorf("restore: snapshot store: %w", err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.RaftAddr), Suffrage: raft.Voter}}}
	// The store encodes the legacy peer list through a transport; an
	// in-memory one encodes addresses as the TCP transport does.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, h.Index, h.Term, conf, h.Index, trans)
	if err != nil {
		return h, fmt.Errorf("restore: create raft snapshot: %w", err)
	}
	if _, err := io.Copy(sink, r); err != nil {
		_ = sink.Cancel()
		return h, fmt.Errorf("restore: write raft snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return h, fmt.Errorf("restore: write raft snapshot: %w", err)
	}
	// Verify the stream (checksums, bbolt, schema, index) while building
	// the state database from the snapshot just written.
	_, rc, err := snaps.Open(sink.ID())
	if err != nil {
		return h, fmt.Errorf("restore: reopen raft snapshot: %w", err)
	}
	f, err := restoreState(filepath.Join(cfg.DataDir, "fsm.db"), h, rc)
	rc.Close()
	if err != nil {
		return h, err
	}
	if err := f.Close(); err != nil {
		return h, fmt.Errorf("restore: close state database: %w", err)
	}
	logs, _, err := logstore.Open(cfg.DataDir, cfg.LogStore, logger)
	if err != nil {
		return h, fmt.Errorf("restore: %w", err)
	}
	// Raft terms never go back: the node continues from the backup's term.
	if err := logs.SetUint64([]byte("CurrentTerm"), h.Term); err != nil {
		logs.Close()
		return h, fmt.Errorf("restore: set term: %w", err)
	}
	if err := logs.Close(); err != nil {
		return h, fmt.Errorf("restore: close raft log: %w", err)
	}
	return h, nil
}

// cleanDir empties a directory Restore created or found empty.
func cleanDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
