package overlimit

import (
	"maps"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
)

// The model: a state machine that decides ops the way fsm's decideOp does
// (checks in order against tentative state; shadow refusals answered allowed
// and consuming nothing; an All op stores nothing unless every check
// allowed), over named policies that change and disappear and inline limits
// identified by their canonical encoding.

type modelPolicy struct {
	spec   algo.Spec
	shadow bool
}

// modelCheck names its limit by policy name (policy != "") or inline spec.
type modelCheck struct {
	policy string
	inline *algo.Spec
	key    string
	cost   int64
}

type resolved struct {
	id      LimitID
	spec    *algo.Spec
	shadow  bool
	storage string // storage key: identity and key, as fsm builds it
}

func resolve(policies map[string]modelPolicy, c modelCheck) (resolved, bool) {
	if c.policy != "" {
		p, ok := policies[c.policy]
		if !ok {
			return resolved{}, false
		}
		return resolved{id: LimitID{Policy: true, Ident: c.policy}, spec: &p.spec, shadow: p.shadow,
			storage: "p" + c.policy + "\x00" + c.key}, true
	}
	enc := algo.AppendSpec(nil, *c.inline)
	return resolved{id: LimitID{Ident: string(enc)}, spec: c.inline, storage: "s" + string(enc) + "\x00" + c.key}, true
}

// machine is one replica's state: limiter states by storage key.
//
// skipNoOps selects the rule for decisions that consume nothing (refusals
// without count_refused, peeks). fsm today stores algo's next state for them
// (a bucket drained to now, a log pruned): equivalent under the same spec,
// but a later policy change reinterprets the stored state, so a node whose
// cache answered some refusals (and so never stored them) can then decide
// differently from one that did not. With skipNoOps such decisions store
// nothing, and the two nodes' states stay byte-identical; DESIGN.md proposes
// that rule for fsm.
type machine struct {
	states    map[string][]byte
	skipNoOps bool
}

// consumes reports whether a decision changes a key's state beyond what the
// passing of time does under the same spec.
func consumes(spec *algo.Spec, d algo.Decision, cost int64) bool {
	if cost == 0 || d.RetryAfter == algo.Never {
		return false
	}
	return d.Allowed || spec.CountRefused
}

type fataler interface {
	Fatalf(format string, args ...any)
}

type opResult struct {
	allowed bool
	decs    []algo.Decision // algo's decisions, before shadow mode
	answers []bool          // what each check answered
	obs     []Observation   // what the node's cache would observe from this op
}

// decide applies an op at now, as fsm does, and returns the decisions and
// the observations fsm would hand the cache (with the Uncommitted rule).
func (m *machine) decide(t fataler, rs []resolved, checks []modelCheck, all bool, now int64, apply bool) opResult {
	tent := map[string][]byte{}
	seen := map[string]bool{}
	var firstSeen []bool
	res := opResult{allowed: true}
	for j, r := range rs {
		st, ok := tent[r.storage]
		if !ok {
			st = m.states[r.storage]
		}
		firstSeen = append(firstSeen, !seen[r.storage])
		seen[r.storage] = true
		d, next, err := algo.Decide(nil, r.spec, st, now, checks[j].cost)
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		answer := d.Allowed
		switch {
		case r.shadow && !d.Allowed:
			answer = true
		case m.skipNoOps && !consumes(r.spec, d, checks[j].cost):
		default:
			tent[r.storage] = next
		}
		res.allowed = res.allowed && answer
		res.decs = append(res.decs, d)
		res.answers = append(res.answers, answer)
	}
	for j, r := range rs {
		res.obs = append(res.obs, Observation{
			ID: r.id, Key: []byte(checks[j].key), Spec: r.spec, Shadow: r.shadow,
			Cost: checks[j].cost, Now: now, Decision: res.decs[j],
			Uncommitted: all && !res.allowed && !firstSeen[j],
		})
	}
	if apply && (!all || res.allowed) {
		for k, v := range tent {
			if v == nil {
				delete(m.states, k)
			} else {
				m.states[k] = v
			}
		}
	}
	return res
}

