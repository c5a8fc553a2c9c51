package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/hashslot"
)

// DefaultTransferEvery bounds leadership transfers: at most one per data
// group per interval from a node, so that two nodes disagreeing about the
// preferred leader (a membership change seen at different times) cannot
// bounce a group's leadership faster than that.
const DefaultTransferEvery = 30 * time.Second

// Config is a Host's.
type Config struct {
	// DataGroups is the number of data groups this node was started with
	// (at least 1) and Flag its --data-groups spelling ("auto" or the
	// number), compared with the cluster's record.
	DataGroups int
	Flag       string
	// Base is group 0's configuration; RaftMux is required (every group
	// shares the port). Data group g runs a copy with Group = g.
	Base cluster.Config
	// Bootstrap: a fresh group 0 bootstraps a one-node cluster (no --join).
	Bootstrap bool
	// TransferEvery bounds leadership transfers per group (default
	// DefaultTransferEvery); Tick is how often the Host reconciles
	// (default 500 ms).
	TransferEvery time.Duration
	Tick          time.Duration
	// DeadAfter is how long group 0's leader goes without hearing from a
	// node before placement replaces its replicas (default DefaultDeadAfter);
	// MoveEvery the least time between two membership changes of one data
	// group, and MovesPerTick the most changes cluster-wide per Tick
	// (defaults DefaultMoveEvery, DefaultMovesPerTick): a join or a loss
	// converges a few groups at a time.
	DeadAfter    time.Duration
	MoveEvery    time.Duration
	MovesPerTick int
	Logger       *slog.Logger
}

// Host is a node's group registry: group 0 and the data groups.
type Host struct {
	cfg  Config
	zero *cluster.Node
	// data are the data groups once the record is known (nil before):
	// data.nodes[g-1] is group g.
	data atomic.Pointer[dataGroups]
	log  *slog.Logger

	failed   chan struct{}
	failOnce sync.Once
	failErr  error

	closing chan struct{}
	wg      sync.WaitGroup
	// lastTransfer is when this node last moved each group's leadership.
	lastTransfer map[uint32]time.Time
	transfers    atomic.Uint64

	// opened are the functions to call with the data groups once open
	// (onOpen), under openMu.
	openMu sync.Mutex
	opened []func([]*cluster.Node)
	bal    balancer // balance.go, the loop's own
	// hints[g-1] is data group g's leader as group 0 records it (LeaderHint).
	hints  []atomic.Pointer[hint]
	states []atomic.Pointer[parsedState]
}

type dataGroups struct {
	rec   record
	nodes []*cluster.Node
}

