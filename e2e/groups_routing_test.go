package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/hashslot"
)

// groupSamples sums, per group label, the samples of metric (a name as
// /metrics prints it, before its labels) on p.
func groupSamples(t *testing.T, p *proc, metric string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(p.URL("/metrics"))
	if err != nil {
		t.Fatalf("metrics of %s: %v", p.ID, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), metric+"{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		_, g, ok := strings.Cut(labels, `group="`)
		if !ok {
			continue
		}
		g, _, _ = strings.Cut(g, `"`)
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("%s: %q", metric, sc.Text())
		}
		out[g] += f
	}
	return out
}

// startDataGroups starts three processes with --data-groups 3 (n1
// bootstraps, n2 and n3 join) and waits until each leads one data group.
func startDataGroups(t *testing.T) []*proc {
	t.Helper()
	n1 := newProc(t, "n1", "")
	n1.start("--data-groups", "3")
	n1.waitReady()
	n2 := newProc(t, "n2", n1.URL(""))
	n3 := newProc(t, "n3", n1.URL(""))
	n2.start("--data-groups", "3")
	n3.start("--data-groups", "3")
	n2.waitReady()
	n3.waitReady()
	ps := []*proc{n1, n2, n3}
	deadline := time.Now().Add(60 * time.Second)
	for {
		v := getSlots(t, ps[time.Now().Nanosecond()%3])
		ok, led := spread(v, []string{"n1", "n2", "n3"})
		if ok && len(v.Groups) == 4 {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders not spread after 60s: %v (%+v)\n%s", led, v, n1.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// groupOfKey is the group owning key's slot in v (0: none).
func groupOfKey(v slotsView, key string) uint32 {
	s := uint16(hashslot.Of(key))
	for _, g := range v.Groups {
		for _, r := range g.Slots {
			if s >= r[0] && s <= r[1] {
				return g.ID
			}
		}
	}
	return 0
}

// forwarded is the ops the data groups' followers forwarded to their
// leaders, summed over the nodes (limitd_forward_batch_ops_sum{group}).
func forwarded(t *testing.T, ps []*proc) float64 {
	total := 0.0
	for _, p := range ps {
		for g, v := range groupSamples(t, p, "limitd_forward_batch_ops_sum") {
			if g != "0" {
				total += v
			}
		}
	}
	return total
}

// Three processes with --data-groups 3: per-group metrics name each
// group's one leader (limitd_group_leader{group}, the node's metrics with a
// group label and no collision), and the Go client, routing each check to
// its group's leader by the slot map, decides every check exactly with far
// fewer forwards than the same checks sent round robin over HTTP.
func TestProcessDataGroupsClientRouting(t *testing.T) {
	t.Parallel()
	ps := startDataGroups(t)
	n1, n2, n3 := ps[0], ps[1], ps[2]

	// Per group: exactly one node reports itself its leader, the one the map names.
	v := getSlots(t, n1)
	for deadline := time.Now().Add(20 * time.Second); ; {
		leaders := map[string][]string{}
		for _, p := range ps {
			for g, f := range groupSamples(t, p, "limitd_group_leader") {
				if f == 1 {
					leaders[g] = append(leaders[g], p.ID)
				}
			}
		}
		ok := len(leaders) == 4
		for _, g := range v.Groups {
			if l := leaders[strconv.Itoa(int(g.ID))]; len(l) != 1 || l[0] != g.Leader {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("limitd_group_leader per group %v, the map %+v", leaders, v.Groups)
		}
		time.Sleep(200 * time.Millisecond)
		v = getSlots(t, n1)
	}
	for _, p := range ps {
		if a := groupSamples(t, p, "limitd_group_applied_index"); len(a) != 4 || a["1"] == 0 {
			t.Errorf("%s: limitd_group_applied_index %v", p.ID, a)
		}
		if r := groupSamples(t, p, "limitd_raft_applied_index"); len(r) != 4 {
			t.Errorf("%s: limitd_raft_applied_index per group %v, want the 4 groups", p.ID, r)
		}
	}

	if code, body := putJSON(t, n1.URL("/v1/policies/api"), `{"algorithm":"fixed_window","limit":5,"window":"`+crashWindow(30*time.Minute)+`"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	const keys, tries = 60, 6 // a limit of 5: 5 allowed, 1 refused per key
	run := func(prefix string, check func(i int, key string) (bool, error)) {
		t.Helper()
		var mu sync.Mutex
		allowed := map[string]int{}
		var wg sync.WaitGroup
		for w := 0; w < 12; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < keys*tries; i += 12 {
					key := fmt.Sprintf("%s:%d", prefix, i%keys)
					ok, err := check(i, key)
					if err != nil {
						t.Errorf("%s: %v", key, err)
						return
					}
					if ok {
						mu.Lock()
						allowed[key]++
						mu.Unlock()
					}
				}
			}(w)
		}
		wg.Wait()
		for k := 0; k < keys; k++ {
			if key := fmt.Sprintf("%s:%d", prefix, k); allowed[key] != 5 {
				t.Errorf("%s: %d allowed, want exactly 5", key, allowed[key])
			}
		}
	}

	base := forwarded(t, ps)
	run("rr", func(i int, key string) (bool, error) {
		code, b := postJSON(t, ps[i%3].URL("/v1/check"), `{"key":"`+key+`","policy":"api"}`)
		if code != 200 {
			return false, fmt.Errorf("%d %s", code, b)
		}
		return strings.Contains(string(b), `"allowed":true`), nil
	})
	roundRobin := forwarded(t, ps) - base

	c, err := client.New([]string{n1.URL(""), n2.URL(""), n3.URL("")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The first answer names the map's epoch; the client then fetches the map.
	if _, err := c.Check(ctx, client.Request{Key: "warm", Policy: "api"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	base = forwarded(t, ps)
	run("routed", func(_ int, key string) (bool, error) {
		d, err := c.Check(ctx, client.Request{Key: key, Policy: "api"})
		return d.Allowed, err
	})
	routed := forwarded(t, ps) - base
	t.Logf("ops forwarded between nodes for %d checks: HTTP round robin %.0f, the Go client routing by slot %.0f", keys*tries, roundRobin, routed)
	if roundRobin < keys*tries/3 {
		t.Fatalf("round robin forwarded only %.0f of %d checks: the metric does not count forwards", roundRobin, keys*tries)
	}
	if routed > roundRobin/4 {
		t.Fatalf("the routing client's checks were forwarded %.0f times, round robin's %.0f", routed, roundRobin)
	}
}

// Quota leases with data groups: each key's lease is granted by its own
// group, so checks of keys in every group are answered from leases on the
// node that takes them, and no key is ever allowed more than its limit.
func TestProcessDataGroupsLeases(t *testing.T) {
	t.Parallel()
	ps := startDataGroups(t)
	n1, n2 := ps[0], ps[1]
	if code, body := putJSON(t, n1.URL("/v1/policies/quota"),
		`{"algorithm":"fixed_window","limit":150,"window":"`+crashWindow(30*time.Minute)+`","lease":{"share":0.2,"max_ttl":"2s"}}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	v := getSlots(t, n1)
	groupOf := func(key string) uint32 { return groupOfKey(v, key) }
	var keys []string
	per := map[uint32]int{}
	for i := 0; len(keys) < 9; i++ {
		k := fmt.Sprintf("tenant:%d", i)
		if g := groupOf(k); per[g] < 3 {
			per[g]++
			keys = append(keys, k)
		}
	}
	const tries = 200 // more than the limit of 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := map[string]int{}
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < tries; i++ {
				code, b := postJSON(t, n2.URL("/v1/check"), `{"key":"`+k+`","policy":"quota"}`)
				if code != 200 && code != 429 {
					t.Errorf("%s: %d %s", k, code, b)
					return
				}
				if strings.Contains(string(b), `"allowed":true`) {
					mu.Lock()
					allowed[k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range keys {
		if allowed[k] > 150 || allowed[k] == 0 {
			t.Errorf("%s (group %d): %d allowed of %d, limit 150", k, groupOf(k), allowed[k], tries)
		}
	}
	answered := floodMetric(t, n2, "limitd_lease_checks_total")
	taken := floodMetric(t, n2, "limitd_leases_taken_total")
	t.Logf("n2: %v checks answered from %v leases; allowed per key %v", answered, taken, allowed)
	if answered == 0 || taken < 3 {
		t.Fatalf("leases with data groups: %v checks answered from %v leases", answered, taken)
	}
}