func genModelSpec(t *rapid.T, label string) algo.Spec {
	a := rapid.SampledFrom(algo.Algorithms).Draw(t, label+".algorithm")
	s := algo.Spec{Algorithm: a, Limit: rapid.Int64Range(2, 6).Draw(t, label+".limit")}
	if a == algo.FixedWindow && rapid.IntRange(0, 10).Draw(t, label+".calendar?") == 5 {
		s.Calendar = algo.CalendarDay
		s.Timezone = rapid.SampledFrom([]string{"", "Europe/Paris", "America/New_York"}).Draw(t, label+".tz")
	} else {
		s.Window = time.Duration(rapid.Int64Range(4, 30).Draw(t, label+".window"))
	}
	switch a {
	case algo.SlidingLog:
		s.CountRefused = rapid.Bool().Draw(t, label+".count_refused")
	case algo.TokenBucket, algo.LeakyBucket:
		s.Burst = rapid.Int64Range(1, 6).Draw(t, label+".burst")
	}
	s, err := s.Validate()
	if err != nil {
		t.Fatalf("generated spec: %v", err)
	}
	return s
}

func genModelPolicy(t *rapid.T, label string) modelPolicy {
	return modelPolicy{spec: genModelSpec(t, label), shadow: rapid.IntRange(0, 10).Draw(t, label+".shadow?") == 5}
}

// modelEpoch is where model time starts: a real date, so calendar windows
// in zones east of UTC never start before the Unix epoch.
var modelEpoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).UnixNano()

var (
	policyNames = []string{"p0", "p1", "p2"}
	modelKeys   = []string{"a", "b"}
)

func genCheck(t *rapid.T, inline []algo.Spec) modelCheck {
	c := modelCheck{key: rapid.SampledFrom(modelKeys).Draw(t, "key")}
	if i := rapid.IntRange(0, len(policyNames)+len(inline)-1).Draw(t, "limit"); i < len(policyNames) {
		c.policy = policyNames[i]
	} else {
		c.inline = &inline[i-len(policyNames)]
	}
	// rapid favours the ends of a range; the rare cases sit in the middle.
	switch k := rapid.IntRange(0, 40).Draw(t, "cost.kind"); {
	case k == 20:
		c.cost = 7 // above every limit and burst: refused with Never
	case k >= 15 && k < 20:
		c.cost = 0 // a peek
	case k >= 21 && k < 27:
		c.cost = rapid.Int64Range(2, 3).Draw(t, "cost")
	default:
		c.cost = 1
	}
	return c
}

// genStep advances time: often not at all, often by a little, now and then
// across a window or, for calendar limits, across days.
func genStep(t *rapid.T) int64 {
	// rapid favours the ends of a range; the rare cases sit in the middle.
	switch k := rapid.IntRange(0, 60).Draw(t, "dt.kind"); {
	case k == 30:
		return rapid.Int64Range(0, int64(36*time.Hour)).Draw(t, "dt.days")
	case k > 30 && k < 36:
		return rapid.Int64Range(0, 25).Draw(t, "dt.windows")
	case k > 40:
		return rapid.Int64Range(0, 2).Draw(t, "dt")
	}
	return 0
}

