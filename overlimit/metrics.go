package overlimit

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxPolicyLabels bounds the distinct policy label values of the hits
// counter. Policies beyond it are counted under OtherLabel; inline limits
// are all counted under InlineLabel. Label values are created by the apply
// path (one per policy that had a refusal cached), never by a client.
const MaxPolicyLabels = 256

// Label values of the hits counter that are not policy names. Policy names
// cannot collide with them in a way that matters: a policy named "inline"
// is counted together with inline limits.
const (
	InlineLabel = "inline"
	OtherLabel  = "other"
)

// counter is a hit count for one shard, alone on its cache line so that
// readers hitting different shards do not share a line.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

type label struct {
	name string
	hits []counter // per shard
}

func (l *label) total() uint64 {
	var t uint64
	for i := range l.hits {
		t += l.hits[i].n.Load()
	}
	return t
}

type labels struct {
	shards int
	mu     sync.Mutex
	byName map[string]*label
	list   []*label
	inline *label
	other  *label
}

func (ls *labels) init(shards int) {
	ls.shards = shards
	ls.byName = make(map[string]*label)
	ls.inline = ls.add(InlineLabel)
	ls.other = ls.add(OtherLabel)
}

func (ls *labels) add(name string) *label {
	l := &label{name: name, hits: make([]counter, ls.shards)}
	ls.list = append(ls.list, l)
	return l
}

// of returns the label an entry of id counts its hits under.
func (ls *labels) of(id LimitID) *label {
	if !id.Policy {
		return ls.inline
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.byName[id.Ident]; ok {
		return l
	}
	if id.Ident == InlineLabel {
		return ls.inline
	}
	if len(ls.byName) >= MaxPolicyLabels {
		return ls.other
	}
	l := ls.add(id.Ident)
	ls.byName[l.name] = l
	return l
}

func (ls *labels) all() []*label {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return append([]*label(nil), ls.list...)
}

var (
	descHits = prometheus.NewDesc("limitd_overlimit_hits_total",
		"Refusals answered from this node's over-limit cache without a Raft round, by policy (name, \"inline\" for inline limits, \"other\" beyond the label bound).",
		[]string{"policy"}, nil)
	descEntries = prometheus.NewDesc("limitd_overlimit_entries",
		"Entries in this node's over-limit cache (including expired ones not yet reclaimed).", nil, nil)
	descCapacity = prometheus.NewDesc("limitd_overlimit_capacity",
		"The most entries this node's over-limit cache holds.", nil, nil)
	descEvictions = prometheus.NewDesc("limitd_overlimit_evictions_total",
		"Unexpired over-limit cache entries dropped to make room.", nil, nil)
	descContradictions = prometheus.NewDesc("limitd_overlimit_contradictions_total",
		"Over-limit cache entries an applied allowance proved wrong; anything but 0 means a missed invalidation.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Cache) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHits
	ch <- descEntries
	ch <- descCapacity
	ch <- descEvictions
	ch <- descContradictions
}

// Collect implements prometheus.Collector. The node is the scrape target's
// instance label: every node serves its own /metrics.
func (c *Cache) Collect(ch chan<- prometheus.Metric) {
	st := c.Stats()
	for _, l := range c.labels.all() {
		ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(l.total()), l.name)
	}
	ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(c.capacity))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(descContradictions, prometheus.CounterValue, float64(st.Contradictions))
}

var _ prometheus.Collector = (*Cache)(nil)
