// Package cluster owns the Raft wiring of a limitd node: the transport, the
// log, stable and snapshot stores, bootstrap and join, leadership changes, the
// leader-side group-commit batcher that packs many client checks into one log
// entry, and forwarding of checks and admin commands from followers to the
// leader. It is the only package that talks to hashicorp/raft directly.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster/forward"
	"github.com/limitd/limitd/cluster/logstore"
	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/nodeapi"
)

// Config configures a Node. Zero values take the defaults noted.
type Config struct {
	NodeID   string // default: RaftAddr
	RaftAddr string // address other nodes reach this node's Raft transport at
	RaftBind string // address the Raft transport listens on (default: RaftAddr)
	HTTPAddr string // address other nodes use to reach this node's HTTP API
	DataDir  string

	// HTTPScheme is "http" or "https" for node-to-node forwarding (default "http").
	HTTPScheme string
	// HTTPClient is used for forwarding and joining (default: a tuned client).
	HTTPClient *http.Client
	// AdminToken, when set, authenticates node-to-node requests.
	AdminToken string
	// TLS, when set (see LoadTLS), secures node-to-node traffic with mutual
	// TLS: the Raft transport runs over it and accepts only peers presenting
	// a certificate signed by its ClientCAs, and the internal HTTP endpoints
	// require such a client certificate. HTTPClient should present the same
	// certificate. It does not apply to a Transport passed in.
	TLS *tls.Config

	// Group commit: at most BatchMaxOps ops per log entry (default 2048, at
	// most MaxEntryOps) and MaxEntryBytes of encoded ops,
	// at most BatchInflight entries in flight at once (default 2); a flusher
	// may linger up to BatchMaxWait for more ops when its batch is not full
	// (default 0: natural batching — the next batch is whatever arrived while
	// the previous ones were committing).
	BatchMaxOps   int
	BatchInflight int
	BatchMaxWait  time.Duration

	// State machine commits: up to FSMCommitEvery applied batches share one
	// bbolt commit (default 1000), and a timer commits whatever is pending
	// every FSMFlushInterval (default 100 ms). 1 commits every batch.
	FSMCommitEvery   int
	FSMFlushInterval time.Duration
	// FSMCacheKeys bounds the state machine's in-memory state cache (0:
	// persist.DefaultCacheKeys).
	FSMCacheKeys int
	// OverLimitEntries bounds the over-limit cache (overlimit.go); 0 turns
	// it off (limitd serve defaults to overlimit.DefaultMaxEntries).
	OverLimitEntries int

	// RequestIDRetention is how long a request_id's result is remembered
	// (default 10 minutes, at most MaxRequestIDRetention). It travels in every check entry, so replicas agree.
	RequestIDRetention time.Duration
	// CheckBounds, when set, is asked by the leader for the bounds it
	// stamps in every check entry (key and request-id budgets, the
	// free-disk guard: fsm.Bounds), so that every replica refuses the same
	// new keys. nil: no bounds.
	CheckBounds func() fsm.Bounds

	// FaultClockOffset is added to this node's wall clock wherever leader
	// time is read (clock.go): fault injection for tests, never production.
	FaultClockOffset time.Duration

	// A leader whose Raft log writes' p99 over DiskStallWindow (default 2 s)
	// stays above DiskStallTransfer for a window hands leadership away; a
	// node whose p99 stays above it for DiskStallFail stops serving
	// (diskwatch.go). 0: off.
	DiskStallTransfer time.Duration
	DiskStallWindow   time.Duration
	DiskStallFail     time.Duration
	// ApplyTimeout bounds one proposal (default 5 s).
	ApplyTimeout time.Duration
	// ExpireInterval: how often the leader proposes an expiry sweep when
	// something is due (default 1 s); ExpireMax bounds one sweep (default 10,000).
	ExpireInterval time.Duration
	ExpireMax      int

	// Raft timing (limitd serve: --raft-heartbeat-timeout, --raft-election-timeout,
	// --raft-lease-timeout).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64

	// LogStore selects the Raft log and stable store: "wal" (default,
	// hashicorp/raft-wal: segment files, one fsync per append) or "boltdb"
	// (hashicorp/raft-boltdb: one bbolt file, two fsyncs per append). A data
	// directory keeps the store it was created with.
	LogStore string

	// ShutdownTimeout bounds Raft's shutdown in Close (default
	// DefaultShutdownTimeout): past it the transport is closed under Raft,
	// and past twice it Close gives up on Raft and closes the stores.
	ShutdownTimeout time.Duration

	// NoPipeline turns off Raft's AppendEntries pipelining: one request in
	// flight per follower (see DESIGN.md, bounded shutdown).
	NoPipeline bool

	// NoApplyAhead turns off answers from a follower's own log: a follower
	// then waits for the leader's answer to every check it forwards, as a
	// cluster of more than three voters always does (ahead.go, DESIGN.md).
	NoApplyAhead bool

	// Transport overrides the TCP transport (in-process tests use raft.InmemTransport).
	Transport raft.Transport

	// Group is the Raft group this node runs (default 0, today's only
	// group). A process hosts several groups as one Node each over one
	// shared Raft port, RaftMux: group g > 0 keeps its state in
	// DataDir/groups/<g>/ (group 0 stays the data dir's root, byte for byte
	// as before) and needs RaftMux. See DESIGN.md, "One Raft port, several groups".
	Group uint32
	// RaftMux, when set, is the node's shared Raft port (raftnet.ListenMux):
	// the node opens its group on it instead of a listener of its own, and
	// closing the node leaves the port to its other groups (the caller
	// closes it). RaftAddr defaults to its address. The port's TLS is the
	// one it was opened with (raftnet.Config.TLS), not this Config's.
	RaftMux *raftnet.Mux
	// LeaderHint, when set, names this group's leader (id and HTTP
	// address) whenever this node's Raft knows none: a node that does not
	// hold a replica of a data group (package groups places three per
	// group) forwards the group's checks and commands to the leader group 0
	// records. A stale hint costs a not_leader answer and a retry with a
	// fresh hint until the request's deadline. With a hint, leaving the
	// configuration is not the end of this node's service (Removed never
	// closes): placement adds and drops replicas as nodes come and go.
	LeaderHint func() (id, httpAddr string)

	// wrapLogStore lets tests inject storage faults into the Raft log store.
	wrapLogStore func(logstore.Store) logstore.Store
	// wrapSnapshots lets tests slow or watch the Raft snapshot store (catchup.go).
	wrapSnapshots func(raft.SnapshotStore) raft.SnapshotStore

	// Logger receives the node's log, Raft's included (hashicorp/raft's hclog
	// output is routed into it, with events of normal operation lowered to
	// Info or Debug). Nil: a text logger on LogOutput at LogLevel.
	Logger    *slog.Logger
	LogOutput io.Writer // without Logger: default os.Stderr
	LogLevel  string    // without Logger: debug, info, warn (default) or error
}

