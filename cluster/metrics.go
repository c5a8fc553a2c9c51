package cluster

import (
	"os"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the node's Prometheus collectors and the leader's view of
// peer health (from Raft's heartbeat observations).
type metrics struct {
	n         *Node
	batchOps  prometheus.Histogram
	fwdOps    prometheus.Histogram
	mu        sync.Mutex
	unhealthy map[string]bool
}

var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

func newMetrics(n *Node) *metrics {
	return &metrics{
		n: n,
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "limitd_group_commit_batch_ops", Help: "Ops per Raft log entry proposed by this leader (group commit).",
			Buckets: batchBuckets,
		}),
		fwdOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "limitd_forward_batch_ops", Help: "Ops per request forwarded from this follower to the leader.",
			Buckets: batchBuckets,
		}),
		unhealthy: map[string]bool{},
	}
}

func (m *metrics) observeBatch(ops int)   { m.batchOps.Observe(float64(ops)) }
func (m *metrics) observeForward(ops int) { m.fwdOps.Observe(float64(ops)) }

func (m *metrics) peerHealthy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.unhealthy[id]
}

// watchHeartbeats records failed and resumed heartbeats to followers.
func (m *metrics) watchHeartbeats(r *raft.Raft, done <-chan struct{}) {
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	for {
		select {
		case <-done:
			return
		case o := <-ch:
			m.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				m.unhealthy[string(d.PeerID)] = true
			case raft.ResumedHeartbeatObservation:
				delete(m.unhealthy, string(d.PeerID))
			}
			m.mu.Unlock()
		}
	}
}

// Collectors returns the node's metrics for the /metrics registry.
func (n *Node) Collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	return append(n.overLimitCollectors(),
		n.metrics.batchOps,
		n.metrics.fwdOps,
		gauge("limitd_raft_leader", "1 if this node is the Raft leader.", func() float64 {
			if n.IsLeader() {
				return 1
			}
			return 0
		}),
		gauge("limitd_raft_state", "Raft state: 0 follower, 1 candidate, 2 leader, 3 shutdown.", func() float64 {
			return float64(n.raft.State())
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
	)
}
