package fsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"pgregory.net/rapid"
)

func listKeys(t interface {
	Helper()
	Fatalf(string, ...any)
}, f *FSM, q KeysQuery) KeysPage {
	t.Helper()
	p, err := f.ListKeys(q)
	if err != nil {
		t.Fatalf("ListKeys(%+v): %v", q, err)
	}
	return p
}

func pageKeys(p KeysPage) []string {
	var ks []string
	for _, u := range p.Keys {
		ks = append(ks, u.Key)
	}
	return ks
}

func listErr(t *testing.T, f *FSM, q KeysQuery, code Code, field string) {
	t.Helper()
	_, err := f.ListKeys(q)
	var e *Error
	if !errors.As(err, &e) || e.Code != code || e.Field != field {
		t.Fatalf("ListKeys(%+v) = %v, want %s naming %q", q, err, code, field)
	}
}

func TestListKeysOrderPrefixCursorBounds(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"})})
	d.putPolicy(Policy{Name: "ap", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 10, Window: "1h"})})
	for i, k := range []string{"u:3", "u:1", "v:1", "u:2", "u:10"} {
		d.one(t0, "api", k, int64(i+1))
	}
	d.one(t0, "ap", "iu:9", 1) // 'p' ‖ 2 ‖ "ap" ‖ "iu:9" must not read as api's keys
	d.one(t0, "api", "peek-only", 0)

	p := listKeys(t, f, KeysQuery{Policy: "api"})
	if got := pageKeys(p); !slices.Equal(got, []string{"u:1", "u:10", "u:2", "u:3", "v:1"}) || p.Cursor != "" {
		t.Fatalf("all: %q cursor %q", got, p.Cursor)
	}
	if p.AppliedIndex != f.AppliedIndex() {
		t.Fatalf("applied index %d, want %d", p.AppliedIndex, f.AppliedIndex())
	}
	if u := p.Keys[0]; u.Used != 2 || u.Remaining != 8 || u.ResetAfter <= 0 || u.Refused != nil {
		t.Fatalf("u:1: %+v", u)
	}
	p = listKeys(t, f, KeysQuery{Policy: "api", Prefix: "u:", Limit: 2})
	if got := pageKeys(p); !slices.Equal(got, []string{"u:1", "u:10"}) || p.Cursor == "" {
		t.Fatalf("page 1: %q cursor %q", got, p.Cursor)
	}
	// The cursor is strictly after u:10 even once u:10 is gone; a page that
	// ends at the last key has no cursor.
	d.apply(EncodeResetKey(Check{Key: "u:10", Policy: "api"}))
	p = listKeys(t, f, KeysQuery{Policy: "api", Prefix: "u:", Limit: 2, Cursor: p.Cursor})
	if got := pageKeys(p); !slices.Equal(got, []string{"u:2", "u:3"}) || p.Cursor != "" {
		t.Fatalf("page 2: %q cursor %q", got, p.Cursor)
	}
	// A page that ends exactly at the last key has no cursor.
	p = listKeys(t, f, KeysQuery{Policy: "api", Prefix: "u:", Limit: 3})
	if len(p.Keys) != 3 || p.Cursor != "" {
		t.Fatalf("exact page: %+v", p)
	}
	// Expired states (not yet swept) are not listed.
	p = listKeys(t, f, KeysQuery{Policy: "api"})
	d.one(t0+2*3600*sec, "api", "w", 1)
	if p2 := listKeys(t, f, KeysQuery{Policy: "api"}); !slices.Equal(pageKeys(p2), []string{"w"}) {
		t.Fatalf("after the window: %q (before: %q)", pageKeys(p2), pageKeys(p))
	}

	listErr(t, f, KeysQuery{Policy: "nope"}, CodeNotFound, "policy")
	listErr(t, f, KeysQuery{Policy: "api", Cursor: "!!"}, CodeInvalidArgument, "cursor")
	listErr(t, f, KeysQuery{Policy: "api", Cursor: encodeKeysCursor(keysCursor{key: []byte("a")}), Sort: "used"}, CodeInvalidArgument, "cursor")
	listErr(t, f, KeysQuery{Policy: "api", Cursor: encodeKeysCursor(keysCursor{sort: "used", key: []byte("a")})}, CodeInvalidArgument, "cursor")
}