// Log store kinds (Config.LogStore).
const (
	LogStoreWAL    = logstore.WAL
	LogStoreBoltDB = logstore.BoltDB
)

// Defaults of Config, the single source for limitd serve's flag defaults too
// (DefaultBatchMaxOps is with the entry bounds in limits.go).
const (
	DefaultBatchInflight      = 2
	DefaultFSMCommitEvery     = 1000
	DefaultFSMFlushInterval   = 100 * time.Millisecond
	DefaultRequestIDRetention = 10 * time.Minute
	DefaultApplyTimeout       = nodeapi.DefaultApplyTimeout
	DefaultExpireInterval     = time.Second
	DefaultExpireMax          = 10000
	// Raft timers: hashicorp/raft's own defaults, measured to hold on a busy
	// 2-core host where 500/500/250 ms did not (cluster/DESIGN.md).
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 10 * time.Millisecond
	DefaultSnapshotThreshold  = 4096
	DefaultSnapshotInterval   = 30 * time.Second
	DefaultTrailingLogs       = 2048
	// DefaultShutdownTimeout bounds Close's wait for Raft; limitd serve's
	// whole SIGTERM path is bounded by its --shutdown-timeout (default 10 s).
	DefaultShutdownTimeout = 3 * time.Second
)

func (c *Config) setDefaults() {
	if c.RaftAddr == "" && c.RaftMux != nil {
		c.RaftAddr = c.RaftMux.Addr().String()
	}
	if c.NodeID == "" {
		c.NodeID = c.RaftAddr
	}
	if c.RaftBind == "" {
		c.RaftBind = c.RaftAddr
	}
	if c.HTTPScheme == "" {
		c.HTTPScheme = "http"
	}
	if c.BatchMaxOps <= 0 {
		c.BatchMaxOps = DefaultBatchMaxOps
	}
	if c.BatchMaxOps > MaxEntryOps {
		c.BatchMaxOps = MaxEntryOps
	}
	if c.BatchInflight <= 0 {
		c.BatchInflight = DefaultBatchInflight
	}
	if c.FSMCommitEvery <= 0 {
		c.FSMCommitEvery = DefaultFSMCommitEvery
	}
	if c.FSMFlushInterval <= 0 {
		c.FSMFlushInterval = DefaultFSMFlushInterval
	}
	if c.RequestIDRetention <= 0 {
		c.RequestIDRetention = DefaultRequestIDRetention
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	if c.ExpireInterval <= 0 {
		c.ExpireInterval = DefaultExpireInterval
	}
	if c.ExpireMax <= 0 {
		c.ExpireMax = DefaultExpireMax
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.ElectionTimeout <= 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLeaseTimeout <= 0 {
		c.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = DefaultCommitTimeout
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval <= 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		if c.LogOutput == nil {
			c.LogOutput = os.Stderr
		}
		level := slog.LevelWarn
		if c.LogLevel != "" {
			level.UnmarshalText([]byte(c.LogLevel)) // an unknown name keeps warn
		}
		c.Logger = slog.New(slog.NewTextHandler(c.LogOutput, &slog.HandlerOptions{Level: level}))
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil,
				DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        256,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     90 * time.Second,
				DisableCompression:  true,
			},
		}
	}
}

