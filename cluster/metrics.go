package cluster

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// metrics holds the node's Prometheus collectors and the leader's view of
// peer health (from Raft's heartbeat observations).
type metrics struct {
	n             *Node
	batchOps      prometheus.Histogram
	fwdOps        prometheus.Histogram
	fwdErrors     *prometheus.CounterVec
	leaderChanges prometheus.Counter
	flushSeconds  prometheus.Histogram
	// stages is a check's latency budget inside the node, per stage:
	// batch_wait (a unit queued in a batcher until a flusher takes it, on
	// the leader and on a follower), propose (leader: a batch's raft.Apply
	// until its results, i.e. log write, replication, commit and apply),
	// forward (follower: a batch's round trip to the leader).
	stages                            *prometheus.HistogramVec
	stageWait, stagePropose, stageFwd prometheus.Observer
	mu                                sync.Mutex
	unhealthy                         map[string]time.Time // follower → when a heartbeat to it failed
}

var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

// Forwarding failure reasons, the "reason" label of limitd_forward_errors_total.
const (
	fwdRetry           = "retry"           // not delivered (leader down or changed): retried
	fwdOutcomeUnknown  = "outcome_unknown" // may have reached the leader without an answer
	fwdUnauthenticated = "unauthenticated" // the leader refused this node's credentials
	fwdTooLarge        = "too_large"
	fwdOther           = "other"
)

func newMetrics(n *Node) *metrics {
	installRaftSink()
	m := &metrics{
		n: n,
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "limitd_group_commit_batch_ops", Help: "Ops per Raft log entry proposed by this leader (group commit).",
			Buckets: batchBuckets,
		}),
		fwdOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "limitd_forward_batch_ops", Help: "Ops per request forwarded from this follower to the leader.",
			Buckets: batchBuckets,
		}),
		fwdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_forward_errors_total",
			Help: "Failed node-to-node requests to the leader, by reason: retry (not delivered: leader down or changed; retried), outcome_unknown, unauthenticated, too_large, other.",
		}, []string{"reason"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limitd_raft_leader_changes_total",
			Help: "Times this node saw a new Raft leader (including the first one it learned after starting).",
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "limitd_fsm_flush_seconds",
			Help:    "Time the periodic flush (--fsm-flush-interval) holds the applies: it freezes the pending generation, which a background commit then writes (limitd_fsm_commits_total, limitd_fsm_commit_seconds_total).",
			Buckets: nodeapi.LatencyBuckets(raftLatencyTop),
		}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitd_check_stage_seconds",
			Help:    "Stages of a check inside the node: batch_wait (queued in a group-commit batcher until sent, per request), propose (leader: a batch from raft.Apply to its results: log write, replication, commit, apply), forward (follower: a batch's round trip to the leader).",
			Buckets: nodeapi.LatencyBuckets(raftLatencyTop),
		}, []string{"stage"}),
		unhealthy: map[string]time.Time{},
	}
	m.stageWait = m.stages.WithLabelValues("batch_wait")
	m.stagePropose = m.stages.WithLabelValues("propose")
	m.stageFwd = m.stages.WithLabelValues("forward")
	for _, r := range []string{fwdRetry, fwdOutcomeUnknown, fwdUnauthenticated, fwdTooLarge, fwdOther} {
		m.fwdErrors.WithLabelValues(r) // every reason is present from the start, at 0
	}
	return m
}

// timeBatchers makes the leader's and the follower's batchers time their
// stages (limitd_check_stage_seconds).
func (m *metrics) timeBatchers(leader, follower *batcher) {
	leader.waitObs, leader.sendObs = m.stageWait, m.stagePropose
	follower.waitObs, follower.sendObs = m.stageWait, m.stageFwd
}

func (m *metrics) observeBatch(ops int)   { m.batchOps.Observe(float64(ops)) }
func (m *metrics) observeForward(ops int) { m.fwdOps.Observe(float64(ops)) }

// forwardFailed counts a failed forward by its error (nil: none).
func (m *metrics) forwardFailed(err error) {
	if err == nil {
		return
	}
	var ue *unavailableError
	reason := fwdOther
	switch {
	case errors.Is(err, errRetry):
		reason = fwdRetry
	case errors.Is(err, ErrOutcomeUnknown):
		reason = fwdOutcomeUnknown
	case errors.Is(err, ErrTooLarge):
		reason = fwdTooLarge
	case errors.As(err, &ue):
		reason = fwdUnauthenticated
	}
	m.fwdErrors.WithLabelValues(reason).Inc()
}

