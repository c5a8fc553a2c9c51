package api

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A check through POST /v1/check is timed once in each HTTP stage, and
// /metrics shows the family.
func TestCheckStagesTimed(t *testing.T) {
	ts := newTestServer(t, Config{})
	read, resp := stageCount(t, "read_decode"), stageCount(t, "respond")
	if r := ts.do("POST", "/v1/check", `{"key":"k","limit":{"algorithm":"fixed_window","limit":5,"window":"1m"}}`); r.code != 200 {
		t.Fatalf("check: %d %s", r.code, r.body)
	}
	if stageCount(t, "read_decode") != read+1 || stageCount(t, "respond") != resp+1 {
		t.Fatal("a check was not timed once in each stage")
	}
	if m := string(ts.do("GET", "/metrics", "").body); !strings.Contains(m, `limitd_http_check_stage_seconds_count{stage="respond"}`) {
		t.Fatal("/metrics lacks limitd_http_check_stage_seconds")
	}
}

func stageCount(t *testing.T, stage string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := httpStageVec.WithLabelValues(stage).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