// Node is one limitd server: Raft, the state machine and the proposal paths
// (checks, admin commands, leases), membership and its own lifecycle. The
// cluster-wide configuration is its Catalog, the over-limit cache its
// OverLimit; bootstrap, admission, the disk watch and its vitals are types
// of their own (cluster/DESIGN.md, "What Node keeps").
type Node struct {
	cfg    Config
	fsm    *fsm.FSM
	raft   *raft.Raft
	logs   logstore.Store
	trans  raft.Transport
	logger hclog.Logger // Raft's, into log
	log    *slog.Logger // the node's own events

	// propose is raft.ApplyLog for check entries (ext: Extensions); tests replace it to inject
	// failures after a proposal (set before the first Check).
	propose       func(cmd, ext []byte, timeout time.Duration) raft.ApplyFuture
	leaderBatch   *batcher // on the leader: ops → one CmdCheck entry
	forwardBatch  *batcher // on a follower, the check stream's overflow path: ops → one forwarded HTTP request
	fwd           *forward.Forwarder
	fwdSrv        *forward.Server
	peers         peerClient  // asks other nodes (peers.go)
	clock         leaderClock // the leader time of new entries
	leaseHook     leaseHook   // lease.go
	metrics       *metrics
	vit           vitals // whether it can serve at all
	closing       chan struct{}
	wg            sync.WaitGroup
	forwardTarget func() (id, httpAddr string)
	closeOnce     sync.Once
	closeErr      error
	recoveredFrom bool
	disc          discovery  // bootstrap and join (bootstrap.go)
	ol            *OverLimit // over-limit cache (overlimit.go)
	catalog       *Catalog   // cluster-wide configuration (catalog.go)

	// Incarnation and votes (vote.go, admit.go).
	adm      *admission
	promo    *promotions // the leader's side of admission (admit.go)
	gate     *raftnet.VoteGate
	guarded  *logstore.Guarded
	ahead    *ahead    // nil with NoApplyAhead
	openedAt time.Time // quorum.go: the fast-fail clock before any leader contact

	disk *diskWatch // diskwatch.go

	catch catchup // catchup.go: Ready after a start waits for installs and the leader's progress
}