// Open opens group 0 and starts the Host's loop, which opens the data
// groups once group 0 knows (or, on its first leader, decides) the groups
// record. A data directory holding a one-group cluster's state is refused:
// --data-groups is a bootstrap-time decision, never a silent switch.
func Open(cfg Config) (*Host, error) {
	if cfg.DataGroups < 1 {
		return nil, fmt.Errorf("groups: %d data groups: want at least 1", cfg.DataGroups)
	}
	if cfg.Base.RaftMux == nil {
		return nil, errors.New("groups: the data groups share the node's Raft port: Config.Base.RaftMux is required")
	}
	if cfg.TransferEvery <= 0 {
		cfg.TransferEvery = DefaultTransferEvery
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	if cfg.MoveEvery <= 0 {
		cfg.MoveEvery = DefaultMoveEvery
	}
	if cfg.MovesPerTick <= 0 {
		cfg.MovesPerTick = DefaultMovesPerTick
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := CheckDataDir(cfg.Base.DataDir, true); err != nil {
		return nil, err
	}
	zero, err := cluster.Open(cfg.Base, cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, zero: zero, log: cfg.Logger.With("component", "groups"),
		failed: make(chan struct{}), closing: make(chan struct{}), lastTransfer: map[uint32]time.Time{}}
	h.wg.Add(1)
	go h.run()
	return h, nil
}

// CheckDataDir refuses a data directory whose groups do not match the
// mode: with data groups (multi), a directory holding a one-group node's
// state (its fsm.db, no groups/); without, one holding data groups.
func CheckDataDir(dir string, multi bool) error {
	_, gerr := os.Stat(filepath.Join(dir, "groups"))
	hasGroups := gerr == nil
	_, serr := os.Stat(filepath.Join(dir, "fsm.db")) // every node's state since the first build
	hasState := serr == nil
	switch {
	case multi && hasState && !hasGroups:
		return fmt.Errorf("--data-groups: data directory %s holds a one-group cluster's state: the number of data groups is chosen at bootstrap, for a new cluster (start this node without --data-groups, or with an empty data directory to join a multi-group cluster)", dir)
	case !multi && hasGroups:
		return fmt.Errorf("data directory %s holds data groups (groups/): this node was started with --data-groups; start it with the cluster's --data-groups", dir)
	}
	return nil
}

// Zero is group 0's node (membership, status, the cluster-wide
// configuration, backups).
func (h *Host) Zero() *cluster.Node { return h.zero }

// Data is data group g's node (1 ≤ g ≤ G), nil before the data groups are open.
func (h *Host) Data(g uint32) *cluster.Node {
	d := h.data.Load()
	if d == nil || g == 0 || int(g) > len(d.nodes) {
		return nil
	}
	return d.nodes[g-1]
}

// SlotMap is the slot map, nil before the data groups are open.
func (h *Host) SlotMap() *hashslot.Map {
	if d := h.data.Load(); d != nil {
		return d.rec.slots
	}
	return nil
}

// onOpen calls f with the data groups once they are open (now, when they are).
func (h *Host) onOpen(f func([]*cluster.Node)) {
	h.openMu.Lock()
	d := h.data.Load()
	if d == nil {
		h.opened = append(h.opened, f)
	}
	h.openMu.Unlock()
	if d != nil {
		f(d.nodes)
	}
}

// setData makes the data groups open and tells onOpen's functions.
func (h *Host) setData(d *dataGroups) {
	h.openMu.Lock()
	h.data.Store(d)
	fs := h.opened
	h.opened = nil
	h.openMu.Unlock()
	for _, f := range fs {
		f(d.nodes)
	}
}

// Failed is closed when the Host cannot serve (Err says why): the
// cluster's groups record does not match this node's --data-groups, or a
// data group could not be opened.
func (h *Host) Failed() <-chan struct{} { return h.failed }

// Err is why Failed closed.
func (h *Host) Err() error {
	select {
	case <-h.failed:
		return h.failErr
	default:
		return nil
	}
}

func (h *Host) fail(err error) {
	h.failOnce.Do(func() {
		h.failErr = err
		h.log.Error("the node's groups cannot serve", "err", err)
		close(h.failed)
	})
}

// Transfers counts the leadership transfers this node started.
func (h *Host) Transfers() uint64 { return h.transfers.Load() }

// Close stops the loop and closes the data groups, then group 0, then
// the shared Raft port.
func (h *Host) Close() error {
	close(h.closing)
	h.wg.Wait()
	var errs []error
	if d := h.data.Load(); d != nil {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, n := range d.nodes {
			wg.Add(1)
			go func(n *cluster.Node) {
				defer wg.Done()
				if err := n.Close(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}(n)
		}
		wg.Wait()
	}
	errs = append(errs, h.zero.Close())
	// The Host was given the port for its groups; the last group is closed.
	errs = append(errs, h.cfg.Base.RaftMux.Close())
	return errors.Join(errs...)
}

// run decides or learns the groups record, opens the data groups, then
// reconciles their membership and leaders every Tick.
func (h *Host) run() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-h.closing:
			return
		case <-h.failed:
			return
		case <-t.C:
		}
		if h.data.Load() == nil {
			if err := h.openData(); err != nil {
				h.fail(err)
				return
			}
			continue
		}
		h.reconcile()
	}
}