func TestListKeysSorted(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "1h"})})
	used := map[string]int64{"a": 5, "b": 9, "c": 5, "d": 1, "e": 9, "f": 3, "g": 5}
	for _, k := range sortedKeys(used) {
		d.one(t0, "api", k, used[k])
	}
	var got []string
	cur := ""
	for {
		p := listKeys(t, f, KeysQuery{Policy: "api", Sort: nodeapi.SortUsed, Limit: 3, Cursor: cur})
		for _, u := range p.Keys {
			if u.Used != used[u.Key] {
				t.Fatalf("%s used %d, want %d", u.Key, u.Used, used[u.Key])
			}
		}
		got = append(got, pageKeys(p)...)
		if cur = p.Cursor; cur == "" {
			break
		}
	}
	if want := []string{"b", "e", "a", "c", "g", "f", "d"}; !slices.Equal(got, want) {
		t.Fatalf("by used: %q, want %q", got, want)
	}
	p := listKeys(t, f, KeysQuery{Policy: "api", Sort: nodeapi.SortRemaining, Limit: 2})
	if !slices.Equal(pageKeys(p), []string{"b", "e"}) || p.Cursor == "" {
		t.Fatalf("by remaining: %+v", p)
	}
	p = listKeys(t, f, KeysQuery{Policy: "api", Sort: nodeapi.SortRefused, Limit: 7})
	if !slices.Equal(pageKeys(p), []string{"a", "b", "c", "d", "e", "f", "g"}) || p.Cursor != "" {
		t.Fatalf("by refused (unknown: key order): %+v", p)
	}
	p = listKeys(t, f, KeysQuery{Policy: "api", Sort: nodeapi.SortUsed, Prefix: "f"})
	if !slices.Equal(pageKeys(p), []string{"f"}) {
		t.Fatalf("sorted with a prefix: %+v", p)
	}
}

func TestListKeysByPlanLimit(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(planOf(t, "free", freeLimits)))
	d.ok(EncodePutPlan(planOf(t, "pro", proLimits)))
	d.ok(EncodePutPlan(planOf(t, "solo", map[string]algo.Config{"daily": {Algorithm: "fixed_window", Limit: 7, Window: "1h"}})))
	d.ok(EncodeSetDefaultPlan("free"))
	d.ok(EncodePutPrefixRule(PrefixRule{Prefix: "pro:", Plan: "pro"}))
	for _, k := range []string{"x:1", "pro:1", "x:2", "pro:2"} {
		d.planCheck(t0, k, 1)
	}
	d.ok(EncodeAssignPlans([]Assignment{{Key: "x:2", Plan: "pro"}}))
	d.ok(EncodePutOverride("pro:1", Override{Limits: []LimitOverride{{Name: "daily", Limit: 5000}}}))

	p := listKeys(t, f, KeysQuery{Plan: "pro", PlanLimit: "daily"})
	if got := pageKeys(p); !slices.Equal(got, []string{"pro:1", "pro:2", "x:2"}) {
		t.Fatalf("pro daily: %q", got)
	}
	if u := p.Keys[0]; u.Used != 1 || u.Remaining != 4999 {
		t.Fatalf("overridden pro:1: %+v", u)
	}
	if u := p.Keys[1]; u.Used != 1 || u.Remaining != 999 {
		t.Fatalf("pro:2: %+v", u)
	}
	p = listKeys(t, f, KeysQuery{Plan: "free", PlanLimit: "per_second"})
	if got := pageKeys(p); !slices.Equal(got, []string{"x:1"}) || p.Keys[0].Used != 1 {
		t.Fatalf("free per_second: %+v", p)
	}
	if p := listKeys(t, f, KeysQuery{Plan: "solo"}); len(p.Keys) != 0 { // its one limit, no keys on it
		t.Fatalf("solo: %+v", p)
	}
	listErr(t, f, KeysQuery{Plan: "pro"}, CodeInvalidArgument, "plan_limit")
	listErr(t, f, KeysQuery{Plan: "pro", PlanLimit: "monthly"}, CodeNotFound, "plan_limit")
	listErr(t, f, KeysQuery{Plan: "gold", PlanLimit: "daily"}, CodeNotFound, "plan")
}