// Open starts a node: opens (or recovers) the state machine, the Raft stores
// and transport, and bootstraps a single-node cluster when there is no
// existing state and bootstrap is true (no --join).
func Open(cfg Config, bootstrap bool) (*Node, error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("cluster: data dir is required")
	}
	if cfg.RequestIDRetention > MaxRequestIDRetention {
		return nil, fmt.Errorf("cluster: request ID retention %v is over the maximum of %v", cfg.RequestIDRetention, MaxRequestIDRetention)
	}
	if cfg.Group != 0 {
		if cfg.RaftMux == nil && cfg.Transport == nil {
			return nil, fmt.Errorf("cluster: group %d needs the node's shared Raft port (Config.RaftMux)", cfg.Group)
		}
		cfg.DataDir = GroupDataDir(cfg.DataDir, cfg.Group) // mux.go
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	n := &Node{cfg: cfg, closing: make(chan struct{}), openedAt: time.Now()}
	n.clock.offset.Store(int64(cfg.FaultClockOffset))
	n.logger = newHCLog(cfg.Logger, "raft")
	n.log = cfg.Logger.With("component", "cluster")
	n.metrics = newMetrics(n)
	n.ol = newOverLimit(cfg.OverLimitEntries)
	// forwardTarget is where a request this node does not lead goes:
	// Raft's leader, else the LeaderHint's (a node holding no replica of
	// its group).
	n.forwardTarget = func() (string, string) {
		id, addr := n.leaderHTTP()
		if addr == "" && cfg.LeaderHint != nil {
			return cfg.LeaderHint()
		}
		return id, addr
	}
	n.vit = vitals{halted: make(chan struct{}), removed: make(chan struct{}), self: raft.ServerID(cfg.NodeID), log: n.log, ol: n.ol,
		placed: cfg.LeaderHint != nil}

	// The incarnation is created before any Raft state (vote.go).
	inc, created, err := loadIncarnation(cfg.DataDir)
	if err == nil {
		inc, err = claimDataDir(cfg.DataDir, cfg.NodeID, inc)
	}
	if err != nil {
		return nil, err
	}
	n.adm = &admission{dir: cfg.DataDir, nodeID: cfg.NodeID, id: inc.ID, log: n.log,
		recorded: func() string { return n.fsm.Nodes()[incarnationKey(cfg.NodeID)] }}
	n.adm.admitted.Store(inc.Admitted)
	if created && inc.Admitted {
		n.log.Info("data directory restored from a backup: it keeps its vote", "incarnation", inc.ID)
	}

	f, err := fsm.Open(filepath.Join(cfg.DataDir, "fsm.db"), fsm.Options{
		NoSync: true, OnFatal: n.vit.onFatal, CommitEvery: cfg.FSMCommitEvery, CacheKeys: cfg.FSMCacheKeys,
		OverLimit: n.ol.cache, Leases: &n.leaseHook, // lease.go
		// It says why a file was set aside, or why applying stopped.
		Logger: slog.NewLogLogger(cfg.Logger.With("component", "fsm").Handler(), slog.LevelWarn),
	})
	if err != nil {
		return nil, err
	}
	n.fsm = f
	n.clock.applied = f.LastTime
	n.ol.fsm, n.ol.clock = f, &n.clock
	n.catalog = &Catalog{fsm: f, propose: n.Apply, ol: n.ol, clock: &n.clock, leaderApply: func(ctx context.Context, cmd []byte) (interface{}, error) {
		// Only on the leader: a record no client may propose (groupsrecord.go).
		if !n.IsLeader() {
			return nil, raft.ErrNotLeader
		}
		return n.await(ctx, n.raft.Apply(cmd, n.cfg.ApplyTimeout))
	}, putRecord: putClusterRecord(n)}
	n.recoveredFrom = f.Recovered()

	if err := n.openRaft(bootstrap); err != nil {
		f.Close()
		return nil, err
	}
	n.propose = func(cmd, ext []byte, timeout time.Duration) raft.ApplyFuture {
		return n.raft.ApplyLog(raft.Log{Data: cmd, Extensions: ext}, timeout)
	}
	n.leaderBatch = newBatcher(cfg.BatchMaxOps, cfg.BatchInflight, cfg.BatchMaxWait, n.proposeChecks, n.metrics.observeBatch)
	n.fwd = forward.New(forward.Config{
		Self: cfg.NodeID, Leader: n.forwardTarget, Client: cfg.HTTPClient, Scheme: cfg.HTTPScheme,
		Token: cfg.AdminToken, Timeout: cfg.ApplyTimeout, MaxOps: cfg.BatchMaxOps, Log: n.log, Closing: n.closing,
		Overflow: func(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) { return n.forwardBatch.do(ctx, ops) },
		Failed:   n.metrics.forwardFailed,
		Waited:   func(d time.Duration) { n.metrics.stageWait.Observe(d.Seconds()) },
		Sent:     func(d time.Duration) { n.metrics.stageFwd.Observe(d.Seconds()) },
		Framed:   n.metrics.observeForward,
		Group:    cfg.Group, // forward/group.go
	})
	n.peers = peerClient{client: cfg.HTTPClient, scheme: cfg.HTTPScheme, token: cfg.AdminToken, timeout: cfg.ApplyTimeout, closing: n.closing, group: cfg.Group}
	n.promo = &promotions{self: cfg.NodeID, applyTimeout: cfg.ApplyTimeout, raft: n.raft, fsm: n.fsm, peers: &n.peers,
		await: n.await, leading: n.IsLeader, log: n.log, closing: n.closing, wg: &n.wg}
	n.disc = discovery{self: cfg.NodeID, httpAddr: cfg.HTTPAddr, hadState: n.disc.hadState, // set by openRaft
		raft: n.raft, trans: n.trans, fsm: n.fsm, adm: n.adm, promo: n.promo, peers: &n.peers, log: n.log, closing: n.closing,
		member: func() bool { _, member := n.vit.membership(); return member }}
	n.fwdSrv = forward.NewServer(forward.ServerConfig{TLS: cfg.TLS != nil, Token: cfg.AdminToken, Timeout: cfg.ApplyTimeout,
		Log: n.log, Closing: n.closing, MaxCommandBytes: MaxCommandBytes, Group: cfg.Group}, leaderSide{n})
	n.forwardBatch = newBatcher(cfg.BatchMaxOps, cfg.BatchInflight, cfg.BatchMaxWait, n.fwd.Checks, n.metrics.observeForward)
	n.metrics.timeBatchers(n.leaderBatch, n.forwardBatch)
	n.leaderBatch.traced(tracing.SpanCommit, n.proposeChecksIn) // spans while tracing is on (tracing.go)
	n.forwardBatch.traced(tracing.SpanForwardBatch, n.fwd.ChecksTraced)

	n.wg.Add(4)
	go n.leaderLoop()
	go func() { defer n.wg.Done(); flushLoop(n.fsm, n.cfg.FSMFlushInterval, n.closing, n.metrics.flushSeconds) }()
	// Counted in n.wg on its own, so that Open's count of its goroutines
	// does not depend on it.
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.ol.run(n.closing, n.Ready) }()
	go func() {
		defer n.wg.Done()
		n.metrics.watchHeartbeats(n.raft, n.closing)
	}()
	go func() { defer n.wg.Done(); watchPeers(n.raft, cfg.NodeID, n.log, n.closing) }()
	n.wg.Add(3)
	go func() { defer n.wg.Done(); n.guarded.WatchEnd(n.closing) }()
	go n.watchAdmission()
	go func() { // diskwatch.go
		defer n.wg.Done()
		n.disk.run(n.closing, diskActions{log: n.log, leading: n.IsLeader,
			transfer: func() error { return n.raft.LeadershipTransfer().Error() },
			fail:     func(err error) { n.vit.fail(err, true) }})
	}()
	n.wg.Add(1)
	go func() { // catchup.go
		defer n.wg.Done()
		n.catch.learnFrom(n.closing, leaderProgress{self: cfg.NodeID, leading: n.IsLeader, leader: n.leaderHTTP,
			ask: n.peers.info, timeout: min(cfg.ApplyTimeout, 2*time.Second)})
	}()
	if n.ahead != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.ahead.run(n.closing)
		}()
	}
	return n, nil
}

