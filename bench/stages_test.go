package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func expo(count, sum string, b1, b2, b3 string, wait, batches string) string {
	return `# TYPE limitd_check_stage_seconds histogram
limitd_check_stage_seconds_bucket{stage="batch_wait",le="0.001"} ` + b1 + `
limitd_check_stage_seconds_bucket{stage="batch_wait",le="0.01"} ` + b2 + `
limitd_check_stage_seconds_bucket{stage="batch_wait",le="+Inf"} ` + b3 + `
limitd_check_stage_seconds_sum{stage="batch_wait"} ` + sum + `
limitd_check_stage_seconds_count{stage="batch_wait"} ` + count + `
limitd_check_stage_seconds_bucket{stage="forward",le="0.001"} 0
limitd_check_stage_seconds_bucket{stage="forward",le="+Inf"} 0
limitd_check_stage_seconds_sum{stage="forward"} 0
limitd_check_stage_seconds_count{stage="forward"} 0
# TYPE limitd_fsm_apply_wait_seconds_total counter
limitd_fsm_apply_wait_seconds_total ` + wait + `
# TYPE limitd_fsm_apply_batches_total counter
limitd_fsm_apply_batches_total ` + batches + `
`
}

// The budget is the difference of two scrapes: counts, mean and the p99's
// bucket come from the run's samples only, a stage without samples in the run
// is left out, and the apply wait is the counters' difference per batch.
func TestStageBudget(t *testing.T) {
	before, err := ParseStages("leader", strings.NewReader(expo("100", "5", "50", "50", "100", "1", "10")))
	if err != nil {
		t.Fatal(err)
	}
	// The run adds 200 samples summing to 0.4 s: 198 under 1 ms, 2 under 10 ms.
	after, err := ParseStages("leader", strings.NewReader(expo("300", "5.4", "248", "250", "300", "1.5", "110")))
	if err != nil {
		t.Fatal(err)
	}
	rows := StageBudget([]Scrape{before}, []Scrape{after})
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want batch wait and apply wait", rows)
	}
	w := rows[0]
	if w.Stage != "batcher wait" || w.Node != "leader" || w.Count != 200 || w.Mean != 2*time.Millisecond || w.P99 != time.Millisecond {
		t.Fatalf("batch wait row %+v, want 200 samples, mean 2ms, p99 ≤ 1ms", w)
	}
	a := rows[1]
	if a.Stage != applyWaitName || a.Count != 100 || a.Mean != 5*time.Millisecond {
		t.Fatalf("apply wait row %+v, want 100 batches, 5ms each", a)
	}
	var out bytes.Buffer
	if err := WriteStages(&out, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "batcher wait") || !strings.Contains(out.String(), "2.00ms") {
		t.Fatalf("table:\n%s", out.String())
	}
}

// Raft entries over a run: the largest advance of a node's commit index
// between the scrapes (the leader's); unknown when no node showed it.
func TestRaftEntries(t *testing.T) {
	scrape := func(node, index string) Scrape {
		t.Helper()
		text := ""
		if index != "" {
			text = "# TYPE limitd_raft_commit_index gauge\nlimitd_raft_commit_index " + index + "\n"
		}
		s, err := ParseStages(node, strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := []Scrape{scrape("leader", "1000"), scrape("follower", "990"), scrape("hidden", "")}
	after := []Scrape{scrape("leader", "1250"), scrape("follower", "1240"), scrape("hidden", "")}
	if n, ok := RaftEntries(before, after); !ok || n != 250 {
		t.Errorf("RaftEntries = %d, %v; want 250 (the leader's advance), true", n, ok)
	}
	hidden := []Scrape{scrape("hidden", "")}
	if n, ok := RaftEntries(hidden, hidden); ok || n != 0 {
		t.Errorf("RaftEntries without commit indexes = %d, %v; want 0, false", n, ok)
	}
	var out bytes.Buffer
	r := Result{System: "limitd", Checks: 50_000, Allowed: 50_000, Elapsed: 10 * time.Second, RaftEntries: 750}
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "750 (15.0 per 1,000 checks)") {
		t.Errorf("report does not give the Raft entries per 1,000 checks:\n%s", out.String())
	}
}
