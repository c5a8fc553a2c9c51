package api

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// adminMetrics are the /metrics families only admins see, by the rule of
// GET /v1/cluster (term and indexes for admins only): they tell an outsider
// the cluster's history and write rate. limitd_raft_commit_lag, the number
// to alert on, stays public.
var adminMetrics = map[string]bool{
	"limitd_raft_term":          true,
	"limitd_raft_commit_index":  true,
	"limitd_raft_applied_index": true,
}

// metricsHandler serves /metrics: everything to admins (everyone, without an
// admin token), the rest without adminMetrics to others.
func (s *Server) metricsHandler() http.Handler {
	full := s.metrics.handler()
	public := promhttp.HandlerFor(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := s.metrics.reg.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if !adminMetrics[mf.GetName()] {
				out = append(out, mf)
			}
		}
		return out, err
	}), promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.isAdmin(req) {
			full.ServeHTTP(w, req)
			return
		}
		public.ServeHTTP(w, req)
	})
}