// flushLoop commits the state machine's shared transaction every interval
// until closing, so the file and snapshots stay close behind the applied
// index when traffic is light. A failed commit stops the node through
// OnFatal.
func flushLoop(f *fsm.FSM, every time.Duration, closing <-chan struct{}, took prometheus.Observer) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-closing:
			return
		case <-t.C:
			if err := flushFSM(f, took); err != nil {
				return
			}
		}
	}
}

func (n *Node) openRaft(bootstrap bool) error {
	cfg := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.MaxAppendEntries = 1024
	rc.BatchApplyCh = true
	rc.Logger = n.logger
	// The state machine keeps its own applied index in the same bbolt
	// transaction as the state, so a clean restart resumes from its file and
	// skips what it already applied. After an unclean stop its file was set
	// aside (NoSync makes it untrustworthy), and Raft must rebuild it from the
	// latest snapshot plus the retained log.
	rc.NoSnapshotRestoreOnStart = !n.recoveredFrom
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raft config: %w", err)
	}

	logs, logPath, err := logstore.Open(cfg.DataDir, cfg.LogStore, n.logger)
	if err != nil {
		return err
	}
	if cfg.wrapLogStore != nil {
		logs = cfg.wrapLogStore(logs)
	}
	n.disk = newDiskWatch(cfg.DiskStallTransfer, cfg.DiskStallWindow, cfg.DiskStallFail)
	logs = n.disk.wrap(logs) // diskwatch.go
	guarded := &logstore.Guarded{Store: logs, Failed: n.vit.logStoreFailed, Applied: n.fsm.AppliedIndex, Diverged: n.vit.historyDiverged}
	logs = guarded
	n.guarded = guarded
	n.logs = logs
	// Entries can carry thousands of checks: keep the cache and the retained
	// log (TrailingLogs, SnapshotThreshold) modest so memory and the log on disk stay bounded.
	cached, err := raft.NewLogCache(512, logs)
	if err != nil {
		logs.Close()
		return fmt.Errorf("raft log cache: %w", err)
	}
	if !cfg.NoApplyAhead {
		n.ahead = newAhead(raft.ServerID(cfg.NodeID), cached, n.fsm, func(t forward.Tag, res []fsm.Result) bool {
			return n.fwd.Early(t, res)
		})
		guarded.Stored = n.ahead.stored // a no-op until raft is set below
	}
	snapDir := filepath.Join(cfg.DataDir, "snapshots")
	removeTempSnapshots(cfg.DataDir, n.log) // snapclean.go
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, n.logger)
	if err != nil {
		logs.Close()
		return fmt.Errorf("open snapshot store %s: %w", snapDir, err)
	}

	trans := cfg.Transport
	if trans == nil && cfg.RaftMux != nil { // its group on the shared port (mux.go)
		t, err := cfg.RaftMux.Group(cfg.Group)
		if err != nil {
			logs.Close()
			return fmt.Errorf("open raft group %d: %w", cfg.Group, err)
		}
		trans = t
	}
	if trans == nil {
		t, err := raftnet.Listen(raftnet.Config{NodeID: cfg.NodeID, Addr: cfg.RaftAddr, Bind: cfg.RaftBind, TLS: cfg.TLS}, n.logger)
		if err != nil {
			logs.Close()
			return err
		}
		trans = t
	}
	n.gate = raftnet.NewVoteGate(trans, cfg.NodeID, n.adm.mayVote, n.adm.refusingVotes, cfg.NoPipeline)
	trans = n.gate
	n.trans = trans

	existing, err := raft.HasExistingState(cached, logs, snaps)
	if err != nil {
		closeTransport(n.gate, n.cfg.Transport != nil)
		logs.Close()
		return fmt.Errorf("inspect raft state in %s: %w", cfg.DataDir, err)
	}
	if err := errors.Join(logstore.CheckEnd(logs, logPath), logstore.CheckReadable(logs, logPath)); err != nil {
		closeTransport(n.gate, n.cfg.Transport != nil)
		logs.Close()
		return err
	}
	if err := n.adm.admitFromLog(logs, fsm.EncodeSetNode(incarnationKey(cfg.NodeID), n.adm.id)); err != nil {
		closeTransport(n.gate, n.cfg.Transport != nil)
		logs.Close()
		return fmt.Errorf("raft log %s: %w", logPath, err)
	}
	if err := logstore.CoversState(n.fsm.AppliedIndex(), logs, snaps); err != nil {
		closeTransport(n.gate, n.cfg.Transport != nil)
		logs.Close()
		return fmt.Errorf("raft log %s: %w", logPath, err)
	}
	var raftSnaps raft.SnapshotStore = installStore{SnapshotStore: snaps, c: &n.catch, logs: logs} // catchup.go
	if cfg.wrapSnapshots != nil {
		raftSnaps = cfg.wrapSnapshots(raftSnaps)
	}
	r, err := raft.NewRaft(rc, restoreGuard{n.fsm, n.vit.historyDiverged}, cached, logs, raftSnaps, trans)
	if err != nil {
		closeTransport(n.gate, n.cfg.Transport != nil)
		logs.Close()
		return fmt.Errorf("start raft in %s: %w", cfg.DataDir, err)
	}
	n.raft = r
	n.vit.raft = r
	if n.ahead != nil {
		n.ahead.raft.Store(r)
	}
	n.disc.hadState = existing
	if known, member := n.vit.membership(); existing && known && !member {
		// Ready says so at every probe; the log must say it once too, or
		// the node looks merely slow. A directory that names its node is
		// refused before this (claimDataDir); one from before that is not.
		n.log.Warn("this node is not in the Raft configuration its data directory holds: it will not become ready unless a leader adds it (a copy of another node's directory under a new --node-id, which defaults to --raft-addr? or a removed node)",
			"node_id", cfg.NodeID, "data_dir", cfg.DataDir)
	}
	if !existing && bootstrap {
		conf := raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: trans.LocalAddr(), Suffrage: raft.Voter,
		}}}
		if err := r.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			r.Shutdown()
			closeTransport(n.gate, n.cfg.Transport != nil)
			logs.Close()
			return fmt.Errorf("bootstrap cluster: %w", err)
		}
		n.adm.admit("bootstrapped a new cluster")
	}
	return nil
}