// TestCachedNodeMatchesStateMachine is the exactness proof: for random traces
// over every algorithm (count_refused and shadow policies included), costs
// including peeks and costs above the limit, single checks and atomic groups,
// resets, policy puts and deletes, snapshot restores and time going forward,
// a node that answers from the cache first and decides through the state
// machine otherwise gives exactly the decisions of a node without the cache.
// Every refusal it serves from memory is one the state machine would make,
// with a retry time no later than the state machine's.
func TestCachedNodeMatchesStateMachine(t *testing.T) {
	totalHits, traces := 0, 0
	cover := map[string]int{} // what the traces exercised
	rapid.Check(t, func(t *rapid.T) {
		inline := []algo.Spec{genModelSpec(t, "inline0"), genModelSpec(t, "inline1")}
		policies := map[string]modelPolicy{}
		for _, n := range policyNames {
			policies[n] = genModelPolicy(t, n)
		}
		skip := rapid.Bool().Draw(t, "skip_no_ops")
		ref := &machine{states: map[string][]byte{}, skipNoOps: skip} // no cache
		node := &machine{states: map[string][]byte{}, skipNoOps: skip}
		// diverged: fsm's rule of today, and a policy's spec changed, so the
		// two nodes' states may now mean different things (see machine).
		diverged := false
		cache := New(Options{MaxEntries: rapid.SampledFrom([]int{2, 4, 64}).Draw(t, "max_entries")})
		type snap struct {
			ref, node map[string][]byte
			policies  map[string]modelPolicy
		}
		var snaps []snap
		now := modelEpoch + rapid.Int64Range(0, int64(48*time.Hour)).Draw(t, "start")
		hits := 0
		steps := rapid.IntRange(100, 400).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			now += genStep(t)
			switch rapid.IntRange(0, 40).Draw(t, "command") - 20 {
			case 0: // reset a key
				c := genCheck(t, inline)
				if r, ok := resolve(policies, c); ok {
					delete(ref.states, r.storage)
					delete(node.states, r.storage)
					cache.Forget(r.id, []byte(c.key))
				}
			case 1: // put a policy (new spec, same spec, shadow on or off)
				name := rapid.SampledFrom(policyNames).Draw(t, "put")
				old, existed := policies[name]
				policies[name] = genModelPolicy(t, "put."+name)
				if !existed || old.spec != policies[name].spec {
					diverged = diverged || !skip
					if skip {
						cover["spec changed, no-op rule"]++
					}
				}
				cache.ForgetLimit(LimitID{Policy: true, Ident: name})
			case 2: // delete a policy; its keys stay until they expire
				name := rapid.SampledFrom(policyNames).Draw(t, "delete")
				delete(policies, name)
				cache.ForgetLimit(LimitID{Policy: true, Ident: name})
			case 3: // snapshot
				snaps = append(snaps, snap{maps.Clone(ref.states), maps.Clone(node.states), maps.Clone(policies)})
			case 4: // restore a snapshot
				if len(snaps) == 0 {
					continue
				}
				s := snaps[rapid.IntRange(0, len(snaps)-1).Draw(t, "restore")]
				ref.states, node.states, policies = maps.Clone(s.ref), maps.Clone(s.node), maps.Clone(s.policies)
				cache.Clear()
			default: // a single check (as /v1/check and each batch entry) or an atomic group
				n, all := 1, rapid.IntRange(0, 10).Draw(t, "all?")%4 == 1
				if all {
					n = rapid.IntRange(1, 3).Draw(t, "group")
				}
				var checks []modelCheck
				var rs []resolved
				for len(checks) < n {
					c := genCheck(t, inline)
					r, ok := resolve(policies, c)
					if !ok {
						continue // unknown policy: an error on both nodes, nothing decided
					}
					checks, rs = append(checks, c), append(rs, r)
				}
				want := ref.decide(t, rs, checks, all, now, true)
				cached := -1
				var cd algo.Decision
				for j, r := range rs {
					lookup := func() (algo.Decision, bool) { return cache.Lookup(r.id, []byte(checks[j].key), checks[j].cost, now) }
					if step%2 == 1 { // the check path's form, the key as a string
						lookup = func() (algo.Decision, bool) { return cache.LookupString(r.id, checks[j].key, checks[j].cost, now) }
					}
					if d, ok := lookup(); ok {
						cached, cd = j, d
						break
					}
				}
				if cached >= 0 {
					hits++
					cover[rs[cached].spec.Algorithm.String()]++
					if checks[cached].cost == 0 {
						cover["peek"]++
					}
					if all {
						cover["group"]++
					}
					// The node's own state machine, asked without applying,
					// must refuse exactly this.
					mine := node.decide(t, rs, checks, all, now, false)
					w := mine.decs[cached]
					if mine.allowed || w.Allowed || rs[cached].shadow {
						t.Fatalf("step %d: the cache refused check %d (%+v); the node's state machine says %v: %+v (shadow %v)",
							step, cached, checks[cached], mine.allowed, mine.decs, rs[cached].shadow)
					}
					if cd.RetryAfter <= 0 || cd.RetryAfter > w.RetryAfter && w.RetryAfter != algo.Never {
						t.Fatalf("step %d: cached retry %d, state machine's %d", step, cd.RetryAfter, w.RetryAfter)
					}
					if cd.RetryAfter < w.RetryAfter {
						cover["retry below the state machine's"]++
					}
					if cd.Limit != w.Limit {
						t.Fatalf("step %d: cached limit %d, state machine's %d", step, cd.Limit, w.Limit)
					}
					// And a node without the cache refuses it too.
					switch {
					case want.allowed && !diverged:
						t.Fatalf("step %d: the cache refused check %d (%+v) that the node without it allows: %+v",
							step, cached, checks[cached], want.decs)
					case want.allowed:
						cover["refused after a spec change, allowed without the cache"]++
					}
					continue // nothing consumed, nothing observed
				}
				got := node.decide(t, rs, checks, all, now, true)
				for j := range got.decs {
					if diverged {
						break
					}
					if got.decs[j] != want.decs[j] {
						t.Fatalf("step %d check %d: node decided %+v, node without the cache %+v", step, j, got.decs[j], want.decs[j])
					}
				}
				if skip && cover["spec changed, no-op rule"] > 0 {
					cover["exact after a spec change"]++
				}
				if diverged && got.allowed != want.allowed {
					cover["decided differently after a spec change"]++
				}
				for _, o := range got.obs {
					if o.Uncommitted && !o.Decision.Allowed && Cacheable(o.Spec, o.Shadow, o.Decision) {
						cover["uncommitted refusal"]++
					}
					cache.Observe(o)
				}
			}
		}
		if st := cache.Stats(); st.Contradictions != 0 {
			t.Fatalf("%d contradictions: an allowance met an entry that should have been invalidated", st.Contradictions)
		}
		totalHits += hits
		traces++
	})
	// Guard against passing vacuously: the traces must exercise the cache.
	t.Logf("refusals served from the cache over all traces: %d; %v", totalHits, cover)
	if totalHits < 3*traces {
		t.Fatalf("only %d refusals served from the cache: the traces do not exercise it", totalHits)
	}
	for _, a := range algo.Algorithms {
		if cover[a.String()] == 0 {
			t.Errorf("no %s refusal served from the cache", a)
		}
	}
	for _, k := range []string{"peek", "group", "uncommitted refusal", "retry below the state machine's", "exact after a spec change"} {
		if cover[k] == 0 {
			t.Errorf("no case %q", k)
		}
	}
}

