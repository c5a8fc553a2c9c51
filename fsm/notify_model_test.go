package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// notifyEvent is the part of a threshold event the model predicts.
type notifyEvent struct {
	ID          string  `json:"id"`
	Type        string  `json:"type"`
	Key         string  `json:"key"`
	Policy      string  `json:"policy"`
	WindowStart string  `json:"window_start"`
	Threshold   float64 `json:"threshold"`
}

func outboxEvents(t testing.TB, f *FSM) []notifyEvent {
	t.Helper()
	var out []notifyEvent
	for _, e := range f.Outbox(0, nodeapi.MaxOutbox) {
		var ev notifyEvent
		if err := json.Unmarshal(e.Body, &ev); err != nil {
			t.Fatalf("event %s: %v: %s", e.ID, err, e.Body)
		}
		if ev.ID != e.ID {
			t.Fatalf("event body id %q, outbox id %q", ev.ID, e.ID)
		}
		out = append(out, ev)
	}
	return out
}

// TestNotifyModel drives a fixed_window policy with notify thresholds
// through random checks (single, all-or-nothing over two keys, request-id
// retries), time steps across windows, expiry sweeps and reopenings,
// against a plain model of each key's usage per window. After every entry
// the outbox must hold exactly one event per (key, window, threshold) the
// model saw crossed — none missed, none repeated, none for consumption an
// all-or-nothing op discarded or a retry replayed — and replaying the
// whole log on a fresh replica must produce the same events in the same
// order.
func TestNotifyModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := int64(rapid.IntRange(2, 8).Draw(rt, "limit"))
		spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: limit, Window: "10s"})
		var n [nodeapi.MaxNotify]uint16
		k := 0
		for _, th := range []uint16{2500, 5000, 8000, 10000} {
			if rapid.Bool().Draw(rt, fmt.Sprint("threshold ", th)) {
				n[k], k = th, k+1
			}
		}
		if k == 0 {
			n[0] = 10000
		}
		path := filepath.Join(t.TempDir(), "fsm.db")
		f := openFSM(t, path, Options{})
		d := newDriver(t, f)
		var log [][]byte
		apply := func(cmd []byte) interface{} {
			log = append(log, cmd)
			return d.apply(cmd)
		}
		if r := apply(EncodePutPolicy(Policy{Name: "p", Spec: spec, Options: nodeapi.LimitOptions{Notify: n}})); r != nil {
			rt.Fatal(r)
		}
		type window struct {
			start int64
			used  int64
		}
		used := map[string]window{}
		want := map[string]bool{} // key ‖ window start ‖ threshold
		type req struct {
			key  string
			cost int64
			at   int64
		}
		reqs := map[string]req{}
		var ids []string
		now := t0
		consume := func(key string, cost int64) {
			w := used[key]
			if start := now - now%int64(10*time.Second); w.start != start {
				w = window{start: start}
			}
			w.used += cost
			used[key] = w
			for _, th := range n {
				if th != 0 && w.used*nodeapi.NotifyScale >= int64(th)*limit {
					want[fmt.Sprintf("%s|%s|%g", key, stamp(w.start), float64(th)/nodeapi.NotifyScale)] = true
				}
			}
		}
		fits := func(key string, cost int64) bool {
			w := used[key]
			if w.start != now-now%int64(10*time.Second) {
				w.used = 0
			}
			return w.used+cost <= limit
		}
		for range rapid.IntRange(1, 50).Draw(rt, "ops") {
			now += int64(rapid.IntRange(0, 4).Draw(rt, "advance")) * int64(time.Second)
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "key")
			cost := int64(rapid.IntRange(1, 3).Draw(rt, "cost"))
			switch rapid.IntRange(0, 7).Draw(rt, "op") {
			case 0:
				apply(EncodeExpire(now, 100))
			case 1:
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				f = openFSM(t, path, Options{})
				d = newDriver(t, f)
			case 2: // all or nothing over both keys
				op := Op{All: true, Checks: []Check{{Key: "a", Policy: "p", Cost: cost}, {Key: "b", Policy: "p", Cost: cost}}}
				ok := fits("a", cost) && fits("b", cost)
				r := apply(EncodeCheck(nil, now, 0, []Op{op})).([]Result)[0]
				if r.Err != nil || r.Allowed != ok {
					rt.Fatalf("all at %d: %+v, want allowed %v", now, r, ok)
				}
				if ok {
					consume("a", cost)
					consume("b", cost)
				}
			case 3: // a retry of an earlier request
				if len(ids) == 0 {
					continue
				}
				id := rapid.SampledFrom(ids).Draw(rt, "retry")
				q := reqs[id]
				ok := fits(q.key, q.cost)
				r := apply(EncodeCheck(nil, now, 0, []Op{{RequestID: id, Checks: []Check{{Key: q.key, Policy: "p", Cost: q.cost}}}})).([]Result)[0]
				if r.Err != nil {
					rt.Fatal(r.Err)
				}
				if now < q.at+int64(DefaultRetention) {
					if !r.Replayed {
						rt.Fatalf("retry %s: not replayed", id)
					}
					continue
				}
				reqs[id] = req{q.key, q.cost, now}
				if ok {
					consume(q.key, q.cost)
				}
			default:
				op := Op{Checks: []Check{{Key: key, Policy: "p", Cost: cost}}}
				if rapid.Bool().Draw(rt, "with id") {
					op.RequestID = fmt.Sprintf("r%d", len(ids))
					ids = append(ids, op.RequestID)
					reqs[op.RequestID] = req{key, cost, now}
				}
				ok := fits(key, cost)
				r := apply(EncodeCheck(nil, now, 0, []Op{op})).([]Result)[0]
				if r.Err != nil || r.Allowed != ok {
					rt.Fatalf("check %s cost %d at %d: %+v, want allowed %v", key, cost, now, r, ok)
				}
				if ok {
					consume(key, cost)
				}
			}
			got := map[string]bool{}
			for _, e := range outboxEvents(t, f) {
				tuple := fmt.Sprintf("%s|%s|%g", e.Key, e.WindowStart, e.Threshold)
				if got[tuple] {
					rt.Fatalf("event %s repeated", tuple)
				}
				if e.Type != "threshold" || e.Policy != "p" {
					rt.Fatalf("event %+v", e)
				}
				got[tuple] = true
			}
			for w := range want {
				if !got[w] {
					rt.Fatalf("at %d: event %s missing (outbox %v)", now, w, got)
				}
			}
			for g := range got {
				if !want[g] {
					rt.Fatalf("at %d: event %s not crossed", now, g)
				}
			}
		}
		// The same log on a fresh replica: the same events, ids and order.
		fresh := newDriver(t, openFSM(t, "", Options{}))
		for _, cmd := range log {
			fresh.apply(cmd)
		}
		a, b := f.Outbox(0, nodeapi.MaxOutbox), fresh.f.Outbox(0, nodeapi.MaxOutbox)
		if len(a) != len(b) {
			rt.Fatalf("replayed log: %d events, want %d", len(b), len(a))
		}
		for i := range a {
			if a[i].ID != b[i].ID || string(a[i].Body) != string(b[i].Body) {
				rt.Fatalf("replayed log: event %d %s, want %s", i, b[i].Body, a[i].Body)
			}
		}
	})
}

