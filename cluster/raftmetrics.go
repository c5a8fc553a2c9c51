package cluster

import (
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/nodeapi"
)

// hashicorp/raft v1.7.3 reports its internals through go-metrics'
// process-wide sink (via github.com/hashicorp/go-metrics/compat, which
// forwards to github.com/armon/go-metrics unless built with the
// hashicorpmetrics tag; importing compat here reaches whichever one raft
// uses). raftSink is that sink: it keeps the samples an operator needs as
// Prometheus histograms and drops the rest, so the set of metric families is
// fixed and documented (docs/OPERATIONS.md) rather than whatever raft emits.
//
// The sink is global because go-metrics is: in a process with several nodes
// (tests) their samples mix. limitd serve runs one node per process.

// raftLatencyTop is the top bucket of raft's internal latencies: the
// default request deadline (--apply-timeout), since a commit slower than
// that has already failed its request.
const raftLatencyTop = 5 * time.Second

// raftSink implements go-metrics' MetricSink.
type raftSink struct {
	byKey map[string]prometheus.Observer // joined go-metrics key → histogram (samples in ms)
	all   []prometheus.Collector

	mu          sync.Mutex
	lastContact map[string]time.Time // follower id → last successful heartbeat or AppendEntries from this leader
}

// raftFamily is one Prometheus histogram fed by go-metrics keys.
type raftFamily struct {
	name, help string
	label      string            // "" or the one label name
	keys       map[string]string // go-metrics key → label value ("" without label)
}

var raftFamilies = []raftFamily{
	{name: "limitd_raft_commit_seconds", help: "Leader: time from dispatching a log entry to its commit by a quorum (raft.commitTime).",
		keys: map[string]string{"raft.commitTime": ""}},
	{name: "limitd_raft_fsm_apply_seconds", help: "Time the state machine took to apply a batch of committed entries (raft.fsm.applyBatch).",
		keys: map[string]string{"raft.fsm.applyBatch": "", "raft.fsm.apply": ""}},
	{name: "limitd_raft_log_store_seconds", help: "Time to write (and fsync) entries to the Raft log store, by role: leader (raft.leader.dispatchLog) or follower (raft.rpc.appendEntries.storeLogs).",
		label: "role", keys: map[string]string{"raft.leader.dispatchLog": "leader", "raft.rpc.appendEntries.storeLogs": "follower"}},
	{name: "limitd_raft_append_entries_seconds", help: "AppendEntries latency, by side: sent (leader, round trip to a follower) or received (follower, handling one).",
		label: "side", keys: map[string]string{"raft.replication.appendEntries.rpc": "sent", "raft.rpc.appendEntries": "received"}},
	{name: "limitd_raft_heartbeat_seconds", help: "Leader: round trip of a heartbeat to a follower.",
		keys: map[string]string{"raft.replication.heartbeat": ""}},
	{name: "limitd_raft_snapshot_seconds", help: "Snapshot durations, by phase: create (the state machine's part), persist (writing it out), restore (loading one), install (leader sending one to a follower). The _count of create is the number of snapshots taken.",
		label: "phase", keys: map[string]string{"raft.snapshot.create": "create", "raft.snapshot.persist": "persist", "raft.fsm.restore": "restore", "raft.replication.installSnapshot": "install"}},
	{name: "limitd_raft_election_seconds", help: "Candidate: time to run an election (raft.candidate.electSelf).",
		keys: map[string]string{"raft.candidate.electSelf": ""}},
}

// contactKeys are the leader's per-follower successes that refresh the
// follower's last contact.
var contactKeys = map[string]bool{"raft.replication.heartbeat": true, "raft.replication.appendEntries.rpc": true}

func newRaftSink() *raftSink {
	s := &raftSink{byKey: map[string]prometheus.Observer{}, lastContact: map[string]time.Time{}}
	buckets := nodeapi.LatencyBuckets(raftLatencyTop)
	for _, f := range raftFamilies {
		opts := prometheus.HistogramOpts{Name: f.name, Help: f.help, Buckets: buckets}
		if f.label == "" {
			h := prometheus.NewHistogram(opts)
			for k := range f.keys {
				s.byKey[k] = h
			}
			s.all = append(s.all, h)
			continue
		}
		hv := prometheus.NewHistogramVec(opts, []string{f.label})
		for k, v := range f.keys {
			s.byKey[k] = hv.WithLabelValues(v)
		}
		s.all = append(s.all, hv)
	}
	return s
}

var (
	globalRaftSink = newRaftSink()
	installSink    sync.Once
)

// installRaftSink makes globalRaftSink go-metrics' global sink, once per
// process, before the first node starts raft.
func installRaftSink() {
	installSink.Do(func() {
		conf := gometrics.DefaultConfig("")
		conf.HostName = ""
		conf.EnableHostname = false
		conf.EnableHostnameLabel = false
		conf.EnableRuntimeMetrics = false // Go's own metrics come from the Prometheus Go collector
		conf.EnableServiceLabel = false
		conf.TimerGranularity = time.Millisecond
		// An error only reports a bad filter configuration, which this is not.
		_, _ = gometrics.NewGlobal(conf, globalRaftSink)
	})
}

// appendKey appends key joined with dots to b: raft reports on its hot
// paths, and looking up string(appendKey(stack buffer)) does not allocate.
func appendKey(b []byte, key []string) []byte {
	for i, k := range key {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, k...)
	}
	return b
}

// AddSample receives raft's MeasureSince timings in milliseconds.
func (s *raftSink) AddSample(key []string, val float32) {
	s.AddSampleWithLabels(key, val, nil)
}

func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	var buf [96]byte
	k := appendKey(buf[:0], key)
	if h, ok := s.byKey[string(k)]; ok {
		h.Observe(float64(val) / 1000)
	}
	if contactKeys[string(k)] {
		for _, l := range labels {
			if l.Name == "peer_id" {
				s.mu.Lock()
				s.lastContact[l.Value] = time.Now()
				s.mu.Unlock()
			}
		}
	}
}

// sinceContact is how long ago this process's leader last heard from peer.
func (s *raftSink) sinceContact(peer string, now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.lastContact[peer]
	return now.Sub(t), ok
}

// The gauges and counters raft emits are covered by limitd's own gauges
// (state, term, indexes) and observations (leader changes): ignored.
func (s *raftSink) SetGauge([]string, float32)                                       {}
func (s *raftSink) SetGaugeWithLabels([]string, float32, []gometrics.Label)          {}
func (s *raftSink) SetPrecisionGauge([]string, float64)                              {}
func (s *raftSink) SetPrecisionGaugeWithLabels([]string, float64, []gometrics.Label) {}
func (s *raftSink) EmitKey([]string, float32)                                        {}
func (s *raftSink) IncrCounter([]string, float32)                                    {}
func (s *raftSink) IncrCounterWithLabels([]string, float32, []gometrics.Label)       {}
