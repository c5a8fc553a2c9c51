package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

// The chaos run of usage history: three limitd processes, two plans whose
// limit "w" (a fixed window of 5 s with "history":"1h") allows 20 ("free",
// the default) or 40 ("pro") per window, four keys checked by their plan
// (no policy, no limit) with request ids, well above their limits. Meanwhile
// keys are reassigned between the plans, two of them given overrides
// (limit 60) that expire within seconds, and adjusted (credits, each retried
// with its request id until answered), and each round kills -9 the leader
// and restarts it.
//
// The audit, after every unanswered request is resolved by its request id:
// per key, the usage every node reports (GET /v1/usage, every window of
// the run) equals the allowed cost the clients were answered plus the
// adjustments' applied units (0 lost, 0 counted twice); per key and window,
// the used ≤ the effective limit that can have been in force during that
// window (inForce: the plan of each assignment and the override that may
// have applied then, from the times each change was sent and answered and
// its expiry; 20 on free, 40 on pro, 60 under an override); and each closed
// window's export (GET /v1/usage/export) lists exactly the usage each key
// reports for it.
//
// scripts/chaos.sh (suite usage) runs it with LIMITD_CHAOS_ROUNDS rounds
// (default 1).

const (
	usageWindow = 5 * time.Second
	// A change's applied time is known only to lie between its send and its
	// answer; entries are stamped with the leader's time, which on this one
	// host is the test's clock but for scheduling: the margin covers that.
	usageClockMargin = 100 * time.Millisecond
)

// usageLimits are the effective limits of "w".
var usageLimits = map[string]int64{"free": 20, "pro": 40, "override": 60}

// usageChange is one reassignment or override sent by the test: applied (if
// ever) at a leader time in [sent, answered], or from sent on when never
// answered (its outcome unknown: it may be applied after a failover).
type usageChange struct {
	key, plan      string // plan "" for an override
	sent, answered time.Time
	expires        time.Time // an override's
}

// inForce is the greatest effective limit of key that can have been in
// force at some instant of [start, end): the plan of the last assignment
// certainly applied before start (or the default plan), of every
// assignment that may have applied during the window, and an override's
// 60 if one may have been live in it. The reassignments are sent one at a
// time, so answered ones applied in the order they were sent.
func inForce(changes []usageChange, key string, start, end time.Time) int64 {
	start, end = start.Add(-usageClockMargin), end.Add(usageClockMargin)
	before := "free" // the default plan
	bound := int64(0)
	for _, c := range changes {
		if c.key != key {
			continue
		}
		if c.plan == "" {
			if c.sent.Before(end) && c.expires.After(start) {
				bound = max(bound, usageLimits["override"])
			}
			continue
		}
		switch {
		case !c.answered.IsZero() && !c.answered.After(start):
			before = c.plan // applied before the window; a later one replaces it
		case c.sent.Before(end):
			bound = max(bound, usageLimits[c.plan]) // may have applied in the window (or after an unanswered failover)
		}
	}
	return max(bound, usageLimits[before])
}

type usageChaos struct {
	*crashLoad
	mu       sync.Mutex
	used     map[string]int64  // key → allowed cost answered + adjustments applied
	pending  map[string]string // request id → the body of a request not yet answered
	seq      int
	attempts int
	changes  []usageChange // reassignments and overrides, in the order sent
}

// change sends a reassignment or override and records when it was sent and
// answered.
func (u *usageChaos) change(rng *rand.Rand, c usageChange, path string, body []byte) {
	c.sent = time.Now()
	if _, ok := u.post(u.pick(rng), http.MethodPut, path, body); ok {
		c.answered = time.Now()
	}
	u.mu.Lock()
	u.changes = append(u.changes, c)
	u.mu.Unlock()
}

