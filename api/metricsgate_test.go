package api

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// /metrics follows /v1/cluster's rule: the Raft term and indexes only with
// the admin token; the lag and everything else for all.
func TestMetricsTermAndIndexesForAdmins(t *testing.T) {
	store := newFakeStore()
	var cs []prometheus.Collector
	for _, name := range []string{"limitd_raft_term", "limitd_raft_commit_index", "limitd_raft_applied_index", "limitd_raft_commit_lag"} {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: name}, func() float64 { return 7 }))
	}
	ts := &testServer{t: t, store: store, h: newAPI(multiCollectorStore{store, cs}, Config{AdminToken: "tok", Logger: discardLogger()}).Handler()}
	anon := string(ts.do("GET", "/metrics", "").body)
	admin := string(ts.do("GET", "/metrics", "", "Authorization: Bearer tok").body)
	for name := range adminMetrics {
		if strings.Contains(anon, name+" ") {
			t.Errorf("/metrics without the token shows %s", name)
		}
		if !strings.Contains(admin, name+" 7") {
			t.Errorf("/metrics with the token lacks %s", name)
		}
	}
	if !strings.Contains(anon, "limitd_raft_commit_lag 7") {
		t.Errorf("/metrics without the token lacks the commit lag:\n%s", anon)
	}
}

type multiCollectorStore struct {
	*fakeStore
	cs []prometheus.Collector
}

func (m multiCollectorStore) Collectors() []prometheus.Collector {
	return append(m.fakeStore.Collectors(), m.cs...)
}
