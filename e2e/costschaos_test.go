package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The chaos run for costs known later: three limitd processes, clients
// sending through every running node, each round kill -9 of the leader and
// its restart.
//
//   - Concurrency slots: policy "conc" (limit costsSlots, hold 2s) on one
//     key. Workers acquire (with a request id, retried until answered: a
//     retry replays the same slot), hold a while, release (retried: a
//     release is idempotent). The audit: at every instant, the acquires
//     acknowledged and not yet released or past their hold number at most
//     the limit. Each slot counts over [its acquire's answer, the earlier of
//     its release being sent and its acquire being sent + hold]: a correct
//     server holds it at least that long, so more than the limit of these
//     overlapping is an over-admission.
//   - Reserve, then settle: policy "tok" (a 10-year fixed window, a limit
//     never reached) on one key. Workers reserve an estimate of 10 (request
//     id, retried until answered), then settle at a random actual cost
//     (retried until answered: settle is exactly once, a retry replays).
//     The audit: the key's usage, read through every node after the run,
//     equals the sum of the actual costs of the acknowledged settles plus
//     the estimates of reservations whose settle never got an answer (their
//     outcome is unknown: settled, or expired at the estimate — the same
//     units either way only when the actual equals the estimate, so each
//     widens the bound by |actual − estimate|) — 0 lost, 0 counted twice.
//
// scripts/chaos.sh runs it with LIMITD_CHAOS_ROUNDS rounds (default 1).

const (
	costsSlots    = 3
	costsSlotHold = 2 * time.Second
	costsEstimate = 10
)

type costsChaos struct {
	l   *crashLoad
	rng *rand.Rand

	mu       sync.Mutex
	held     []slotSpan
	settled  int64 // Σ actual of acknowledged settles
	slack    int64 // Σ |actual − estimate| of settles never answered
	unsure   int64 // Σ estimates of reserves never answered
	acquires int
	refused  int
	settles  int
	unknown  int
	oddities []string
}

type slotSpan struct{ from, to time.Time }

// post sends body to path on a running node until a 200 answer (or gives up
// after tries), decoding it into out. ok false: the outcome is unknown.
func (cc *costsChaos) post(rng *rand.Rand, path, body string, out any, tries int) bool {
	for i := 0; i < tries; i++ {
		p := cc.l.pick(rng)
		resp, err := cc.l.client.Post(p.URL(path), "application/json", strings.NewReader(body))
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			if err := json.Unmarshal(data, out); err != nil {
				cc.oddity(fmt.Sprintf("%s %s: %q", p.ID, path, data))
				return false
			}
			return true
		case resp.StatusCode == http.StatusServiceUnavailable:
			time.Sleep(50 * time.Millisecond)
		default:
			cc.oddity(fmt.Sprintf("%s %s %s: %d %s", p.ID, path, body, resp.StatusCode, data))
			return false
		}
	}
	return false
}

func (cc *costsChaos) oddity(s string) {
	cc.mu.Lock()
	cc.oddities = append(cc.oddities, s)
	cc.mu.Unlock()
}

func (cc *costsChaos) slotWorker(id int, seed int64, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		rid := fmt.Sprintf("s%d-%d", id, n)
		sent := time.Now()
		var a struct {
			Allowed bool   `json:"allowed"`
			Slot    string `json:"slot"`
		}
		if !cc.post(rng, "/v1/check", `{"key":"job","policy":"conc","request_id":"`+rid+`"}`, &a, 40) {
			cc.mu.Lock()
			cc.unknown++
			cc.mu.Unlock()
			continue
		}
		from := time.Now()
		if !a.Allowed {
			cc.mu.Lock()
			cc.refused++
			cc.mu.Unlock()
			time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
			continue
		}
		time.Sleep(time.Duration(rng.Intn(80)) * time.Millisecond)
		released := time.Now()
		var r struct {
			Released bool `json:"released"`
		}
		cc.post(rng, "/v1/release", `{"key":"job","policy":"conc","slot":"`+a.Slot+`"}`, &r, 40)
		to := sent.Add(costsSlotHold)
		if released.Before(to) {
			to = released
		}
		cc.mu.Lock()
		cc.acquires++
		cc.held = append(cc.held, slotSpan{from, to})
		cc.mu.Unlock()
	}
}