// flushFSM commits the state machine's pending applies, timing (took)
// commits that had something to write.
func flushFSM(f *fsm.FSM, took prometheus.Observer) error {
	if f.Pending() == 0 {
		return nil
	}
	start := time.Now()
	err := f.Flush()
	took.Observe(time.Since(start).Seconds())
	return err
}

func (m *metrics) peerHealthy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	failed, down := m.unhealthy[id]
	if !down {
		return true
	}
	// The flag follows the heartbeats both ways (a peer is never stuck "down"): Raft drops an
	// observation when the channel is full, and a new leadership term starts
	// its heartbeats afresh without a "resumed". A successful heartbeat or
	// AppendEntries after the failure says the follower is back.
	now := time.Now()
	if d, ok := globalRaftSink.sinceContact(id, now); ok && now.Add(-d).After(failed) {
		delete(m.unhealthy, id)
		return true
	}
	return false
}

// watchHeartbeats records failed and resumed heartbeats to followers, and
// counts leader changes.
func (m *metrics) watchHeartbeats(r *raft.Raft, done <-chan struct{}) {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	// A leader elected before the observer was registered counts too.
	_, leader := r.LeaderWithID()
	if leader != "" {
		m.leaderChanges.Inc()
	}
	for {
		select {
		case <-done:
			return
		case o := <-ch:
			m.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				m.unhealthy[string(d.PeerID)] = time.Now() // the latest failure
			case raft.ResumedHeartbeatObservation:
				delete(m.unhealthy, string(d.PeerID))
			case raft.LeaderObservation:
				if d.LeaderID != "" && d.LeaderID != leader {
					m.leaderChanges.Inc()
				}
				if d.LeaderID != "" {
					leader = d.LeaderID
				}
			}
			m.mu.Unlock()
		}
	}
}

// raftStates are the values of limitd_raft_state's "state" label.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

// nodeCollector computes the node's gauges that need more than one value
// or a label at scrape time.
type nodeCollector struct {
	n                                      *Node
	state, lastContact, snapBytes, dirSize *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	return &nodeCollector{
		n: n,
		state: prometheus.NewDesc("limitd_raft_state",
			"Raft state of this node: 1 for the current one of follower, candidate, leader, shutdown; 0 for the others.", []string{"state"}, nil),
		lastContact: prometheus.NewDesc("limitd_raft_follower_last_contact_seconds",
			"Leader only: seconds since the leader last heard from each follower (a heartbeat or AppendEntries answered).", []string{"peer"}, nil),
		snapBytes: prometheus.NewDesc("limitd_raft_snapshot_bytes",
			"Size of the newest Raft snapshot on disk (0: none yet).", nil, nil),
		dirSize: prometheus.NewDesc("limitd_data_dir_bytes",
			"Bytes of the files under --data-dir (Raft log, snapshots, state database).", nil, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.lastContact
	ch <- c.snapBytes
	ch <- c.dirSize
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	cur := n.raft.State()
	for _, s := range raftStates {
		v := 0.0
		if s == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, stateLabel(s))
	}
	if cur == raft.Leader {
		now := time.Now()
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if string(s.ID) == n.cfg.NodeID {
					continue
				}
				if d, ok := globalRaftSink.sinceContact(string(s.ID), now); ok {
					ch <- prometheus.MustNewConstMetric(c.lastContact, prometheus.GaugeValue, d.Seconds(), string(s.ID))
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.snapBytes, prometheus.GaugeValue, float64(newestSnapshotSize(n.cfg.DataDir)))
	ch <- prometheus.MustNewConstMetric(c.dirSize, prometheus.GaugeValue, float64(dirBytes(n.cfg.DataDir)))
}

func stateLabel(s raft.RaftState) string {
	switch s {
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	case raft.Leader:
		return "leader"
	default:
		return "shutdown"
	}
}

// newestSnapshotSize reads the size recorded in the meta.json of the
// newest snapshot (highest term, then index) in raft's file snapshot store.
func newestSnapshotSize(dataDir string) int64 {
	metas, _ := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "meta.json"))
	var best raft.SnapshotMeta
	found := false
	for _, p := range metas {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var m raft.SnapshotMeta
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if !found || m.Term > best.Term || (m.Term == best.Term && m.Index > best.Index) {
			best, found = m, true
		}
	}
	return best.Size
}

// dirBytes sums the sizes of the regular files under dir: a handful of
// files (log segments, two snapshots, the state database), cheap per scrape.
func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed during the walk (log compaction): skip it
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}