// invalidation is a cache write waiting to reach a lagging node.
type invalidation struct {
	observe *Observation
	forget  *resolved // key reset
	limit   *LimitID  // policy put or deleted
	clear   bool      // snapshot restored
	key     string
}

func (v invalidation) String() string {
	switch {
	case v.observe != nil:
		return "observe"
	case v.forget != nil:
		return "forget " + v.forget.storage
	case v.limit != nil:
		return "forget limit " + v.limit.Ident
	}
	return "clear"
}

// covers reports whether an undelivered invalidation could make a cached
// refusal of r stale.
func (v invalidation) covers(r resolved) bool {
	switch {
	case v.observe != nil:
		return false
	case v.forget != nil:
		return v.forget.storage == r.storage
	case v.limit != nil:
		return v.limit.Policy == r.id.Policy && v.limit.Ident == r.id.Ident
	}
	return true
}

func (v invalidation) deliver(c *Cache) {
	switch {
	case v.observe != nil:
		c.Observe(*v.observe)
	case v.forget != nil:
		c.Forget(v.forget.id, []byte(v.key))
	case v.limit != nil:
		c.ForgetLimit(*v.limit)
	default:
		c.Clear()
	}
}

// TestLaggingNodeOnlyRefusesMore is the follower's proof: its cache receives
// the applied stream (decisions, resets, policy changes, restores) in log
// order but late, while its checks that miss are decided by the leader's
// state machine. Then every refusal it serves from memory is either one the
// state machine would make right now, or one that a reset, policy change or
// restore still on its way to the node makes stale, or one that ended in
// leader time less than the node's clock lag ago (the node's clock is off by
// a skew drawn per trace: ahead, it answers only exact refusals). It never
// allows anything, so it never allows more than the state machine.
func TestLaggingNodeOnlyRefusesMore(t *testing.T) {
	totalHits, totalStale, totalSkewed, traces := 0, 0, 0, 0
	rapid.Check(t, func(t *rapid.T) {
		inline := []algo.Spec{genModelSpec(t, "inline0"), genModelSpec(t, "inline1")}
		policies := map[string]modelPolicy{}
		for _, n := range policyNames {
			policies[n] = genModelPolicy(t, n)
		}
		leader := &machine{states: map[string][]byte{}}
		cache := New(Options{MaxEntries: 64})
		// The node's clock against the leader's: behind, equal or ahead.
		skew := rapid.Int64Range(-8, 8).Draw(t, "skew")
		var pending []invalidation
		type snap struct {
			states   map[string][]byte
			policies map[string]modelPolicy
		}
		var snaps []snap
		now := modelEpoch + rapid.Int64Range(0, int64(48*time.Hour)).Draw(t, "start")
		stale, skewed, hits := 0, 0, 0
		steps := rapid.IntRange(300, 600).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			now += genStep(t)
			// Replication delivers a random prefix of what is pending.
			n := rapid.IntRange(0, len(pending)).Draw(t, "deliver")
			for _, v := range pending[:n] {
				v.deliver(cache)
			}
			pending = pending[n:]
			switch rapid.IntRange(0, 24).Draw(t, "command") - 12 {
			case 0:
				c := genCheck(t, inline)
				if r, ok := resolve(policies, c); ok {
					delete(leader.states, r.storage)
					pending = append(pending, invalidation{forget: &r, key: c.key})
				}
			case 1, 2:
				name := rapid.SampledFrom(policyNames).Draw(t, "policy")
				if rapid.Bool().Draw(t, "delete?") {
					delete(policies, name)
				} else {
					policies[name] = genModelPolicy(t, "put."+name)
				}
				pending = append(pending, invalidation{limit: &LimitID{Policy: true, Ident: name}})
			case 3:
				snaps = append(snaps, snap{maps.Clone(leader.states), maps.Clone(policies)})
			case 4:
				if len(snaps) == 0 {
					continue
				}
				s := snaps[rapid.IntRange(0, len(snaps)-1).Draw(t, "restore")]
				leader.states, policies = maps.Clone(s.states), maps.Clone(s.policies)
				pending = append(pending, invalidation{clear: true})
			default:
				n, all := 1, rapid.IntRange(0, 10).Draw(t, "all?")%4 == 1
				if all {
					n = rapid.IntRange(1, 3).Draw(t, "group")
				}
				var checks []modelCheck
				var rs []resolved
				for len(checks) < n {
					c := genCheck(t, inline)
					if r, ok := resolve(policies, c); ok {
						checks, rs = append(checks, c), append(rs, r)
					}
				}
				cached := -1
				var cd algo.Decision
				for j, r := range rs {
					if d, ok := cache.Lookup(r.id, []byte(checks[j].key), checks[j].cost, now+skew); ok {
						cached, cd = j, d
						break
					}
				}
				if cached < 0 {
					res := leader.decide(t, rs, checks, all, now, true)
					for i := range res.obs {
						pending = append(pending, invalidation{observe: &res.obs[i]})
					}
					continue
				}
				hits++
				// What the state machine would answer now (decided without applying).
				if leader.decide(t, rs, checks, all, now, false).allowed {
					explained := false
					for _, v := range pending {
						explained = explained || v.covers(rs[cached])
					}
					// The entry's expiry is now+skew+RetryAfter in leader time.
					late := skew < 0 && now+skew+int64(cd.RetryAfter) <= now
					if !explained && !late {
						t.Fatalf("step %d: refused %+v from the cache (retry %d, clock skew %d); the state machine allows it and no invalidation is pending (%v)",
							step, checks[cached], cd.RetryAfter, skew, pending)
					}
					if explained {
						stale++
					} else {
						skewed++
					}
				}
			}
		}
		for _, v := range pending {
			v.deliver(cache)
		}
		if st := cache.Stats(); st.Contradictions != 0 {
			t.Fatalf("%d contradictions with the stream delivered in order", st.Contradictions)
		}
		totalStale += stale
		totalSkewed += skewed
		totalHits += hits
		traces++
	})
	t.Logf("refusals served from the cache: %d, of which stale within the lag: %d, within the clock skew: %d", totalHits, totalStale, totalSkewed)
	if totalHits < 3*traces || totalStale == 0 {
		t.Fatalf("%d hits, %d stale: the traces do not exercise the lag", totalHits, totalStale)
	}
}