// post sends body to path on p: (answer, true) when the request was decided.
func (u *usageChaos) post(p *proc, method, path string, body []byte) (map[string]any, bool) {
	req, err := http.NewRequest(method, p.URL(path), bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if json.Unmarshal(data, &m) != nil || resp.StatusCode != http.StatusOK {
		if resp.StatusCode != http.StatusServiceUnavailable {
			u.oddity(fmt.Sprintf("%s %s on %s: %d %s", method, path, p.ID, resp.StatusCode, data))
		}
		return nil, false
	}
	return m, true
}

func (u *usageChaos) nextID(kind string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	return fmt.Sprintf("%s-%d", kind, u.seq)
}

// account records a decided check or adjustment once.
func (u *usageChaos) account(key, id string, m map[string]any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.pending[id]; !ok {
		return // accounted already (a replay of an answered request)
	}
	delete(u.pending, id)
	if adj, ok := m["adjusted"].(float64); ok {
		u.used[key] -= int64(adj) // a credit gives use back
		return
	}
	if m["allowed"] == true {
		u.used[key]++
	}
}

// try sends a request until decided or tries run out (left pending).
func (u *usageChaos) try(rng *rand.Rand, key, id, path string, body []byte, tries int) {
	u.mu.Lock()
	u.pending[id] = path + "\x00" + key + "\x00" + string(body)
	u.mu.Unlock()
	for i := 0; i < tries; i++ {
		u.mu.Lock()
		u.attempts++
		u.mu.Unlock()
		if m, ok := u.post(u.pick(rng), http.MethodPost, path, body); ok {
			u.account(key, id, m)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (u *usageChaos) check(rng *rand.Rand, key string) {
	id := u.nextID("c")
	body, _ := json.Marshal(map[string]any{"key": key, "cost": 1, "request_id": id})
	u.try(rng, key, id, "/v1/check", body, 3)
}

func (u *usageChaos) adjust(rng *rand.Rand, key string, add int64) {
	id := u.nextID("a")
	body, _ := json.Marshal(map[string]any{"limit": "w", "add": add, "request_id": id})
	u.try(rng, key, id, "/v1/keys/"+url.PathEscape(key)+"/adjust", body, 3)
}

// resolve retries every pending request with its request id until answered.
func (u *usageChaos) resolve(rng *rand.Rand, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		u.mu.Lock()
		var ids []string
		for id := range u.pending {
			ids = append(ids, id)
		}
		u.mu.Unlock()
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			u.mu.Lock()
			v := u.pending[id]
			u.mu.Unlock()
			parts := bytes.SplitN([]byte(v), []byte{0}, 3)
			if m, ok := u.post(u.pick(rng), http.MethodPost, string(parts[0]), parts[2]); ok {
				u.account(string(parts[1]), id, m)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.t.Fatalf("%d requests still unanswered after %s: %q; oddities: %q", len(u.pending), timeout, u.pending, u.oddities)
}

func TestUsageChaosKill9(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	if testing.Short() {
		t.Skip("starts three limitd processes and kills them -9 (the chaos run of usage history; scripts/chaos.sh SUITES=usage)")
	}
	rounds, rng, began, procs, load := startChaos(t, 1)
	u := &usageChaos{crashLoad: load, used: map[string]int64{}, pending: map[string]string{}}
	lead := load.leader(nil, 30*time.Second)
	for path, body := range map[string]string{
		"/v1/plans/free": `{"limits":{"w":{"algorithm":"fixed_window","limit":20,"window":"5s","history":"1h"}}}`,
		"/v1/plans/pro":  `{"limits":{"w":{"algorithm":"fixed_window","limit":40,"window":"5s","history":"1h"}}}`,
	} {
		if _, ok := u.post(lead, http.MethodPut, path, []byte(body)); !ok {
			t.Fatalf("PUT %s failed: %v", path, u.oddities)
		}
	}
	if _, ok := u.post(lead, http.MethodPut, "/v1/plans/default", []byte(`{"plan":"free"}`)); !ok {
		t.Fatalf("default plan: %v", u.oddities)
	}
	keys := []string{"t/0", "t/1", "t/2", "t/3"}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, k := range keys {
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				r := rand.New(rand.NewSource(seed))
				for {
					select {
					case <-stop:
						return
					default:
					}
					u.check(r, k)
					time.Sleep(time.Duration(20+r.Intn(30)) * time.Millisecond) // ~25/s per worker: above 40 per 5 s
				}
			}(int64(w*10 + i))
		}
	}
	wg.Add(1)
	go func() { // reassignments, expiring overrides, adjustments
		defer wg.Done()
		r := rand.New(rand.NewSource(99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			k := keys[r.Intn(len(keys))]
			switch r.Intn(3) {
			case 0:
				plan := []string{"free", "pro"}[r.Intn(2)]
				u.change(r, usageChange{key: k, plan: plan}, "/v1/keys/"+url.PathEscape(k)+"/plan", []byte(`{"plan":"`+plan+`"}`))
			case 1:
				// Overrides on half the keys, in the run's first 3 s only:
				// the other keys' windows, and the later windows of these,
				// are bounded by their plans' own limits (20 or 40), which
				// an override live in every window would hide — an expired
				// override still in force shows there.
				if time.Since(began) > 3*time.Second {
					continue
				}
				k = keys[r.Intn(len(keys)/2)]
				exp := time.Now().Add(time.Duration(500+r.Intn(1000)) * time.Millisecond)
				u.change(r, usageChange{key: k, expires: exp}, "/v1/keys/"+url.PathEscape(k)+"/override",
					[]byte(`{"limits":{"w":{"limit":60}},"expires":"`+exp.UTC().Format(time.RFC3339Nano)+`"}`))
			default:
				// Credits only: a debit counts beyond the limit by design,
				// which would blur the per-window bound audited below.
				u.adjust(r, k, int64(1+r.Intn(3)))
			}
		}
	}()
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers()

	for round := 0; round < rounds; round++ {
		time.Sleep(3 * time.Second)
		p := load.leader(nil, 30*time.Second)
		load.setUp(p, false)
		p.Kill()
		next := load.leader(p, 30*time.Second)
		t.Logf("round %d: killed leader %s; %s took over", round+1, p.ID, next.ID)
		time.Sleep(time.Duration(300+rng.Intn(500)) * time.Millisecond)
		p.start(crashFlags...)
		p.waitReady()
		load.setUp(p, true)
	}
	time.Sleep(2 * time.Second)
	stopWorkers()
	u.resolve(rng, 60*time.Second)
	load.waitConverged(60 * time.Second)
	time.Sleep(500 * time.Millisecond) // the reads are each node's last finished commit

	closed := map[string]map[string]int64{} // window start → key → used
	bounds := map[int64]int{}               // effective limit → windows audited under it
	for _, p := range procs {
		for _, k := range keys {
			m, ok := u.post(p, http.MethodGet, "/v1/usage?key="+url.QueryEscape(k)+"&limit=w", nil)
			if !ok {
				t.Fatalf("GET /v1/usage of %s on %s failed: %v", k, p.ID, u.oddities)
			}
			var sum int64
			for _, w := range m["windows"].([]any) {
				w := w.(map[string]any)
				used := int64(w["used"].(float64))
				ws, err := time.Parse(time.RFC3339Nano, w["start"].(string))
				must(t, err)
				if lim := inForce(u.changes, k, ws, ws.Add(usageWindow)); used > lim {
					t.Errorf("%s on %s: window %s used %d > %d, the greatest limit in force in it", k, p.ID, w["start"], used, lim)
				} else if p == procs[0] {
					bounds[lim]++
				}
				sum += used
				if w["current"] != true && p == procs[0] {
					if closed[w["start"].(string)] == nil {
						closed[w["start"].(string)] = map[string]int64{}
					}
					closed[w["start"].(string)][k] = used
				}
			}
			if sum != u.used[k] {
				t.Errorf("%s on %s: usage %d, allowed answers and adjustments %d", k, p.ID, sum, u.used[k])
			}
		}
	}
	for start, want := range closed {
		seen := map[string]int{}
		for _, plan := range []string{"free", "pro"} {
			resp, err := u.client.Get(procs[0].URL("/v1/usage/export?plan=" + plan + "&window=" + url.QueryEscape(start) + "&format=jsonl"))
			must(t, err)
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for i, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
				var row struct {
					Key  string `json:"key"`
					Used *int64 `json:"used"`
				}
				if i == 0 || json.Unmarshal(line, &row) != nil || row.Used == nil {
					continue // the header
				}
				seen[row.Key]++
				if *row.Used != want[row.Key] {
					t.Errorf("export of %s (%s): %s used %d, the key's usage says %d", start, plan, row.Key, *row.Used, want[row.Key])
				}
			}
		}
		for k, n := range want {
			if n > 0 && seen[k] != 1 {
				t.Errorf("export of %s: %s (used %d) listed %d times across the plans", start, k, n, seen[k])
			}
		}
	}
	total := int64(0)
	for _, n := range u.used {
		total += n
	}
	crashSummary(t, map[string]any{"rounds": rounds, "seconds": time.Since(began).Seconds(), "attempts": u.attempts,
		"used": total, "windows_exported": len(closed), "oddities": len(u.oddities), "windows_by_limit_in_force": fmt.Sprint(bounds)})
	if bounds[20]+bounds[40] == 0 {
		t.Errorf("no window was audited under a plan's own limit (%v): the run must exercise the bound", bounds)
	}
	if total == 0 || len(closed) == 0 {
		t.Errorf("used %d in %d closed windows: the run must exercise both", total, len(closed))
	}
}
