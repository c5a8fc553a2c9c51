package overlimit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
)

var testSpec = algo.Spec{Algorithm: algo.FixedWindow, Limit: 10, Window: 100}

func policyID(name string) LimitID { return LimitID{Policy: true, Ident: name} }

// refusal is an applied refusal of cost at now with the given retry time.
func refusal(id LimitID, key string, cost, now, retry int64) Observation {
	return Observation{ID: id, Key: []byte(key), Spec: &testSpec, Cost: cost, Now: now,
		Decision: algo.Decision{Limit: 10, Remaining: 1, ResetAfter: time.Duration(retry + 5), RetryAfter: time.Duration(retry)}}
}

func allowance(id LimitID, key string, cost, now int64) Observation {
	return Observation{ID: id, Key: []byte(key), Spec: &testSpec, Cost: cost, Now: now,
		Decision: algo.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 50}}
}

// lookup returns the retry time Lookup answers, or -1 for a miss.
func lookup(c *Cache, id LimitID, key string, cost, now int64) int64 {
	d, ok := c.Lookup(id, []byte(key), cost, now)
	if !ok {
		return -1
	}
	if d.Allowed {
		panic("the cache answered allowed")
	}
	return int64(d.RetryAfter)
}

func TestLookupAnswersCoveredCostsUntilExpiry(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "k", 3, 100, 10)) // cost ≥ 3 refused before 110
	for _, tc := range []struct {
		cost, now, want int64
	}{
		{3, 100, 10}, {3, 109, 1}, {3, 110, -1}, {3, 500, -1},
		{7, 105, 5}, // a larger cost is refused at least as long
		{2, 100, -1}, {1, 100, -1},
		{0, 100, -1},  // a peek is decided as cost 1: not covered
		{-1, 100, -1}, // never answered
		{3, 90, 20},   // a node whose clock is behind: still until the same expiry
	} {
		if got := lookup(c, p, "k", tc.cost, tc.now); got != tc.want {
			t.Errorf("cost %d at %d: retry %d, want %d", tc.cost, tc.now, got, tc.want)
		}
	}
	if got := lookup(c, p, "other", 3, 100); got != -1 {
		t.Errorf("another key: retry %d, want a miss", got)
	}
	if got := lookup(c, LimitID{Ident: "api"}, "k", 3, 100); got != -1 {
		t.Errorf("an inline limit whose encoding equals the policy name: retry %d, want a miss", got)
	}
	d, _ := c.Lookup(p, []byte("k"), 3, 104)
	want := algo.Decision{Limit: 10, Remaining: 1, RetryAfter: 6, ResetAfter: 11}
	if d != want {
		t.Errorf("decision %+v, want %+v", d, want)
	}
}

func TestPeeks(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "peeked", 0, 100, 10)) // a refused peek: cost 1 refused
	if got := lookup(c, p, "peeked", 1, 100); got != 10 {
		t.Errorf("cost 1 after a refused peek: %d, want 10", got)
	}
	c.Observe(refusal(p, "one", 1, 100, 10))
	if got := lookup(c, p, "one", 0, 100); got != 10 {
		t.Errorf("peek after a refused cost 1: %d, want 10", got)
	}
	c.Observe(allowance(p, "one", 0, 101)) // an allowed peek: cost 1 is allowed now
	if got := lookup(c, p, "one", 1, 101); got != -1 {
		t.Errorf("cost 1 after an allowed peek: %d, want a miss", got)
	}
}

func TestObserveTightens(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "k", 3, 100, 10)) // (3, 110)
	c.Observe(refusal(p, "k", 1, 100, 5))  // (1, 105): covers more costs, for less long
	if got := lookup(c, p, "k", 1, 104); got != 1 {
		t.Errorf("cost 1: %d, want 1", got)
	}
	if got := lookup(c, p, "k", 3, 106); got != -1 {
		t.Errorf("cost 3 after the smaller cost's expiry: %d, want a miss (the entry keeps the smaller cost)", got)
	}
	c.Observe(refusal(p, "k", 1, 101, 7)) // same cost, later: (1, 108)
	c.Observe(refusal(p, "k", 1, 101, 2)) // same cost, earlier expiry: kept 108
	if got := lookup(c, p, "k", 1, 107); got != 1 {
		t.Errorf("cost 1 at 107: %d, want 1", got)
	}
	c.Observe(refusal(p, "k", 2, 101, 50)) // larger cost, later expiry: smaller cost kept
	if got := lookup(c, p, "k", 2, 109); got != -1 {
		t.Errorf("cost 2 at 109: %d, want a miss", got)
	}
	c.Observe(refusal(p, "k", 4, 120, 30)) // the entry had expired at 120: replaced
	if got := lookup(c, p, "k", 4, 149); got != 1 {
		t.Errorf("cost 4 at 149: %d, want 1", got)
	}
	if got := lookup(c, p, "k", 3, 130); got != -1 {
		t.Errorf("cost 3 at 130: %d, want a miss", got)
	}
}

