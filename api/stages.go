package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/nodeapi"
)

// The HTTP stages of a check's latency budget (its time per stage): reading and
// decoding the request, and encoding and writing the answer. What lies
// between (batching, forwarding, Raft, apply) is timed by the node
// (limitd_check_stage_seconds, limitd_raft_*). One histogram family, the
// observers resolved once, so timing a check allocates nothing.
var (
	httpStageVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "limitd_http_check_stage_seconds",
		Help:    "Stages of a POST /v1/check in the HTTP front end: read_decode (handler entry to a decoded check), respond (decision to response written).",
		Buckets: nodeapi.LatencyBuckets(nodeapi.DefaultApplyTimeout),
	}, []string{"stage"})
	stageReadDecode = httpStageVec.WithLabelValues("read_decode")
	stageRespond    = httpStageVec.WithLabelValues("respond")
)