// TestAckEventsRemovesOnlyAckedEvents: an ack removes the events it names,
// from the state and every replica's copy, and acking again or acking what
// is not there changes nothing.
func TestAckEventsRemovesOnlyAckedEvents(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "10s"})
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: spec, Options: nodeapi.LimitOptions{Notify: [nodeapi.MaxNotify]uint16{5000, 10000}}})
	d.one(t0, "p", "a", 2) // both thresholds at once
	d.one(t0, "p", "b", 1) // the first only
	evs := f.Outbox(0, 10)
	if len(evs) != 3 {
		t.Fatalf("outbox %d events, want 3", len(evs))
	}
	before := digest(t, f)
	d.apply(EncodeAckEvents([]uint64{evs[0].Seq, evs[2].Seq, 1 << 40}))
	left := f.Outbox(0, 10)
	if len(left) != 1 || left[0].ID != evs[1].ID {
		t.Fatalf("after ack: %+v, want only %s", left, evs[1].ID)
	}
	after := digest(t, f)
	if after == before {
		t.Fatal("ack did not change the replicated state")
	}
	d.apply(EncodeAckEvents([]uint64{evs[0].Seq}))
	if digest(t, f) != after {
		t.Fatal("a repeated ack changed the state")
	}
	if w, delivered, _ := f.OutboxStats(); w != 1 || delivered != 2 {
		t.Fatalf("stats: waiting %d delivered %d, want 1 and 2", w, delivered)
	}
}

// TestOutboxBoundDropsAndCounts: past nodeapi.MaxOutbox an event is
// dropped and counted, and its threshold does not fire again; an event
// older than nodeapi.MaxEventAgeNs is swept, counted as dropped.
func TestOutboxBoundDropsAndCounts(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: spec, Options: nodeapi.LimitOptions{Notify: [nodeapi.MaxNotify]uint16{10000}}})
	const batch = 500
	for i := 0; i <= nodeapi.MaxOutbox/batch; i++ {
		ops := make([]Op, batch)
		for j := range ops {
			ops[j] = single(fmt.Sprintf("k%d-%d", i, j), "p", 1)
		}
		d.check(t0, ops...)
	}
	w, _, dropped := f.OutboxStats()
	if w != nodeapi.MaxOutbox || dropped != batch {
		t.Fatalf("waiting %d dropped %d, want %d and %d", w, dropped, nodeapi.MaxOutbox, batch)
	}
	d.one(t0, "p", "k0-0", 1) // refused, over its limit: fired before
	if w, _, _ := f.OutboxStats(); w != nodeapi.MaxOutbox {
		t.Fatalf("a threshold fired twice: %d waiting", w)
	}
	later := t0 + nodeapi.MaxEventAgeNs + 1
	for range 4 {
		d.apply(EncodeExpire(later, 1<<20))
	}
	w, _, dropped = f.OutboxStats()
	if w != 0 || dropped != batch+nodeapi.MaxOutbox {
		t.Fatalf("after the sweep: waiting %d dropped %d", w, dropped)
	}
}