// closeTransport closes the Raft transport through its vote gate g (nil:
// none yet), or, for a transport the caller passed in (Config.Transport),
// only stops the gate: the caller owns it.
func closeTransport(g *raftnet.VoteGate, passedIn bool) {
	switch {
	case g == nil:
	case passedIn:
		g.Halt()
	default:
		g.Close()
	}
}

// FSM returns the node's state machine (read-only uses: policies, digest, stats).
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// TransferLeadership asks the leader (this node) to hand leadership to
// another voter, for planned maintenance; it returns once a new leader was
// chosen or the transfer failed.
func (n *Node) TransferLeadership() error {
	if err := n.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}

// TransferLeadershipTo is TransferLeadership to the voter id at raftAddr.
func (n *Node) TransferLeadershipTo(id, raftAddr string) error {
	if err := n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(raftAddr)).Error(); err != nil {
		return fmt.Errorf("leadership transfer to %s: %w", id, err)
	}
	return nil
}

// ID is this node's Raft server ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Recovered reports that the previous stop was unclean and the state machine
// was rebuilt from the latest snapshot and the Raft log.
func (n *Node) Recovered() bool { return n.recoveredFrom }

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Failed is closed when the node stops serving for good: its state machine
// stopped applying or its Raft log could not be written. Health says why.
// The node does not recover by itself; restart it once the cause is fixed
// (limitd serve exits with status 1).
func (n *Node) Failed() <-chan struct{} { return n.vit.halted }