// openData opens the data groups once the record is known. Group 0's
// first leader (caught up, no record yet) bootstraps every data group on
// itself first and records the groups after, so that a record always
// names groups that exist; the others wait to be joined.
func (h *Host) openData() error {
	cat := h.zero.Catalog()
	v, ok := cat.GroupsRecord()
	if !ok {
		if !h.zero.IsLeader() || h.zero.Ready() != nil {
			return nil // wait for the record or for leadership
		}
		rec, err := newRecord(h.cfg.DataGroups, h.cfg.Flag)
		if err != nil {
			return err
		}
		nodes, err := h.openGroups(rec.groups, true)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = ownSlots(ctx, nodes, rec.slots)
		if err == nil {
			err = cat.PutGroupsRecord(ctx, rec.String())
		}
		cancel()
		if err != nil {
			h.log.Warn("giving the data groups their hash slots or recording them in group 0 failed; retrying", "err", err)
			closeAll(nodes)
			return nil
		}
		h.log.Info("bootstrapped the data groups", "groups", rec.groups, "flag", rec.flag)
		h.setData(&dataGroups{rec: rec, nodes: nodes})
		return nil
	}
	rec, err := parseRecord(v)
	if err != nil {
		return err
	}
	if why := rec.mismatch(h.cfg.DataGroups, h.cfg.Flag); why != "" {
		return fmt.Errorf("refusing to serve: %s; every node of a cluster is started with the same --data-groups", why)
	}
	nodes, err := h.openGroups(rec.groups, false)
	if err != nil {
		return err
	}
	h.setData(&dataGroups{rec: rec, nodes: nodes})
	return nil
}

// ownSlots gives each new data group its hash slot table from the map, before
// the groups record lets any check reach it: from then on a check routed by a
// stale map is refused there (wrong_group), never decided by a group that
// does not own its key. A retry after a failure proposes the same tables
// (accepted as no-ops).
func ownSlots(ctx context.Context, nodes []*cluster.Node, m *hashslot.Map) error {
	for i, n := range nodes {
		g := uint32(i + 1)
		if err := n.WaitLeader(ctx); err != nil {
			return fmt.Errorf("data group %d: %w", g, err)
		}
		var slots []uint16
		for s := 0; s < hashslot.Count; s++ {
			if m.Group(hashslot.Slot(s)) == g {
				slots = append(slots, uint16(s))
			}
		}
		if err := n.Catalog().OwnHashSlots(ctx, slots); err != nil {
			return fmt.Errorf("data group %d: its hash slots: %w", g, err)
		}
	}
	return nil
}

func (h *Host) openGroups(n int, bootstrap bool) ([]*cluster.Node, error) {
	nodes := make([]*cluster.Node, 0, n)
	h.hints = make([]atomic.Pointer[hint], n)
	h.states = make([]atomic.Pointer[parsedState], n)
	for g := 1; g <= n; g++ {
		cfg := h.cfg.Base
		cfg.Group = uint32(g)
		// A node holding no replica of g forwards to g's leader as group 0
		// records it (placement.go: three replicas per group).
		cfg.LeaderHint = h.leaderHint(uint32(g))
		if cfg.Logger != nil {
			cfg.Logger = cfg.Logger.With("group", g)
		}
		node, err := cluster.Open(cfg, bootstrap)
		if err != nil {
			closeAll(nodes)
			return nil, fmt.Errorf("open data group %d: %w", g, err)
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

func closeAll(nodes []*cluster.Node) {
	for _, n := range nodes {
		n.Close()
	}
}

// groupName is g as X-Limitd-Group spells it.
func groupName(g uint32) string { return strconv.FormatUint(uint64(g), 10) }

// Internal serves the node-to-node endpoints of every group on the one
// HTTP port: a request naming a data group (X-Limitd-Group, as forwarded
// checks, joins and the admission's questions send it) goes to that
// group's node, everything else to group 0's, which refuses and counts a
// forwarded check of a group it is not (limitd_forward_wrong_group_total).
func (h *Host) Internal() http.Handler {
	zero := h.zero.Internal()
	var once sync.Once
	var handlers []http.Handler
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("X-Limitd-Group")
		if v == "" {
			zero.ServeHTTP(w, r)
			return
		}
		d := h.data.Load()
		if d == nil {
			// Not group 0's to answer: the admission's question about a
			// joiner's incarnation (admit.go) must be its data group's, or
			// the leader records group 0's incarnation for it and the
			// group never lets it vote. The asker retries.
			http.Error(w, "this node's data groups are not open yet", http.StatusServiceUnavailable)
			return
		}
		{
			once.Do(func() {
				for _, n := range d.nodes {
					handlers = append(handlers, n.Internal())
				}
			})
			if g, err := strconv.ParseUint(v, 10, 32); err == nil && g >= 1 && int(g) <= len(handlers) && groupName(uint32(g)) == v {
				handlers[g-1].ServeHTTP(w, r)
				return
			}
		}
		zero.ServeHTTP(w, r)
	})
}
