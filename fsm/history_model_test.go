package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"pgregory.net/rapid"
)

// usageModel is the specification of usage history: per key and window,
// used is the allowed cost plus a lease's units at grant less what its
// return credited, refused the refused checks; a window is kept until its
// end plus the history.
type usageModel struct {
	used, refused map[string]map[int64]int64 // key → window start → count
}

func (m *usageModel) add(key string, window, used, refused int64) {
	if m.used[key] == nil {
		m.used[key], m.refused[key] = map[int64]int64{}, map[int64]int64{}
	}
	m.used[key][window] += used
	m.refused[key][window] += refused
}

// TestUsageHistoryModel drives checks, lease grants and returns and the
// passing of time at random against usageModel, checking after each step
// that every key's kept windows and every closed window's export are the
// model's, and that no window used more than the limit.
func TestUsageHistoryModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1})
		d := newDriver(t, f)
		window := int64(time.Minute)
		history := time.Duration(rapid.Int64Range(1, 5).Draw(rt, "history windows")) * time.Minute
		limit := rapid.Int64Range(1, 20).Draw(rt, "limit")
		d.putPolicy(Policy{Name: "q", Spec: algo.Spec{Algorithm: algo.FixedWindow, Limit: limit, Window: time.Minute},
			Lease:   algo.Lease{Share: 500_000, MaxTTL: 20 * time.Second},
			Options: nodeapi.LimitOptions{History: history}})
		m := &usageModel{used: map[string]map[int64]int64{}, refused: map[string]map[int64]int64{}}
		keys := []string{"a", "b"}
		type lease struct {
			key           string
			units, window int64
		}
		leases := map[uint64]lease{}
		nextID := uint64(1)
		now := t0 - t0%window
		read := int64(0) // the last applied entry's time: what a read decides at
		for step := 0; step < 60; step++ {
			now += rapid.Int64Range(0, 20*sec).Draw(rt, "dt")
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			ws := now - now%window
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				cost := rapid.Int64Range(0, 4).Draw(rt, "cost")
				r := d.one(now, "q", key, cost)
				read = now
				if r.Err != nil {
					rt.Fatalf("check: %v", r.Err)
				}
				if cost > 0 {
					if r.Allowed {
						m.add(key, ws, cost, 0)
					} else {
						m.add(key, ws, 0, 1)
					}
				}
			case 2:
				rs := d.apply(EncodeGrantLease(nil, now, "n1", []LeaseRequest{{ID: nextID, Check: Check{Key: key, Policy: "q"}}})).([]LeaseGrant)
				read = now
				if g := rs[0]; g.Err == nil && g.Units > 0 {
					m.add(key, g.Window, g.Units, 0)
					leases[nextID] = lease{key, g.Units, g.Window}
				}
				nextID++
			case 3:
				for id, l := range leases {
					unspent := rapid.Int64Range(0, l.units).Draw(rt, "unspent")
					ns := d.apply(EncodeReturnLease(nil, now, "n1", []LeaseReturn{{ID: id, Check: Check{Key: l.key, Policy: "q"}, Unspent: unspent}})).([]int64)
					if ns[0] > unspent {
						rt.Fatalf("credited %d of %d unspent", ns[0], unspent)
					}
					m.add(l.key, l.window, -ns[0], 0)
					read = now
					delete(leases, id)
					break
				}
			}
			if read == 0 {
				continue
			}
			now, ws := read, read-read%window
			for _, k := range keys {
				h, err := f.KeyUsage(UsageQuery{Key: k, Policy: "q"})
				if err != nil {
					rt.Fatalf("KeyUsage: %v", err)
				}
				got := map[int64]string{}
				for _, w := range h.Windows {
					got[w.Start] = fmt.Sprint(w.Used, "/", w.Refused)
					if w.Current != (w.Start == ws) {
						rt.Fatalf("%s window %d current %v at %d", k, w.Start, w.Current, now)
					}
				}
				for start, used := range m.used[k] {
					if used > limit {
						rt.Fatalf("%s used %d > limit %d in window %d", k, used, limit, start)
					}
					kept := start == ws || start+window+int64(history) > now
					want := fmt.Sprint(used, "/", m.refused[k][start])
					if kept && (used != 0 || m.refused[k][start] != 0) && got[start] != want {
						rt.Fatalf("%s window %d: got %q, want %q (all: %v)", k, (start-t0)/window, got[start], want, got)
					}
				}
				for start, g := range got {
					if start != ws && g != fmt.Sprint(m.used[k][start], "/", m.refused[k][start]) {
						rt.Fatalf("%s window %d: got %q, model has none", k, start, g)
					}
				}
			}
			// An export of the previous window is every key's model row.
			if prev := ws - window; prev+window+int64(history) > now {
				rows := map[string]string{}
				err := f.ExportUsage(ExportQuery{Policy: "q", Window: prev}, func(ExportHeader) error { return nil }, func(r ExportRow) error {
					rows[r.Key] = fmt.Sprint(r.Used, "/", r.Refused)
					return nil
				})
				if err != nil {
					rt.Fatalf("export: %v", err)
				}
				for _, k := range keys {
					want := fmt.Sprint(m.used[k][prev], "/", m.refused[k][prev])
					if (m.used[k][prev] != 0 || m.refused[k][prev] != 0 || rows[k] != "") && rows[k] != want {
						rt.Fatalf("export of %s: %q, want %q", k, rows[k], want)
					}
				}
			}
		}
	})
}