// TestListKeysPagingModel: pages in key order with checks, resets and
// expiries between them. The invariant: no key is returned twice, and every
// key present from the first page to the last is returned.
func TestListKeysPagingModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := openFSM(t, "", Options{})
		d := newDriver(t, f)
		d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"})})
		d.putPolicy(Policy{Name: "other", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Window: "1h"})})
		keys := make([]string, 30)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%02d", i)
		}
		now := t0
		live := map[string]bool{} // the model: keys with a live state
		for _, k := range keys {
			if rapid.Bool().Draw(rt, "initial") {
				d.one(now, "api", k, 1)
				live[k] = true
			}
		}
		present := map[string]bool{} // live since the first page, without a gap
		for k := range live {
			present[k] = true
		}
		limit := rapid.IntRange(1, 7).Draw(rt, "limit")
		seen := map[string]bool{}
		cur := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				rt.Fatalf("no last page")
			}
			p := listKeys(rt, f, KeysQuery{Policy: "api", Limit: limit, Cursor: cur})
			if len(p.Keys) > limit {
				rt.Fatalf("page of %d > limit %d", len(p.Keys), limit)
			}
			for _, u := range p.Keys {
				if seen[u.Key] {
					rt.Fatalf("key %s returned twice", u.Key)
				}
				if !live[u.Key] {
					rt.Fatalf("key %s returned but not live", u.Key)
				}
				seen[u.Key] = true
			}
			if cur = p.Cursor; cur == "" {
				break
			}
			for n := rapid.IntRange(0, 6).Draw(rt, "writes"); n > 0; n-- {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				switch rapid.IntRange(0, 5).Draw(rt, "op") {
				case 0, 1, 2: // create or spend
					d.one(now, "api", k, 1)
					live[k] = true
				case 3: // reset
					d.apply(EncodeResetKey(Check{Key: k, Policy: "api"}))
					delete(live, k)
					delete(present, k)
				case 4: // every window ends: every key expires, then is swept
					// (the listing's time is the last entry's: one must carry it)
					now += 3600 * sec
					if rapid.Bool().Draw(rt, "sweep") {
						d.apply(EncodeExpire(now, 1000))
					} else {
						d.one(now, "other", "x", 1)
					}
					clear(live)
					clear(present)
				case 5:
					now += sec
				}
			}
		}
		for k := range present {
			if !seen[k] {
				rt.Fatalf("key %s present throughout was skipped", k)
			}
		}
	})
}

// TestListKeysSortedPagingModel: with no writes between pages, sorted pages
// return every listed key once, in (value, key) order, whatever the page
// size and however many keys share a value.
func TestListKeysSortedPagingModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := openFSM(t, "", Options{})
		d := newDriver(t, f)
		d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 20, Window: "1h"})})
		used := map[string]int64{}
		for i := range rapid.IntRange(0, 40).Draw(rt, "keys") {
			k := fmt.Sprintf("k%02d", i)
			used[k] = rapid.Int64Range(1, 5).Draw(rt, "used")
			d.one(t0, "api", k, used[k])
		}
		sortBy := rapid.SampledFrom([]string{nodeapi.SortUsed, nodeapi.SortRemaining, nodeapi.SortRefused}).Draw(rt, "sort")
		want := sortedKeys(used)
		slices.SortStableFunc(want, func(a, b string) int {
			switch sortBy {
			case nodeapi.SortUsed:
				return int(used[b] - used[a])
			case nodeapi.SortRemaining:
				return int((20 - used[a]) - (20 - used[b]))
			}
			return 0
		})
		limit := rapid.IntRange(1, 9).Draw(rt, "limit")
		var got []string
		cur := ""
		for range 100 {
			p := listKeys(rt, f, KeysQuery{Policy: "api", Sort: sortBy, Limit: limit, Cursor: cur})
			if len(p.Keys) > limit || p.Cursor != "" && len(p.Keys) != limit {
				rt.Fatalf("page of %d keys (limit %d), cursor %q", len(p.Keys), limit, p.Cursor)
			}
			got = append(got, pageKeys(p)...)
			if cur = p.Cursor; cur == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("sorted by %s in pages of %d: %q, want %q", sortBy, limit, got, want)
		}
	})
}