// TestModelSeesCacheHits guards the property tests against passing
// vacuously: over a fixed scenario the cache must serve refusals.
func TestModelSeesCacheHits(t *testing.T) {
	spec, err := algo.Spec{Algorithm: algo.FixedWindow, Limit: 2, Window: 10}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{})
	id := LimitID{Ident: string(algo.AppendSpec(nil, spec))}
	var state []byte
	served := 0
	for now := int64(100); now < 120; now++ {
		if _, ok := c.Lookup(id, []byte("k"), 1, now); ok {
			served++
			continue
		}
		d, next, err := algo.Decide(nil, &spec, state, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		state = next
		c.Observe(Observation{ID: id, Key: []byte("k"), Spec: &spec, Cost: 1, Now: now, Decision: d})
	}
	// Window [100,110): 2 allowed, 1 refused through the log, 7 served; same in [110,120).
	if served != 14 {
		t.Fatalf("served %d refusals from the cache, want 14", served)
	}
}

// TestRefusalWritesMatterAfterASpecChange pins down why the exactness proof
// has two rules for decisions that consume nothing (see machine): under
// fsm's rule of today, a refusal the cache answered is a state write the
// node never made, and after the policy's spec changes the node decides
// differently from one without the cache (the two carried-over states mean
// different things under the new spec). Storing nothing for such decisions
// makes the two nodes identical.
func TestRefusalWritesMatterAfterASpecChange(t *testing.T) {
	before := algo.Spec{Algorithm: algo.LeakyBucket, Limit: 2, Window: 4, Burst: 1}
	after := algo.Spec{Algorithm: algo.LeakyBucket, Limit: 3, Window: 5, Burst: 2}
	for _, skip := range []bool{false, true} {
		policies := map[string]modelPolicy{"p": {spec: before}}
		check := []modelCheck{{policy: "p", key: "k", cost: 1}}
		ref := &machine{states: map[string][]byte{}, skipNoOps: skip}
		node := &machine{states: map[string][]byte{}, skipNoOps: skip}
		cache := New(Options{})
		now := modelEpoch
		step := func(n int64, cached bool) (want, got opResult) {
			r, _ := resolve(policies, check[0])
			rs := []resolved{r}
			want = ref.decide(t, rs, check, false, n, true)
			if _, ok := cache.Lookup(r.id, []byte("k"), 1, n); ok != cached {
				t.Fatalf("skip %v at %d: cache hit %v, want %v", skip, n-now, ok, cached)
			}
			if cached {
				return want, opResult{}
			}
			got = node.decide(t, rs, check, false, n, true)
			for _, o := range got.obs {
				cache.Observe(o)
			}
			return want, got
		}
		step(now, false)  // allowed: the bucket is full
		step(now, false)  // refused until now+2: cached
		step(now+1, true) // refused from the cache; the node without it stores the bucket drained to now+1
		policies["p"] = modelPolicy{spec: after}
		cache.ForgetLimit(policyID("p"))
		want, got := step(now+1, false)
		if same := want.decs[0] == got.decs[0]; same != skip {
			t.Errorf("skip %v: after the spec change the node decided %+v, without the cache %+v", skip, got.decs[0], want.decs[0])
		}
	}
}