// Health is nil while the node's storage and state machine work, and
// otherwise an ErrUnavailable naming the degraded state (state machine
// stopped, Raft log not writable, removed from the cluster). Unlike Ready it
// does not depend on a leader: it is what /healthz should report.
func (n *Node) Health() error { return n.vit.unavailable() }

// Removed is closed when this node is removed from the cluster; from then
// on Ready reports it and checks answer ErrUnavailable. The server decides
// whether the process exits (limitd serve does unless --stay-after-removal).
func (n *Node) Removed() <-chan struct{} { return n.vit.removed }

var errRemoved = errors.New("removed from cluster")

// Ready is nil when this node can serve: it knows a leader and its state
// machine has applied (nearly) everything it knows to be committed.
func (n *Node) Ready() error {
	if err := n.vit.unavailable(); err != nil {
		return err
	}
	if known, member := n.vit.membership(); known && !member {
		return fmt.Errorf("not in the cluster configuration (%s is not a member; joining, or on another member's address?)", n.cfg.NodeID)
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		return ErrNoLeader
	}
	if !n.adm.mayVote() {
		// vote.go: a new data directory is a member once a leader admits it.
		return errors.New("not yet admitted: this node's data directory is new and a leader has not yet recorded that it holds the whole history")
	}
	if err := n.catch.check(n.fsm.AppliedIndex(), n.raft.LastIndex()); err != nil { // catchup.go
		return err
	}
	commit, applied := n.raft.CommitIndex(), n.fsm.AppliedIndex()
	// A busy node always trails its commit index by the entries in flight;
	// "caught up" means within a few batches, not equal.
	if commit > applied+64 {
		return fmt.Errorf("catching up: applied index %d, commit index %d", applied, commit)
	}
	if _, ok := n.fsm.NodeAddr(n.leaderID()); !ok {
		return errors.New("leader has not registered its HTTP address yet")
	}
	return nil
}