func TestAllowanceDropsContradictedEntry(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "k", 3, 100, 10))
	c.Observe(allowance(p, "k", 2, 101)) // a smaller cost may be allowed: the entry stands
	if got := lookup(c, p, "k", 3, 102); got != 8 {
		t.Fatalf("after an allowance of a smaller cost: %d, want 8", got)
	}
	if d, _ := c.Lookup(p, []byte("k"), 3, 102); d.Remaining != 3 || d.ResetAfter != 49 {
		t.Errorf("the allowance did not refresh remaining/reset: %+v", d)
	}
	if st := c.Stats(); st.Contradictions != 0 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	c.Observe(allowance(p, "k", 3, 102)) // cost 3 allowed before 110: the entry was wrong
	if got := lookup(c, p, "k", 3, 103); got != -1 {
		t.Fatalf("after a contradicting allowance: %d, want a miss", got)
	}
	if st := c.Stats(); st.Contradictions != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v, want 1 contradiction and no entry", st)
	}
	c.Observe(refusal(p, "k", 3, 200, 10))
	c.Observe(allowance(p, "k", 5, 300)) // after expiry: reclaimed, not a contradiction
	if st := c.Stats(); st.Contradictions != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v, want the expired entry gone without a contradiction", st)
	}
}

func TestNotCached(t *testing.T) {
	countRefused := algo.Spec{Algorithm: algo.SlidingLog, Limit: 2, Window: 10, CountRefused: true}
	p := policyID("api")
	for name, o := range map[string]Observation{
		"shadow":        func() Observation { o := refusal(p, "k", 1, 100, 10); o.Shadow = true; return o }(),
		"count_refused": func() Observation { o := refusal(p, "k", 1, 100, 10); o.Spec = &countRefused; return o }(),
		"never":         refusal(p, "k", 11, 100, int64(algo.Never)),
		"zero retry":    refusal(p, "k", 1, 100, 0),
		"uncommitted":   func() Observation { o := refusal(p, "k", 1, 100, 10); o.Uncommitted = true; return o }(),
		"long key":      refusal(p, strings.Repeat("k", MaxEntryBytes-len("api")+1), 1, 100, 10),
		"overflow":      refusal(p, "k", 1, 1<<62, 1<<62),
	} {
		c := New(Options{})
		c.Observe(o)
		if n := c.Stats().Entries; n != 0 {
			t.Errorf("%s: %d entries, want none", name, n)
		}
		if got := lookup(c, o.ID, string(o.Key), o.Cost, o.Now); got != -1 {
			t.Errorf("%s: answered %d", name, got)
		}
	}
	c := New(Options{})
	c.Observe(refusal(p, strings.Repeat("k", MaxEntryBytes-len("api")), 1, 100, 10))
	if c.Stats().Entries != 1 {
		t.Errorf("a key of exactly MaxEntryBytes with its identity was not cached")
	}
}

func TestCacheable(t *testing.T) {
	refused := algo.Decision{RetryAfter: 5}
	cr := algo.Spec{Algorithm: algo.SlidingLog, CountRefused: true}
	for _, tc := range []struct {
		spec   algo.Spec
		shadow bool
		d      algo.Decision
		want   bool
	}{
		{testSpec, false, refused, true},
		{testSpec, true, refused, false},
		{cr, false, refused, false},
		{algo.Spec{Algorithm: algo.SlidingLog}, false, refused, true},
		{testSpec, false, algo.Decision{RetryAfter: algo.Never}, false},
		{testSpec, false, algo.Decision{Allowed: true}, false},
	} {
		if got := Cacheable(&tc.spec, tc.shadow, tc.d); got != tc.want {
			t.Errorf("Cacheable(%+v, shadow %v, %+v) = %v", tc.spec, tc.shadow, tc.d, got)
		}
	}
}

