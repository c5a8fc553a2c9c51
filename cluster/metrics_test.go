package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestForwardFailedReasons(t *testing.T) {
	m := newMetrics(nil)
	for _, c := range []struct {
		err    error
		reason string
	}{
		{errRetry, fwdRetry},
		{fmt.Errorf("%w: forward to leader x: EOF", ErrOutcomeUnknown), fwdOutcomeUnknown},
		{fmt.Errorf("%w: leader x: too big", ErrTooLarge), fwdTooLarge},
		{&unavailableError{Cause: errors.New("the leader refused this node's credentials")}, fwdUnauthenticated},
		{errors.New("leader x answered 500"), fwdOther},
	} {
		before := testutil.ToFloat64(m.fwdErrors.WithLabelValues(c.reason))
		m.forwardFailed(c.err)
		if got := testutil.ToFloat64(m.fwdErrors.WithLabelValues(c.reason)) - before; got != 1 {
			t.Errorf("forwardFailed(%v): %s grew by %v, want 1", c.err, c.reason, got)
		}
	}
	m.forwardFailed(nil)
	total := 0.0
	for _, r := range []string{fwdRetry, fwdOutcomeUnknown, fwdUnauthenticated, fwdTooLarge, fwdOther} {
		total += testutil.ToFloat64(m.fwdErrors.WithLabelValues(r))
	}
	if total != 5 {
		t.Errorf("%v forwarding errors counted, want 5 (nil is no error)", total)
	}
}

// The bridge turns raft's millisecond samples into seconds and remembers
// the leader's last contact with each follower.
func TestRaftSinkBridge(t *testing.T) {
	s := newRaftSink()
	s.AddSample([]string{"raft", "commitTime"}, 250)
	s.AddSampleWithLabels([]string{"raft", "replication", "heartbeat"}, 1, []gometrics.Label{{Name: "peer_id", Value: "n2"}})
	s.AddSample([]string{"raft", "some", "other"}, 1) // dropped
	var m dto.Metric
	if err := s.byKey["raft.commitTime"].(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleSum(); got != 0.25 || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("commit histogram: count %d sum %v s, want one sample of 0.25 s (250 ms)", m.GetHistogram().GetSampleCount(), got)
	}
	if _, ok := s.sinceContact("n2", time.Now()); !ok {
		t.Error("no last contact recorded for n2 after a heartbeat")
	}
	if _, ok := s.sinceContact("n3", time.Now()); ok {
		t.Error("last contact recorded for a peer never heard from")
	}
	if n := testutil.CollectAndCount(s.all[0], "limitd_raft_commit_seconds"); n != 1 {
		t.Fatalf("commit histogram: %d series", n)
	}
}

// Raft reports on its hot paths: a sample costs no allocation.
func TestRaftSinkSampleDoesNotAllocate(t *testing.T) {
	s := newRaftSink()
	key := []string{"raft", "fsm", "applyBatch"}
	if n := testing.AllocsPerRun(100, func() { s.AddSample(key, 1.5) }); n != 0 {
		t.Errorf("AddSample: %v allocations, want 0", n)
	}
}
