package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/service"
)

// cachedCluster is a 3-node cluster and one service per node.
type cachedCluster struct {
	c    *clustertest.Cluster
	svcs []*service.Service
}

func newCachedCluster(t *testing.T, entries int) *cachedCluster {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, SkipShort: true, Config: func(i int, cfg *cluster.Config) {
		cfg.OverLimitEntries = entries
		// The two runs must see the same outcomes: no leadership change
		// (an outcome_unknown in one run only) on a loaded test host.
		clustertest.SteadyTimers(i, cfg)
	}})
	cc := &cachedCluster{c: c}
	for _, n := range c.Nodes() {
		cc.svcs = append(cc.svcs, service.New(clustertest.ServiceDeps(n), service.Config{}))
	}
	return cc
}

// caughtUp waits until every node applied what the leader has, so that the
// next check, on any node, is decided after every invalidation so far.
func (cc *cachedCluster) caughtUp(t *testing.T) {
	t.Helper()
	l := cc.c.Leader()
	want := cc.c.Node(l).FSM().AppliedIndex()
	deadline := time.Now().Add(clustertest.Timeout)
	for i := range cc.svcs {
		for cc.c.Node(i).FSM().AppliedIndex() < want {
			if time.Now().After(deadline) {
				t.Fatalf("node%d did not catch up", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// Trace step kinds.
const (
	stepCheck = iota
	stepBatch
	stepAll
	stepReset
	stepPut
	stepDelete
)

type traceStep struct {
	kind   int
	node   int
	policy string
	keys   []string
	costs  []int64
	config algo.Config
}

// overLimitConfigs: windows of an hour, so that the two clusters, which
// decide at slightly different times, decide the same; every algorithm
// (fixed_window's hour could roll over between the two runs, so it gets a
// day) and a count_refused log, which is never cached.
var overLimitConfigs = []algo.Config{
	{Algorithm: "token_bucket", Limit: 4, Window: "1h"},
	{Algorithm: "leaky_bucket", Limit: 3, Window: "1h"},
	{Algorithm: "sliding_window", Limit: 5, Window: "1h"},
	{Algorithm: "sliding_log", Limit: 3, Window: "1h"},
	{Algorithm: "sliding_log", Limit: 3, Window: "1h", CountRefused: true},
	{Algorithm: "token_bucket", Limit: 2, Window: "1h", Burst: 4},
}

func randomTrace(rng *rand.Rand, n int) []traceStep {
	policies := []string{"a", "b", "c"}
	keys := []string{"k1", "k2", "k3"}
	var tr []traceStep
	for len(tr) < n {
		s := traceStep{node: rng.Intn(3), policy: policies[rng.Intn(len(policies))]}
		switch r := rng.Intn(100); {
		case r < 70:
			s.kind = stepCheck
		case r < 78:
			s.kind = stepBatch
		case r < 84:
			s.kind = stepAll
		case r < 91:
			s.kind = stepReset
		case r < 97:
			s.kind = stepPut
			s.config = overLimitConfigs[rng.Intn(len(overLimitConfigs))]
		default:
			s.kind = stepDelete
		}
		m := 1
		if s.kind == stepBatch || s.kind == stepAll {
			m = 1 + rng.Intn(3)
		}
		for j := 0; j < m; j++ {
			s.keys = append(s.keys, keys[rng.Intn(len(keys))])
			s.costs = append(s.costs, int64(1+rng.Intn(2)))
		}
		tr = append(tr, s)
	}
	return tr
}

// run plays a trace and returns one line per step: what every check was
// answered (allowed, refused, or the error code).
func (cc *cachedCluster) run(t *testing.T, tr []traceStep) []string {
	ctx := context.Background()
	var out []string
	put := func(name string, c algo.Config) {
		if _, e := cc.svcs[cc.c.Leader()].PutPolicy(ctx, service.PolicyRequest{Name: name, Config: c}); e != nil {
			t.Fatalf("put %s: %v", name, e)
		}
	}
	for i, name := range []string{"a", "b", "c"} {
		put(name, overLimitConfigs[i])
	}
	cc.caughtUp(t)
	word := func(allowed bool) string {
		if allowed {
			return "allowed"
		}
		return "refused"
	}
	for _, s := range tr {
		svc := cc.svcs[s.node]
		var line string
		switch s.kind {
		case stepCheck:
			r, e := svc.Check(ctx, &service.CheckRequest{Key: s.keys[0], Policy: s.policy, Cost: s.costs[0]})
			if e != nil {
				line = string(e.Code)
			} else {
				line = word(service.Allowed(&r.Decision))
			}
		case stepBatch, stepAll:
			reqs := make([]service.CheckRequest, len(s.keys))
			for j := range s.keys {
				reqs[j] = service.CheckRequest{Key: s.keys[j], Policy: s.policy, Cost: s.costs[j]}
			}
			if s.kind == stepAll {
				r, e := svc.CheckAll(ctx, reqs, "")
				if e != nil {
					line = string(e.Code)
				} else {
					line = "all " + word(r.Allowed)
				}
				break
			}
			rs, e := svc.Batch(ctx, reqs, nil)
			if e != nil {
				t.Fatalf("batch: %v", e)
			}
			line = "batch"
			for _, r := range rs {
				if r.Err != nil {
					line += " " + string(r.Err.Code)
				} else {
					line += " " + word(service.Allowed(&r.Decision))
				}
			}
		case stepReset:
			if e := svc.ResetKey(ctx, &service.CheckRequest{Key: s.keys[0], Policy: s.policy}); e != nil {
				line = "reset " + string(e.Code)
			} else {
				line = "reset"
			}
			cc.caughtUp(t)
		case stepPut:
			put(s.policy, s.config)
			line = "put"
			cc.caughtUp(t)
		case stepDelete:
			if e := svc.DeletePolicy(ctx, s.policy); e != nil {
				line = "delete " + string(e.Code)
			}
			put(s.policy, overLimitConfigs[0]) // keep the policy around
			line += "delete"
			cc.caughtUp(t)
		}
		out = append(out, fmt.Sprintf("%v %s/%v %v: %s", s.kind, s.policy, s.keys, s.costs, line))
	}
	return out
}

// TestOverLimitCacheMatchesNoCache: a 3-node cluster answering from its
// over-limit caches gives exactly the answers of the same cluster without
// them, for random traces of checks, batches and atomic groups sent to every
// node, resets, policy changes and deletions (each followed by every node
// catching up: the one place the two may differ is a refusal on a follower
// within the replication lag after those writes, which this test excludes by
// construction). The cache must have answered some of them, and no applied
// allowance may have contradicted an entry.
func TestOverLimitCacheMatchesNoCache(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	tr := randomTrace(rand.New(rand.NewSource(seed)), 250)

	with := newCachedCluster(t, 4096)
	got := with.run(t, tr)
	without := newCachedCluster(t, 0)
	want := without.run(t, tr)

	for i := range tr {
		if got[i] != want[i] {
			t.Fatalf("step %d: with the cache %q, without %q\nthe steps before:\n%v", i, got[i], want[i], want[max(0, i-20):i+1])
		}
	}
	var hits, contradictions uint64
	for i, n := range with.c.Nodes() {
		st := n.OverLimit().Cache().Stats()
		hits += st.Hits
		contradictions += st.Contradictions
		t.Logf("node%d: %+v", i, st)
	}
	if hits == 0 {
		t.Fatal("no check was answered from the cache")
	}
	if contradictions != 0 {
		t.Fatalf("%d applied allowances contradicted a cached refusal", contradictions)
	}
	for _, n := range without.c.Nodes() {
		if n.OverLimit().Cache() != nil {
			t.Fatal("OverLimitEntries 0 built a cache")
		}
	}
	with.c.WaitConverged()
}

// TestOverLimitMetricsAndReadiness: a follower answers a refusal from its
// cache (no Raft round: the commit index does not move), the hit shows in
// the node's metrics by policy, and a node that stops being Ready empties its
// cache and stops answering from it.
func TestOverLimitMetricsAndReadiness(t *testing.T) {
	cc := newCachedCluster(t, 1024)
	ctx := context.Background()
	l := cc.c.Leader()
	f := (l + 1) % 3
	if _, e := cc.svcs[l].PutPolicy(ctx, service.PolicyRequest{Name: "p", Config: algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "24h"}}); e != nil {
		t.Fatal(e)
	}
	for i := 0; i < 2; i++ {
		if _, e := cc.svcs[l].Check(ctx, &service.CheckRequest{Key: "k", Policy: "p", Cost: 1}); e != nil {
			t.Fatal(e)
		}
	}
	cc.caughtUp(t)
	fn := cc.c.Node(f)
	before := fn.FSM().AppliedIndex()
	// The node answers from its cache once its readiness loop has seen it
	// Ready (it may not have, just after the cluster formed).
	deadline := time.Now().Add(clustertest.Timeout)
	for {
		if _, hit := fn.OverLimit().Refused(overLimitID("p"), "k", 1); hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never answered from its cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hits := fn.OverLimit().Cache().Stats().Hits
	r, e := cc.svcs[f].Check(ctx, &service.CheckRequest{Key: "k", Policy: "p", Cost: 1})
	if e != nil || r.Decision.Allowed || r.Decision.RetryAfter <= 0 {
		t.Fatalf("follower check: %+v %v", r, e)
	}
	if fn.OverLimit().Cache().Stats().Hits != hits+1 {
		t.Fatalf("stats %+v, want one hit", fn.OverLimit().Cache().Stats())
	}
	cc.caughtUp(t)
	if fn.FSM().AppliedIndex() != before {
		t.Fatal("the cached refusal went through the log")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(fn.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				name += "," + lp.GetName() + "=" + lp.GetValue()
			}
			switch {
			case m.Counter != nil:
				found[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				found[name] = m.Gauge.GetValue()
			}
		}
	}
	if found["limitd_overlimit_hits_total,policy=p"] != float64(hits+1) || found["limitd_overlimit_entries"] != 1 {
		t.Fatalf("metrics: hits %v entries %v", found["limitd_overlimit_hits_total,policy=p"], found["limitd_overlimit_entries"])
	}

	// The follower loses the cluster (no quorum, so no leader): it must stop
	// answering and clear.
	cc.c.Stop(l)
	cc.c.Stop(3 - l - f)
	deadline = time.Now().Add(clustertest.Timeout)
	for fn.OverLimit().Cache().Stats().Entries != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a node without a leader kept its cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, hit := fn.OverLimit().Refused(overLimitID("p"), "k", 1); hit {
		t.Fatal("answered from the cache without a leader")
	}
}

func overLimitID(policy string) overlimit.LimitID {
	return overlimit.LimitID{Policy: true, Ident: policy}
}

// overLimitRefusal sets up policy p (fixed_window, 1 per 10 s) and refuses
// key k once through the log on the leader, so every node's cache holds the
// refusal, and waits until the follower f answers from it.
func overLimitRefusal(t *testing.T, cc *cachedCluster, l, f int) {
	t.Helper()
	ctx := context.Background()
	if _, e := cc.svcs[l].PutPolicy(ctx, service.PolicyRequest{Name: "p", Config: algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "10s"}}); e != nil {
		t.Fatal(e)
	}
	for i := 0; i < 2; i++ {
		if _, e := cc.svcs[l].Check(ctx, &service.CheckRequest{Key: "k", Policy: "p", Cost: 1}); e != nil {
			t.Fatal(e)
		}
	}
	cc.caughtUp(t)
	deadline := time.Now().Add(clustertest.Timeout)
	for {
		if _, hit := cc.c.Node(f).OverLimit().Refused(overLimitID("p"), "k", 1); hit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never answered from its cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newSmallCachedCluster(t *testing.T) *cachedCluster {
	c := clustertest.MakeClusterOpts(t, clustertest.Options{Nodes: 3, Config: func(_ int, cfg *cluster.Config) {
		cfg.OverLimitEntries = 1024
	}})
	cc := &cachedCluster{c: c}
	for _, n := range c.Nodes() {
		cc.svcs = append(cc.svcs, service.New(clustertest.ServiceDeps(n), service.Config{}))
	}
	return cc
}

// A node that is not Ready does not answer from its cache, even while its
// state machine, applying entries as a lagging node does, adds refusals to
// it between two of the readiness loop's rounds.
func TestOverLimitCacheUnusedWhileNotReady(t *testing.T) {
	cc := newSmallCachedCluster(t)
	l := cc.c.Leader()
	f := (l + 1) % 3
	fn := cc.c.Node(f)
	overLimitRefusal(t, cc, l, f)

	// The loop finds the node not Ready (and clears the cache), then stays
	// inside its next readiness check until released: no round clears the
	// cache while the test adds to it.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	cluster.SetOverLimitReady(fn, func() error {
		if calls.Add(1) > 1 {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return errors.New("test: not ready")
	})
	select {
	case <-entered:
	case <-time.After(clustertest.Timeout):
		t.Fatal("the over-limit loop did not run")
	}
	if n := fn.OverLimit().Cache().Stats().Entries; n != 0 {
		t.Fatalf("a node found not Ready kept %d cache entries", n)
	}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "10s"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	fn.OverLimit().Cache().Observe(overlimit.Observation{
		ID: overLimitID("p"), Key: []byte("k"), Spec: &spec, Cost: 1, Now: fn.FSM().LastTime(),
		Decision: algo.Decision{Limit: 1, RetryAfter: 5 * time.Second, ResetAfter: 5 * time.Second},
	})
	if n := fn.OverLimit().Cache().Stats().Entries; n != 1 {
		t.Fatalf("the cache holds %d entries after a refusal, want 1", n)
	}
	if d, hit := fn.OverLimit().Refused(overLimitID("p"), "k", 1); hit {
		t.Fatalf("a node not Ready answered from its cache: %+v", d)
	}
}

// Cache entries expire in leader time. A node whose clock is behind the
// leader's (here: the log's time is an hour ahead of every node's clock)
// counts RetryAfter from the leader time it has applied, not from its own
// clock, which would stretch a 10 s window's refusal to an hour.
func TestOverLimitCacheCountsFromLeaderTime(t *testing.T) {
	cc := newSmallCachedCluster(t)
	l := cc.c.Leader()
	f := (l + 1) % 3
	// One entry stamped an hour ahead: the leader stamps every later entry
	// at least as late (leader time never runs backwards).
	ahead := time.Now().Add(time.Hour).UnixNano()
	if err := cc.c.Node(l).Raft().Apply(fsm.EncodeCheck(nil, ahead, 0, nil), clustertest.Timeout).Error(); err != nil {
		t.Fatal(err)
	}
	overLimitRefusal(t, cc, l, f)
	fn := cc.c.Node(f)
	if fn.FSM().LastTime() < ahead {
		t.Fatalf("the follower's leader time %d is before the entry's %d", fn.FSM().LastTime(), ahead)
	}
	d, hit := fn.OverLimit().Refused(overLimitID("p"), "k", 1)
	if !hit {
		t.Fatal("no cached refusal")
	}
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 10*time.Second {
		t.Fatalf("cached refusal on a node whose clock is an hour behind the leader's: %+v, want RetryAfter within the 10 s window", d)
	}
}