func TestForget(t *testing.T) {
	c := New(Options{})
	api, web, inline := policyID("api"), policyID("web"), LimitID{Ident: "api"}
	for _, id := range []LimitID{api, web, inline} {
		for _, k := range []string{"a", "b"} {
			c.Observe(refusal(id, k, 1, 100, 10))
		}
	}
	c.Forget(api, []byte("a"))
	if lookup(c, api, "a", 1, 100) != -1 || lookup(c, api, "b", 1, 100) == -1 {
		t.Fatal("Forget dropped the wrong entries")
	}
	c.ForgetLimit(api)
	if lookup(c, api, "b", 1, 100) != -1 || lookup(c, web, "a", 1, 100) == -1 || lookup(c, inline, "a", 1, 100) == -1 {
		t.Fatal("ForgetLimit dropped the wrong entries")
	}
	if n := c.Stats().Entries; n != 4 {
		t.Fatalf("%d entries, want 4", n)
	}
	c.Clear()
	if n := c.Stats().Entries; n != 0 || lookup(c, web, "a", 1, 100) != -1 || lookup(c, inline, "b", 1, 100) != -1 {
		t.Fatalf("after Clear: %d entries", n)
	}
	c.Observe(refusal(api, "a", 1, 100, 10)) // usable again after Clear
	if lookup(c, api, "a", 1, 100) != 10 {
		t.Fatal("no entry after Clear and a new refusal")
	}
}

func TestBoundedWithClockEviction(t *testing.T) {
	c := New(Options{MaxEntries: 4})
	if c.Capacity() != 4 || len(c.shards) != 1 {
		t.Fatalf("capacity %d in %d shards", c.Capacity(), len(c.shards))
	}
	p := policyID("api")
	for i := 0; i < 4; i++ {
		c.Observe(refusal(p, fmt.Sprint(i), 1, 100, 1000))
	}
	// Keys 1 and 3 are hit: the hand passes them (clearing their bits) and
	// evicts 0, then 2.
	lookup(c, p, "1", 1, 101)
	lookup(c, p, "3", 1, 101)
	c.Observe(refusal(p, "4", 1, 102, 1000))
	c.Observe(refusal(p, "5", 1, 102, 1000))
	for k, want := range map[string]bool{"0": false, "1": true, "2": false, "3": true, "4": true, "5": true} {
		if got := lookup(c, p, k, 1, 103) != -1; got != want {
			t.Errorf("key %s cached %v, want %v", k, got, want)
		}
	}
	if st := c.Stats(); st.Entries != 4 || st.Evictions != 2 {
		t.Fatalf("stats %+v, want 4 entries, 2 evictions", st)
	}
	// The hand reclaims an expired entry even if it was hit, without
	// counting an eviction; live entries that were hit get their second chance.
	c.Clear()
	for _, k := range []string{"a", "b", "short", "c"} {
		retry := int64(1000)
		if k == "short" {
			retry = 4
		}
		c.Observe(refusal(p, k, 1, 100, retry))
		lookup(c, p, k, 1, 101)
	}
	st := c.Stats()
	c.Observe(refusal(p, "new", 1, 200, 1000))
	for k, want := range map[string]bool{"a": true, "b": true, "c": true, "short": false, "new": true} {
		if got := lookup(c, p, k, 1, 101) != -1; got != want {
			t.Errorf("key %s cached %v, want %v", k, got, want)
		}
	}
	if got := c.Stats(); got.Evictions != st.Evictions || got.Entries != 4 {
		t.Errorf("stats %+v after reclaiming an expired entry, before %+v", got, st)
	}
	for i := 0; i < 1000; i++ {
		c.Observe(refusal(p, fmt.Sprint("many", i), 1, 300, 1000))
	}
	if n := c.Stats().Entries; n != 4 {
		t.Fatalf("%d entries, bound 4", n)
	}
	// Forgotten slots are reused before the hand evicts anything.
	c.Forget(p, []byte("many999"))
	st = c.Stats()
	c.Observe(refusal(p, "again", 1, 300, 1000))
	if got := c.Stats(); got.Evictions != st.Evictions || got.Entries != 4 {
		t.Errorf("stats %+v after filling a forgotten slot, before %+v", got, st)
	}
}

