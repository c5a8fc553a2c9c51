package groups

import (
	"context"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/cluster"
)

// Metrics of a node with data groups. Every group is a cluster.Node with
// the same collectors, so the node's metrics carry a group label
// (group="0" for the configuration group), which keeps one name per
// metric and no collision between groups; and each group has
// limitd_group_leader, _term, _commit_index and _applied_index. The data
// groups open after the daemon builds its registry, so they register when
// they open. Collectors that every group returns alike (the process-wide
// Raft sink) are registered once, with group 0's.

// RegisterMetrics registers every group's metrics in reg: group 0's now,
// each data group's once it is open. Errors (a collector the registry
// refuses) go to logf.
func (h *Host) RegisterMetrics(reg prometheus.Registerer, logf func(format string, args ...any)) {
	shared := map[uintptr]bool{}
	for _, c := range h.zero.Collectors() {
		if p, ok := pointerOf(c); ok {
			shared[p] = true
		}
	}
	register := func(g uint32, n *cluster.Node) {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"group": groupName(g)}, reg)
		for _, c := range n.Collectors() {
			if p, ok := pointerOf(c); ok && g != 0 && shared[p] {
				continue
			}
			if err := r.Register(c); err != nil {
				logf("groups: register group %d's metrics: %v", g, err)
			}
		}
		for _, c := range groupGauges(g, n) {
			if err := reg.Register(c); err != nil {
				logf("groups: register group %d's gauges: %v", g, err)
			}
		}
	}
	register(0, h.zero)
	h.onOpen(func(nodes []*cluster.Node) {
		for i, n := range nodes {
			register(uint32(i+1), n)
		}
	})
}

// pointerOf is c's address when c is a pointer (a collector's identity).
func pointerOf(c prometheus.Collector) (uintptr, bool) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer {
		return 0, false
	}
	return v.Pointer(), true
}

// groupGauges are group g's leader, term, commit and applied index, read
// from one Status per scrape.
func groupGauges(g uint32, n *cluster.Node) []prometheus.Collector {
	labels := prometheus.Labels{"group": groupName(g)}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, labels) }
	return []prometheus.Collector{&groupCollector{n: n,
		leader:  desc("limitd_group_leader", "1 if this node leads the group (group 0: the configuration group)."),
		term:    desc("limitd_group_term", "The group's current Raft term on this node."),
		commit:  desc("limitd_group_commit_index", "The group's Raft commit index known to this node."),
		applied: desc("limitd_group_applied_index", "The index the group's state machine applied on this node."),
	}}
}

type groupCollector struct {
	n                             *cluster.Node
	leader, term, commit, applied *prometheus.Desc
}

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.leader
	ch <- c.term
	ch <- c.commit
	ch <- c.applied
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.n.Status(ctx)
	if err != nil {
		return
	}
	leader := 0.0
	if st.State == "Leader" {
		leader = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(st.AppliedIndex))
}