// TestPlanLimitNotifyFiresOncePerWindow: a plan limit with notify fires
// each threshold once per window, its event naming the plan limit (not a
// policy), and a refused plan check (all or nothing) fires nothing.
func TestPlanLimitNotifyFiresOncePerWindow(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 4, Window: "10s"})
	big := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 100, Window: "10s"})
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.ok(EncodePutPlan(Plan{Name: "pro", Limits: []PlanLimit{
		{Name: "burst", Spec: spec, Options: nodeapi.LimitOptions{Notify: [nodeapi.MaxNotify]uint16{5000}}},
		{Name: "daily", Spec: big},
	}}))
	d.ok(EncodeAssignPlans([]Assignment{{Key: "t", Plan: "pro"}}))
	plan := func(now, cost int64) {
		d.check(now, Op{Checks: []Check{{Key: "t", ByPlan: true, Cost: cost}}})
	}
	plan(t0, 1)
	if n := len(f.Outbox(0, 10)); n != 0 {
		t.Fatalf("%d events below the threshold", n)
	}
	plan(t0, 1)
	plan(t0, 1)
	plan(t0, 5) // refused: over burst, consumes nothing
	evs := outboxEvents(t, f)
	if len(evs) != 1 || evs[0].Policy != "" || !strings.Contains(string(f.Outbox(0, 10)[0].Body), `"plan_limit":"burst"`) {
		t.Fatalf("events %+v", evs)
	}
	plan(t0+int64(10*time.Second), 2) // the next window
	if n := len(f.Outbox(0, 10)); n != 2 {
		t.Fatalf("%d events after the next window's crossing, want 2", n)
	}
}

// TestBanPutsAnEventInTheOutbox: each ban the state machine decides is one
// "ban" event naming the key, the policy and the ban's end; the refusals
// of the banned key that follow add none.
func TestBanPutsAnEventInTheOutbox(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: spec, OnExceed: onExceed(time.Minute, 0)})
	d.one(t0, "p", "k", 1)
	d.one(t0, "p", "k", 1) // refused: banned
	d.one(t0+1, "p", "k", 1)
	evs := f.Outbox(0, 10)
	if len(evs) != 1 {
		t.Fatalf("%d events, want one ban", len(evs))
	}
	var ev struct{ ID, Type, Key, Policy, Until string }
	if err := json.Unmarshal(evs[0].Body, &ev); err != nil || ev.Type != "ban" || ev.Key != "k" || ev.Policy != "p" ||
		ev.Until != stamp(t0+int64(time.Minute)) || ev.ID != evs[0].ID {
		t.Fatalf("ban event %s (%v)", evs[0].Body, err)
	}
}

// TestWebhooksSurviveReopenAndSnapshot: webhooks are replicated
// configuration and the outbox replicated state: a reopened replica and one
// restored from a snapshot hold the same webhooks, secrets included, and
// the same events; a refused put changes nothing.
func TestWebhooksSurviveReopenAndSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	w := nodeapi.Webhook{Name: "ops", URL: "https://hooks.example/x", Secret: "0123456789abcdef"}
	d.ok(EncodePutWebhook(w))
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}),
		Options: nodeapi.LimitOptions{Notify: [nodeapi.MaxNotify]uint16{10000}}})
	d.one(t0, "p", "k", 1) // one event in the outbox
	before := digest(t, f)
	d.refused(EncodePutWebhook(nodeapi.Webhook{Name: "bad", URL: "ftp://x", Secret: "0123456789abcdef"}), CodeInvalidArgument, "url")
	if digest(t, f) != before || len(f.Webhooks()) != 1 {
		t.Fatal("a refused webhook changed the state")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, path, Options{})
	if ws := f.Webhooks(); len(ws) != 1 || ws[0] != w {
		t.Fatalf("after reopening: %+v", ws)
	}
	r := openFSM(t, "", Options{})
	restoreFrom(t, f, r)
	if ws := r.Webhooks(); len(ws) != 1 || ws[0] != w {
		t.Fatalf("after a restore: %+v", ws)
	}
	if a, b := f.Outbox(0, 10), r.Outbox(0, 10); len(a) != 1 || len(b) != 1 || a[0].ID != b[0].ID || a[0].Seq != b[0].Seq {
		t.Fatalf("outbox after a reopen %+v and a restore %+v", a, b)
	}
}

// restoreFrom restores a snapshot of src into dst.
func restoreFrom(t *testing.T, src, dst *FSM) {
	t.Helper()
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
}