func TestShardsRespectTheBound(t *testing.T) {
	for _, n := range []int{1, 255, 512, 4096, 5000, DefaultMaxEntries} {
		c := New(Options{MaxEntries: n})
		if c.Capacity() > n || c.Capacity() < n-len(c.shards)+1 {
			t.Errorf("MaxEntries %d: capacity %d in %d shards", n, c.Capacity(), len(c.shards))
		}
		p := policyID("api")
		for i := 0; i < 2*n; i++ {
			c.Observe(refusal(p, fmt.Sprint(i), 1, 100, 1000))
		}
		if got := c.Stats().Entries; got != c.Capacity() {
			t.Errorf("MaxEntries %d: %d entries after %d inserts, capacity %d", n, got, 2*n, c.Capacity())
		}
	}
	if c := New(Options{}); c.Capacity() != DefaultMaxEntries || len(c.shards) != maxShards {
		t.Errorf("default: capacity %d in %d shards", c.Capacity(), len(c.shards))
	}
}

// TestHashCollision forces two keys into one hash (by rewriting a slot's
// key in place): a lookup must compare the whole identity and key, and a
// refusal of the other key takes the slot over.
func TestHashCollision(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "a", 1, 100, 10))
	h := c.hashBytes(p, []byte("a"))
	s, _ := c.shardOf(h)
	e := &s.slots[s.index[h]]
	e.buf = append(e.buf[:e.identLen], "x"...) // now "x" lives under the hash of "a"
	if lookup(c, p, "a", 1, 100) != -1 {
		t.Fatal("a slot holding another key answered")
	}
	if _, ok := c.LookupString(p, "a", 1, 100); ok {
		t.Fatal("a slot holding another key answered LookupString")
	}
	c.Forget(p, []byte("a")) // must not drop "x"
	if c.Stats().Entries != 1 {
		t.Fatal("Forget of a colliding key dropped the other one")
	}
	c.Observe(allowance(p, "a", 1, 101)) // no contradiction with another key
	if st := c.Stats(); st.Entries != 1 || st.Contradictions != 0 {
		t.Fatalf("stats %+v", st)
	}
	c.Observe(refusal(p, "a", 1, 101, 10))
	if lookup(c, p, "a", 1, 101) != 10 || c.Stats().Entries != 1 {
		t.Fatal("the refusal did not take the slot over")
	}
	// The same key under another identity, or the same bytes as an inline
	// limit, in the slot of ("api", "a").
	e = &s.slots[s.index[h]]
	copy(e.buf, "xyz")
	if lookup(c, p, "a", 1, 101) != -1 {
		t.Fatal("a slot holding another limit's key answered")
	}
	if _, ok := c.LookupString(p, "a", 1, 101); ok {
		t.Fatal("a slot holding another limit's key answered LookupString")
	}
	copy(e.buf, "api")
	e.policy = false
	if lookup(c, p, "a", 1, 101) != -1 {
		t.Fatal("a slot holding an inline limit's key answered for a policy")
	}
}

