package cluster_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// BenchmarkRefusalFromMemory: what one refusal answered without a Raft
// round costs the service and the node, per check, for the three kinds an
// attack meets: the over-limit cache's refusal (the baseline), a banned key
// (the node's applied bans) and a deny-listed key (the compiled lists, with
// a 2,000-entry list in place). One node; the answers are checked before
// the timing. docs/BENCHMARKS.md "Refusals from memory".
func BenchmarkRefusalFromMemory(b *testing.B) {
	c := clustertest.MakeClusterOpts(b, clustertest.Options{Nodes: 1, Config: func(_ int, cfg *cluster.Config) { cfg.OverLimitEntries = 4096 }})
	n := c.Node(0)
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}.Spec()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []fsm.Policy{{Name: "ol", Spec: spec}, {Name: "ban", Spec: spec, OnExceed: nodeapi.OnExceed{Ban: time.Hour}}} {
		if err := n.Catalog().PutPolicy(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	svc := service.New(clustertest.ServiceDeps(n), service.Config{})
	entries := make([]service.ListEntry, 0, 2000)
	entries = append(entries, service.ListEntry{Key: "attacker"})
	for i := 1; i < 2000; i++ {
		entries = append(entries, service.ListEntry{Key: "other-" + string(rune('a'+i%26)) + itoa(i)})
	}
	if _, e := svc.PutList(ctx, service.ListRequest{Name: "block", Kind: service.ListDeny, Entries: entries}); e != nil {
		b.Fatal(e)
	}
	cases := []struct {
		name, policy, key string
		reason            nodeapi.Reason
	}{{"overlimit", "ol", "attacker-ol", nodeapi.ReasonNone}, {"banned", "ban", "attacker-ban", nodeapi.ReasonBanned}, {"denied", "ol", "attacker", nodeapi.ReasonDenied}}
	for _, cs := range cases {
		r := &service.CheckRequest{Key: cs.key, Policy: cs.policy, Cost: 1}
		for range 3 { // spend, refuse (cached or banned), then answered from memory
			if _, e := svc.Check(ctx, r); e != nil {
				b.Fatal(e)
			}
		}
		// The node answers from memory once its cache loop finds it Ready.
		for deadline := time.Now().Add(clustertest.Timeout); ; time.Sleep(10 * time.Millisecond) {
			before := n.FSM().AppliedIndex()
			res, e := svc.Check(ctx, r)
			if e == nil && !res.Decision.Allowed && res.Decision.Reason == cs.reason && n.FSM().AppliedIndex() == before {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: %+v %v, want a refusal (%v) answered from memory", cs.name, res.Decision, e, cs.reason)
			}
		}
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			r := &service.CheckRequest{Key: cs.key, Policy: cs.policy, Cost: 1}
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if res, e := svc.Check(ctx, r); e != nil || res.Decision.Allowed {
					b.Fatal(e)
				}
			}
			// CPU per check beside the wall time: the process's user+system
			// time (raft's background work included) over the checks.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func itoa(i int) string {
	var b [8]byte
	p := len(b)
	for ; i > 0 || p == len(b); i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}
