package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The latency budget of a check: limitd's per-stage histograms, scraped from
// every node's /metrics before and after a run; the difference is the run's.

// Stage is one line of the budget: a histogram series of limitd's /metrics.
type Stage struct {
	Name   string // as printed
	Family string // metric family
	Label  string // "name=value" selecting the series, or ""
}

// Stages are the budget's lines in the order a check meets them. The raft_*
// lines are inside "propose" on the leader; the flush runs beside them on a
// timer, and "apply waited for a flush" is its cost to the applies.
var Stages = []Stage{
	{"total (HTTP in to decision)", "limitd_check_duration_seconds", "endpoint=check"},
	{"HTTP read + decode", "limitd_http_check_stage_seconds", "stage=read_decode"},
	{"batcher wait", "limitd_check_stage_seconds", "stage=batch_wait"},
	{"forward to leader (follower)", "limitd_check_stage_seconds", "stage=forward"},
	{"propose to result (leader)", "limitd_check_stage_seconds", "stage=propose"},
	{"└ leader log write", "limitd_raft_log_store_seconds", "role=leader"},
	{"└ AppendEntries round trip", "limitd_raft_append_entries_seconds", "side=sent"},
	{"└ follower: AppendEntries handled", "limitd_raft_append_entries_seconds", "side=received"},
	{"└ follower log write", "limitd_raft_log_store_seconds", "role=follower"},
	{"└ commit (dispatch to quorum)", "limitd_raft_commit_seconds", ""},
	{"└ apply (per batch)", "limitd_raft_fsm_apply_seconds", ""},
	{"state flush (per flush)", "limitd_fsm_flush_seconds", ""},
	{"response", "limitd_http_check_stage_seconds", "stage=respond"},
	{"wait for a CPU (per goroutine wake-up)", "limitd_go_sched_wait_seconds", ""},
}

// applyWait is the counter pair that gives the applies' wait behind a flush.
const (
	applyWaitFamily    = "limitd_fsm_apply_wait_seconds_total"
	applyBatchesFamily = "limitd_fsm_apply_batches_total"
	applyWaitName      = "apply waited for a flush (per batch)"
)

// commitIndexFamily is the Raft commit index a node knows (shown without an
// admin token only on nodes that have none, or with the bench's token).
const commitIndexFamily = "limitd_raft_commit_index"

// RaftEntries is how many Raft entries the cluster committed between before
// and after: the largest advance of a node's commit index (the leader's,
// which knows every commit first). ok is false when no node showed its index
// at both scrapes. Every entry counts: check entries, lease grants and
// returns, expiry sweeps and admin commands.
func RaftEntries(before, after []Scrape) (n uint64, ok bool) {
	for i := range after {
		if i >= len(before) {
			break
		}
		a, okA := after[i].counts[commitIndexFamily]
		b, okB := before[i].counts[commitIndexFamily]
		if okA && okB && a >= b {
			n, ok = max(n, uint64(a-b)), true
		}
	}
	return n, ok
}

// series is one histogram's cumulative state.
type series struct {
	count   uint64
	sum     float64
	uppers  []float64
	buckets []uint64 // cumulative
}

// Scrape is one node's stage series at one moment.
type Scrape struct {
	Node   string
	series map[string]series // Family + "{" + Label + "}"
	counts map[string]float64
}

// ScrapeStages reads addr's /metrics (token, if set, as a bearer token).
func ScrapeStages(ctx context.Context, c *http.Client, node, addr, token string) (Scrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(addr, "/")+"/metrics", nil)
	if err != nil {
		return Scrape{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return Scrape{}, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Scrape{}, fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	return ParseStages(node, resp.Body)
}

// ParseStages reads the stage series from Prometheus text exposition.
func ParseStages(node string, r io.Reader) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Scrape{}, fmt.Errorf("parse metrics of %s: %w", node, err)
	}
	s := Scrape{Node: node, series: map[string]series{}, counts: map[string]float64{}}
	for _, st := range Stages {
		f := fams[st.Family]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabel(m, st.Label) || m.GetHistogram() == nil {
				continue
			}
			h := m.GetHistogram()
			se := series{count: h.GetSampleCount(), sum: h.GetSampleSum()}
			for _, b := range h.GetBucket() {
				se.uppers = append(se.uppers, b.GetUpperBound())
				se.buckets = append(se.buckets, b.GetCumulativeCount())
			}
			s.series[st.Family+"{"+st.Label+"}"] = se
		}
	}
	for _, name := range []string{applyWaitFamily, applyBatchesFamily} {
		if f := fams[name]; f != nil && len(f.GetMetric()) == 1 {
			s.counts[name] = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if f := fams[commitIndexFamily]; f != nil && len(f.GetMetric()) == 1 {
		s.counts[commitIndexFamily] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return s, nil
}

func hasLabel(m *dto.Metric, sel string) bool {
	if sel == "" {
		return true
	}
	name, value, _ := strings.Cut(sel, "=")
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// StageRow is one stage on one node over a run: how many samples, their mean
// and the upper bound of the bucket holding their p99.
type StageRow struct {
	Stage string        `json:"stage"`
	Node  string        `json:"node"`
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P99   time.Duration `json:"p99_le_ns,omitempty"`
}

// StageBudget is the run's budget: for every stage and node, the samples
// between before and after (same nodes, same order). Stages a node did not
// run (a follower's "propose") are left out.
func StageBudget(before, after []Scrape) []StageRow {
	var rows []StageRow
	for _, st := range Stages {
		key := st.Family + "{" + st.Label + "}"
		for i := range after {
			if i >= len(before) {
				break
			}
			a, b := after[i].series[key], before[i].series[key]
			if a.count <= b.count {
				continue
			}
			n := a.count - b.count
			row := StageRow{Stage: st.Name, Node: after[i].Node, Count: n,
				Mean: seconds((a.sum - b.sum) / float64(n))}
			rank := uint64(math.Ceil(0.99 * float64(n)))
			for j := range a.buckets {
				var prev uint64
				if j < len(b.buckets) {
					prev = b.buckets[j]
				}
				if a.buckets[j]-prev >= rank {
					row.P99 = seconds(a.uppers[j])
					break
				}
			}
			rows = append(rows, row)
		}
		if st.Family == "limitd_fsm_flush_seconds" {
			for i := range after {
				if i >= len(before) {
					break
				}
				nb := after[i].counts[applyBatchesFamily] - before[i].counts[applyBatchesFamily]
				if nb <= 0 {
					continue
				}
				w := after[i].counts[applyWaitFamily] - before[i].counts[applyWaitFamily]
				rows = append(rows, StageRow{Stage: applyWaitName, Node: after[i].Node, Count: uint64(nb), Mean: seconds(w / nb)})
			}
		}
	}
	return rows
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// WriteStages prints the budget as a table.
func WriteStages(w io.Writer, rows []StageRow) error {
	if len(rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage (from /metrics over the run)\tnode\tsamples\tmean\tp99 ≤")
	for _, r := range rows {
		p99 := "-"
		if r.P99 > 0 {
			p99 = fmtDuration(r.P99)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Stage, r.Node, formatInt(int64(r.Count)), fmtDuration(r.Mean), p99)
	}
	return tw.Flush()
}