func (cc *costsChaos) reserveWorker(id int, seed int64, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(seed))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		rid := fmt.Sprintf("r%d-%d", id, n)
		var a struct {
			Allowed     bool   `json:"allowed"`
			Reservation string `json:"reservation"`
		}
		body := fmt.Sprintf(`{"key":"acct","policy":"tok","cost":%d,"request_id":%q,"reserve":{"hold":"60s"}}`, costsEstimate, rid)
		if !cc.post(rng, "/v1/check", body, &a, 40) {
			cc.mu.Lock()
			cc.unknown++
			cc.unsure += costsEstimate
			cc.mu.Unlock()
			continue
		}
		if !a.Allowed || a.Reservation == "" {
			cc.oddity("a reserve under a limit never reached was refused")
			continue
		}
		actual := int64(rng.Intn(21))
		var s struct {
			Credited int64 `json:"credited"`
		}
		ok := cc.post(rng, "/v1/settle", fmt.Sprintf(`{"reservation":%q,"cost":%d}`, a.Reservation, actual), &s, 40)
		cc.mu.Lock()
		if ok {
			cc.settles++
			cc.settled += actual
			if s.Credited != costsEstimate-actual {
				cc.oddities = append(cc.oddities, fmt.Sprintf("settle at %d of %d credited %d", actual, costsEstimate, s.Credited))
			}
		} else {
			cc.unknown++
			cc.settled += costsEstimate // counted at the estimate …
			d := actual - costsEstimate
			if d < 0 {
				d = -d
			}
			cc.slack += d // … or at the actual
		}
		cc.mu.Unlock()
	}
}

// maxOverlap is the largest number of spans covering one instant.
func maxOverlap(spans []slotSpan) int {
	type ev struct {
		t time.Time
		d int
	}
	var evs []ev
	for _, s := range spans {
		if s.to.After(s.from) {
			evs = append(evs, ev{s.from, 1}, ev{s.to, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t.Equal(evs[j].t) {
			return evs[i].d < evs[j].d // an end before a start at the same instant
		}
		return evs[i].t.Before(evs[j].t)
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.d
		most = max(most, n)
	}
	return most
}

func TestChaosSlotsAndReservations(t *testing.T) {
	t.Parallel()
	rounds, rng, began, procs, l := startChaos(t, 1)
	cc := &costsChaos{l: l, rng: rng}
	for name, body := range map[string]string{
		"conc": fmt.Sprintf(`{"algorithm":"concurrency","limit":%d,"hold":%q}`, costsSlots, costsSlotHold),
		"tok":  `{"algorithm":"fixed_window","limit":1000000000000,"window":"87600h"}`,
	} {
		req, _ := http.NewRequest("PUT", procs[0].URL("/v1/policies/"+name), strings.NewReader(body))
		resp, err := l.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT policy %s: %s", name, resp.Status)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 5; w++ {
		wg.Add(2)
		go func(w int, s int64) { defer wg.Done(); cc.slotWorker(w, s, stop) }(w, rng.Int63())
		go func(w int, s int64) { defer wg.Done(); cc.reserveWorker(w, s, stop) }(w, rng.Int63())
	}
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers()
	for round := 0; round < rounds; round++ {
		time.Sleep(time.Duration(800+rng.Intn(700)) * time.Millisecond)
		old := l.leader(nil, 20*time.Second)
		l.setUp(old, false)
		old.Kill()
		next := l.leader(old, 20*time.Second)
		t.Logf("round %d: killed leader %s, new leader %s", round, old.ID, next.ID)
		time.Sleep(time.Duration(300+rng.Intn(500)) * time.Millisecond)
		old.start(crashFlags...)
		old.waitReady()
		l.setUp(old, true)
	}
	time.Sleep(500 * time.Millisecond)
	stopWorkers()
	l.waitConverged(30 * time.Second)

	// The key's usage through every node.
	for _, p := range procs {
		var a struct {
			Limit     int64 `json:"limit"`
			Remaining int64 `json:"remaining"`
		}
		resp, err := l.client.Post(p.URL("/v1/check"), "application/json", strings.NewReader(`{"key":"acct","policy":"tok","cost":0}`))
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		used := a.Limit - a.Remaining
		lo, hi := cc.settled-cc.slack, cc.settled+cc.slack+cc.unsure
		if used < lo || used > hi {
			t.Errorf("%s: the key used %d, the acknowledged settles say %d (bound [%d, %d])", p.ID, used, cc.settled, lo, hi)
		}
	}
	over := maxOverlap(cc.held)
	if over > costsSlots {
		t.Errorf("%d acknowledged slots held at one instant, limit %d", over, costsSlots)
	}
	crashSummary(t, map[string]any{
		"nodes": 3, "rounds": rounds, "acquires": cc.acquires, "refused_acquires": cc.refused, "max_slots_held": over,
		"settles": cc.settles, "settled_units": cc.settled, "unknown": cc.unknown, "slack": cc.slack + cc.unsure,
		"seconds": time.Since(began).Seconds(),
	})
	if cc.acquires == 0 || cc.settles == 0 || cc.refused == 0 {
		t.Errorf("acquires %d (refused %d), settles %d: the run must exercise them", cc.acquires, cc.refused, cc.settles)
	}
	for i, o := range cc.oddities {
		if i == 5 {
			t.Errorf("... %d oddities in all", len(cc.oddities))
			break
		}
		t.Error(o)
	}
}