func TestLookupStringAgrees(t *testing.T) {
	c := New(Options{})
	ids := []LimitID{policyID("api"), {Ident: "api"}, policyID("ap")}
	for i, id := range ids {
		for k := 0; k < 5; k++ {
			c.Observe(refusal(id, fmt.Sprint("k", k), int64(k%3), 100, int64(10*(i+k+1))))
		}
	}
	n := 0
	for _, id := range ids {
		for _, key := range []string{"k0", "k1", "k2", "k3", "k4", "ik0", "k", ""} {
			for cost := int64(-1); cost < 4; cost++ {
				for now := int64(95); now < 170; now += 5 {
					d1, ok1 := c.Lookup(id, []byte(key), cost, now)
					d2, ok2 := c.LookupString(id, key, cost, now)
					if d1 != d2 || ok1 != ok2 {
						t.Fatalf("%+v %q cost %d at %d: Lookup %+v %v, LookupString %+v %v", id, key, cost, now, d1, ok1, d2, ok2)
					}
					if ok1 {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no hits compared")
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	c := New(Options{})
	p := policyID("api")
	c.Observe(refusal(p, "hot", 1, 100, 1<<40))
	key, cold := []byte("hot"), []byte("cold")
	if n := testing.AllocsPerRun(100, func() { c.Lookup(p, key, 1, 101) }); n != 0 {
		t.Errorf("hit: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.Lookup(p, cold, 1, 101) }); n != 0 {
		t.Errorf("miss: %v allocations", n)
	}
	hot := string(key)
	if n := testing.AllocsPerRun(100, func() { c.LookupString(p, hot, 1, 101) }); n != 0 {
		t.Errorf("string hit: %v allocations", n)
	}
}

// TestConcurrentUse runs readers against the one writer (run with -race).
// Every answer must be a refusal that some observation justified.
func TestConcurrentUse(t *testing.T) {
	c := New(Options{MaxEntries: 1024})
	ids := []LimitID{policyID("a"), policyID("b"), {Ident: "inline"}}
	const keys = 300
	var wg sync.WaitGroup
	var forgotten atomic.Bool // set once ids[0] is forgotten for good
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := ids[i%len(ids)]
				gone := forgotten.Load() // read before the lookup
				d, ok := c.Lookup(id, []byte(fmt.Sprint((i*7+r)%keys)), int64(i%3), 100)
				if ok && (d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 50) {
					errs <- fmt.Errorf("answered %+v", d)
					return
				}
				if ok && gone && id == ids[0] {
					errs <- fmt.Errorf("hit under %+v after ForgetLimit returned", id)
					return
				}
			}
		}(r)
	}
	for i := 0; i < 20000; i++ {
		id := ids[i%len(ids)]
		k := fmt.Sprint(i % keys)
		switch i % 97 {
		case 0:
			c.ForgetLimit(id)
		case 1:
			c.Clear()
		case 2, 3, 4:
			c.Forget(id, []byte(k))
		case 5, 6, 7:
			c.Observe(allowance(id, k, 1, 90))
		default:
			c.Observe(refusal(id, k, 1+int64(i%2), 90, 10+int64(i%50)))
		}
	}
	// An invalidation is visible to every lookup that starts after it returns.
	c.ForgetLimit(ids[0])
	forgotten.Store(true)
	for i := 0; i < 20000; i++ {
		c.Observe(refusal(ids[1+i%2], fmt.Sprint(i%keys), 1, 90, 10))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Entries > c.Capacity() {
		t.Fatalf("%d entries over capacity %d", st.Entries, c.Capacity())
	}
}

func TestMetrics(t *testing.T) {
	c := New(Options{MaxEntries: 2})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	inline := LimitID{Ident: string(algo.AppendSpec(nil, testSpec))}
	c.Observe(refusal(policyID("api"), "k", 1, 100, 10))
	c.Observe(refusal(inline, "k", 1, 100, 10))
	for i := 0; i < 3; i++ {
		lookup(c, policyID("api"), "k", 1, 101)
	}
	lookup(c, inline, "k", 1, 101)
	lookup(c, policyID("api"), "missing", 1, 101)
	c.Observe(refusal(policyID("web"), "k", 1, 100, 10)) // both were hit: the hand clears both bits, then evicts "api"
	got := gather(t, reg)
	want := map[string]float64{
		"limitd_overlimit_entries":                     2,
		"limitd_overlimit_capacity":                    2,
		"limitd_overlimit_evictions_total":             1,
		"limitd_overlimit_contradictions_total":        0,
		`limitd_overlimit_hits_total{policy="api"}`:    3,
		`limitd_overlimit_hits_total{policy="inline"}`: 1,
		`limitd_overlimit_hits_total{policy="other"}`:  0,
		`limitd_overlimit_hits_total{policy="web"}`:    0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("metrics\n%v\nwant\n%v", got, want)
	}
}

func TestPolicyLabelsAreBounded(t *testing.T) {
	c := New(Options{})
	for i := 0; i < MaxPolicyLabels+10; i++ {
		id := policyID(fmt.Sprint("p", i))
		c.Observe(refusal(id, "k", 1, 100, 10))
		lookup(c, id, "k", 1, 100)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	n := 0
	for name := range gather(t, reg) {
		if strings.HasPrefix(name, "limitd_overlimit_hits_total{") {
			n++
		}
	}
	if n != MaxPolicyLabels+2 { // the policies, "inline", "other"
		t.Fatalf("%d hit series, want %d", n, MaxPolicyLabels+2)
	}
	if got := c.labels.other.total(); got != 10 {
		t.Fatalf("%d hits under %q, want 10", got, OtherLabel)
	}
	if got := c.Stats().Hits; got != MaxPolicyLabels+10 {
		t.Fatalf("%d hits, want %d", got, MaxPolicyLabels+10)
	}
}

// gather returns every sample of reg as name{label="value"} → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
