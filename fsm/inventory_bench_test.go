package fsm

import (
	"fmt"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// BenchmarkListKeys: one page of the usage inventory over a policy of
// 1,000,000 keys, in key order and sorted by use (docs/BENCHMARKS.md,
// "Usage inventory"). The keys are written directly through apply, in
// CmdCheck entries of 10,000 checks, each key spending 1 to 100, once under
// a policy and once under a plan's limit (2,000,000 states in the file).
//
//	go test ./fsm -run '^$' -bench BenchmarkListKeys -benchtime 20x -benchmem
func BenchmarkListKeys(b *testing.B) {
	const keys, perEntry = 1_000_000, 10_000
	f := openFSM(b, "", Options{NoSync: true, CommitEvery: 16})
	d := newDriver(b, f)
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(b, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"})})
	ops := make([]Op, perEntry)
	checks := make([]Check, perEntry)
	var buf []byte
	for i := 0; i < keys; i += perEntry {
		for j := range ops {
			n := i + j
			checks[j] = Check{Key: fmt.Sprintf("user:%07d", (n*7919)%keys), Policy: "api", Cost: int64(1 + n%100)}
			ops[j].Checks = checks[j : j+1]
		}
		buf = EncodeCheck(buf[:0], t0, 0, ops)
		if rs, ok := d.apply(buf).([]Result); !ok || rs[0].Err != nil {
			b.Fatalf("entry at %d: %v", i, rs)
		}
	}
	// The same keys on a plan's limit (the default plan), whose listing
	// also reads each key's assignment and override.
	d.ok(EncodePutPlan(planOf(b, "pro", map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 1000, Window: "1h"}})))
	d.ok(EncodeSetDefaultPlan("pro"))
	for i := 0; i < keys; i += perEntry {
		for j := range ops {
			n := i + j
			checks[j] = Check{Key: fmt.Sprintf("user:%07d", (n*7919)%keys), ByPlan: true, Cost: int64(1 + n%100)}
			ops[j].Checks = checks[j : j+1]
		}
		buf = EncodeCheck(buf[:0], t0, 0, ops)
		if rs, ok := d.apply(buf).([]Result); !ok || rs[0].Err != nil {
			b.Fatalf("plan entry at %d: %v", i, rs)
		}
	}
	if err := f.Flush(); err != nil {
		b.Fatal(err)
	}
	waitCommit(b, f)
	if got := f.Stats().Keys; got != 2*keys {
		b.Fatalf("%d keys, want %d", got, 2*keys)
	}
	for _, bc := range []struct {
		name string
		q    KeysQuery
	}{
		{"order=key/limit=100", KeysQuery{Policy: "api", Limit: 100}},
		{"order=key/limit=1000/cursor", KeysQuery{Policy: "api", Limit: 1000, Cursor: encodeKeysCursor(keysCursor{key: []byte("user:0500000")})}},
		{"order=used/limit=100", KeysQuery{Policy: "api", Limit: 100, Sort: nodeapi.SortUsed}},
		{"order=used/limit=1000", KeysQuery{Policy: "api", Limit: 1000, Sort: nodeapi.SortUsed}},
		{"order=remaining/limit=100/prefix", KeysQuery{Policy: "api", Limit: 100, Sort: nodeapi.SortRemaining, Prefix: "user:01"}},
		{"plan/order=key/limit=100", KeysQuery{Plan: "pro", Limit: 100}},
		{"plan/order=used/limit=100", KeysQuery{Plan: "pro", Limit: 100, Sort: nodeapi.SortUsed}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var p KeysPage
			for b.Loop() {
				var err error
				if p, err = f.ListKeys(bc.q); err != nil {
					b.Fatal(err)
				}
			}
			if len(p.Keys) != bc.q.Limit {
				b.Fatalf("page of %d keys", len(p.Keys))
			}
		})
	}
}