func (n *Node) leaderID() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// leaderHTTP returns the leader's id and HTTP address, if known.
func (n *Node) leaderHTTP() (string, string) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", ""
	}
	addr, _ := n.fsm.NodeAddr(string(id))
	return string(id), addr
}

// WaitLeader blocks until some leader is known and registered, or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, addr := n.leaderHTTP(); id != "" && addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ErrNoLeader
		case <-n.closing:
			return ErrNoLeader
		case <-t.C:
		}
	}
}

// leaderLoop runs leader-only duties: register this node's HTTP address in
// the replicated node table, and propose expiry sweeps when something is due.
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ExpireInterval)
	defer t.Stop()
	register := time.NewTicker(100 * time.Millisecond)
	defer register.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-register.C:
			n.vit.watchMembership()
			if n.IsLeader() && n.fsm.Nodes()[n.cfg.NodeID] != n.cfg.HTTPAddr {
				f := n.raft.Apply(fsm.EncodeSetNode(n.cfg.NodeID, n.cfg.HTTPAddr), n.cfg.ApplyTimeout)
				if _, err := n.await(context.Background(), f); err != nil {
					n.log.Debug("register http address", "error", err)
				}
			}
			if n.IsLeader() {
				// A leader needs no record of its own incarnation (it is
				// admitted); its --bootstrap-expect peers do (admit.go).
				n.promo.recordBootIncarnations()
			}
		case <-t.C:
			if !n.IsLeader() {
				continue
			}
			next, ok := n.fsm.NextExpiry()
			if now := n.clock.stamp(); ok && next <= now {
				f := n.raft.Apply(fsm.EncodeExpire(now, n.cfg.ExpireMax), n.cfg.ApplyTimeout)
				if _, err := n.await(context.Background(), f); err != nil {
					n.log.Debug("expire sweep", "error", err)
				}
			}
		}
	}
}

// leaderClock stamps new entries with leader time: wall clock, but never
// behind a time this node stamped or the state machine has applied
// (applied: its last leader time), so time in the log never goes backwards
// (the state machine clamps as well). An entry encoded under mu with
// stampLocked enters the log in stamp order.
type leaderClock struct {
	mu      sync.Mutex
	last    int64
	lastAt  time.Time // clock.go: the monotonic instant of last
	applied func() int64
	offset  atomic.Int64 // clock.go: the fault offset of wallNow
}

func (c *leaderClock) stamp() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stampLocked()
}

func (c *leaderClock) stampLocked() int64 {
	now := c.wallNow() // clock.go
	if t := c.applied(); t > now {
		now = t
	}
	now = c.keepRunning(now)
	if c.last > now {
		now = c.last
	}
	c.last = now
	return now
}

// Close stops the node: a leader first hands leadership to another voter so
// the cluster does not wait for an election timeout, then Raft shuts down and
// the state machine is synced and closed cleanly.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.raft.State() == raft.Leader && countVoters(n.raft) > 1 {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				// The others elect a leader after an election timeout instead.
				n.log.Info("could not hand over leadership before shutdown", "error", err)
			}
		}
		close(n.closing)
		n.wg.Wait()
		var errs []error
		if n.vit.fatal.Load() != nil {
			// The state machine blocks its Apply after a fatal error until it is
			// closed, and Raft's shutdown waits for that Apply: close it first.
			if err := n.fsm.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close state machine: %w", err))
			}
		}
		if err := n.shutdownRaft(); err != nil {
			errs = append(errs, err)
		}
		closeTransport(n.gate, n.cfg.Transport != nil)
		if err := n.logs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close raft log: %w", err))
		}
		if err := n.fsm.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close state machine: %w", err))
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

func countVoters(r *raft.Raft) int {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