// Collectors returns the node's metrics for the /metrics registry.
func (n *Node) Collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		n.metrics.batchOps,
		n.metrics.fwdOps,
		n.metrics.fwdErrors,
		n.metrics.leaderChanges,
		n.metrics.flushSeconds,
		n.metrics.stages,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_fsm_apply_wait_seconds_total",
			Help: "Time applies waited for the state machine while a flush (or a snapshot, digest) held it; with limitd_fsm_apply_batches_total, the flush's cost to the write path."},
			func() float64 { return n.fsm.ApplyWait().Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_fsm_apply_batches_total",
			Help: "Batches of committed entries the state machine applied."},
			func() float64 { return float64(n.fsm.ApplyBatches()) }),
		newNodeCollector(n),
		gauge("limitd_raft_leader", "1 if this node is the Raft leader.", func() float64 {
			if n.IsLeader() {
				return 1
			}
			return 0
		}),
		gauge("limitd_raft_term", "Current Raft term.", func() float64 { return float64(n.raft.CurrentTerm()) }),
		gauge("limitd_raft_commit_index", "Raft commit index known to this node.", func() float64 { return float64(n.raft.CommitIndex()) }),
		gauge("limitd_raft_applied_index", "Index the state machine has applied.", func() float64 { return float64(n.fsm.AppliedIndex()) }),
		gauge("limitd_raft_commit_lag", "Commit index minus applied index.", func() float64 {
			c, a := n.raft.CommitIndex(), n.fsm.AppliedIndex()
			if c < a {
				return 0
			}
			return float64(c - a)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_fsm_commits_total",
			Help: "Background commits of frozen generations to the state machine's bbolt file (beside the applies)."},
			func() float64 { c, _ := n.fsm.Commits(); return float64(c) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_fsm_commit_seconds_total",
			Help: "Time the background commits of the state machine's bbolt file took (the applies go on meanwhile)."},
			func() float64 { _, d := n.fsm.Commits(); return d.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_fsm_flushed_keys_total",
			Help: "Key states the state machine's commits wrote to its bbolt file (dirty keys, each once per commit however many checks changed it)."},
			func() float64 { return float64(n.fsm.FlushedKeys()) }),
		gauge("limitd_fsm_pending_batches", "Applied batches not yet committed to the state database file (flushed every --fsm-flush-interval or --fsm-commit-every batches).", func() float64 {
			return float64(n.fsm.Pending())
		}),
		gauge("limitd_keys_stored", "Limiter keys with state in the store.", func() float64 { return float64(n.fsm.Stats().Keys) }),
		gauge("limitd_request_ids_stored", "Remembered request_ids.", func() float64 { return float64(n.fsm.Stats().RequestIDs) }),
		gauge("limitd_bbolt_size_bytes", "Size of the state machine's bbolt file.", func() float64 { return float64(n.fsm.Stats().DBSizeBytes) }),
		gauge("limitd_bbolt_live_bytes", "Bytes of the pages holding live data in the state machine's bbolt file (the file itself never shrinks).", func() float64 {
			u, err := n.fsm.Usage()
			if err != nil {
				return 0
			}
			return float64(u.Pages) * float64(os.Getpagesize())
		}),
	}
	if a := n.ahead; a != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_raft_applied_ahead_entries_total",
				Help: "Entries this follower applied from its own log before raft's commit index reached them: committed because the leader and this node, a majority, hold them (see cluster/DESIGN.md)."},
				func() float64 { return float64(a.entries.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_forward_answers_from_log_total",
				Help: "Forwarded check requests this follower answered from its own log, before the leader's answer arrived."},
				func() float64 { return float64(a.answered.Load()) }))
	}
	cs = append(cs, n.ol.collectors()...)
	cs = append(cs, budgetCollectors(n.fsm)...)   // budget_metrics.go
	cs = append(cs, hashSlotCollectors(n.fsm)...) // hashslots.go
	cs = append(cs, n.disk.collectors()...)       // diskwatch.go
	cs = append(cs, n.catalog.banCollectors()...) // lists.go
	cs = append(cs, n.muxCollectors()...)         // mux.go
	cs = append(cs, slotCollectors(n.fsm)...)     // slots.go
	cs = append(cs, outboxCollectors(n.fsm)...)   // webhooks.go
	cs = append(cs, costCollectors(n.fsm)...)     // costs.go
	cs = append(cs, degradedCollectors(n.fsm)...) // degraded.go
	return append(cs, globalRaftSink.all...)
}
