package fsm

import (
	"strconv"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
)

// The slot travels through every encoding a forwarded op and its answer
// take: ops (release and renew with their slot), results (the decision's
// slot and hold) and the request table (a replayed acquire answers its slot).
func TestSlotCodecAndReplay(t *testing.T) {
	spec := mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: 1, Hold: "10s"})
	ops := []Op{
		{Checks: []Check{{Key: "k", Spec: &spec, SlotOp: SlotRelease, Slot: "s-1"}}},
		{Checks: []Check{{Key: "k", Policy: "p", SlotOp: SlotRenew, Slot: "s-2"}}},
	}
	got, err := DecodeOps(AppendOps(nil, ops))
	if err != nil {
		t.Fatal(err)
	}
	if c := got[0].Checks[0]; c.SlotOp != SlotRelease || c.Slot != "s-1" || c.Spec == nil || *c.Spec != spec {
		t.Fatalf("release decoded as %+v", c)
	}
	if c := got[1].Checks[0]; c.SlotOp != SlotRenew || c.Slot != "s-2" || c.Policy != "p" {
		t.Fatalf("renew decoded as %+v", c)
	}
	rs := []Result{{Allowed: true, Decisions: []Decision{{Decision: algo.Decision{Allowed: true, Limit: 1}, Slot: "s-1", SlotHold: 7}}}}
	back, err := DecodeResults(AppendResults(nil, rs))
	if err != nil || back[0].Decisions[0].Slot != "s-1" || back[0].Decisions[0].SlotHold != 7 {
		t.Fatalf("results: %+v %v", back, err)
	}

	d := newDriver(t, openFSM(t, "", Options{NoSync: true}))
	acq := Op{RequestID: "r1", Checks: []Check{{Key: "k", Spec: &spec, Cost: 1}}}
	first := d.check(t0, acq)[0]
	again := d.check(t0+sec, acq)[0]
	if !first.Allowed || first.Decisions[0].Slot != "r1" || !again.Replayed || again.Decisions[0].Slot != "r1" {
		t.Fatalf("acquire %+v, its retry %+v", first, again)
	}
	// An all-or-nothing group refused by its rate limit holds no slot.
	fw := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	group := Op{All: true, Checks: []Check{{Key: "g", Spec: &spec, Cost: 1}, {Key: "g", Spec: &fw, Cost: 2}}}
	r := d.check(t0+sec, group)[0]
	if r.Allowed || r.Decisions[0].Slot != "" {
		t.Fatalf("refused group: %+v", r)
	}
	if r := d.check(t0+sec, Op{Checks: []Check{{Key: "g", Spec: &spec, Cost: 0}}})[0]; r.Decisions[0].Remaining != 1 {
		t.Fatalf("the refused group took a slot: %+v", r)
	}
	// Generated ids name the entry and the op.
	r = d.check(t0+sec, Op{Checks: []Check{{Key: "g", Spec: &spec, Cost: 1}}})[0]
	if want := strconv.FormatUint(d.next-1, 10) + ".0.0"; r.Decisions[0].Slot != want {
		t.Fatalf("slot %q, want %q", r.Decisions[0].Slot, want)
	}
}

// A shadow concurrency policy holds the slots it allows (so their holders
// can release them) and consumes nothing for the ones it would refuse.
func TestSlotShadowPolicy(t *testing.T) {
	d := newDriver(t, openFSM(t, "", Options{NoSync: true}))
	d.putPolicy(Policy{Name: "c", Shadow: true, Spec: mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: 1, Hold: "10s"})})
	first := d.one(t0, "c", "k", 1)
	if !first.Allowed || first.Decisions[0].Slot == "" {
		t.Fatalf("first: %+v", first)
	}
	second := d.one(t0, "c", "k", 1)
	if dd := second.Decisions[0]; !dd.Allowed || !dd.ShadowRefused || dd.Slot != "" {
		t.Fatalf("second: %+v", dd)
	}
	rel := d.check(t0, Op{Checks: []Check{{Key: "k", Policy: "c", SlotOp: SlotRelease, Slot: first.Decisions[0].Slot}}})[0]
	if !rel.Allowed || d.remaining(t0, "c", "k") != 1 {
		t.Fatalf("release: %+v", rel)
	}
}

// A concurrency limit's refusals never reach the over-limit cache: a release
// frees a slot without a check observing it, so a cached refusal could
// outlive the slot that caused it.
func TestSlotRefusalsAreNotCached(t *testing.T) {
	c := overlimit.New(overlimit.Options{MaxEntries: 1024})
	d := newDriver(t, openFSM(t, "", Options{NoSync: true, OverLimit: c}))
	spec := mustSpec(t, algo.Config{Algorithm: "concurrency", Limit: 1, Hold: "1h"})
	d.putPolicy(Policy{Name: "c", Spec: spec})
	for _, check := range []Check{{Key: "k", Policy: "c", Cost: 1}, {Key: "k", Spec: &spec, Cost: 1}} {
		d.check(t0, Op{Checks: []Check{check}})
		if r := d.check(t0+sec, Op{Checks: []Check{check}})[0]; r.Allowed {
			t.Fatalf("second acquire allowed: %+v", r)
		}
	}
	if _, ok := c.LookupString(overlimit.LimitID{Policy: true, Ident: "c"}, "k", 1, t0+2*sec); ok {
		t.Fatal("a concurrency policy's refusal was cached")
	}
	if _, ok := c.LookupString(overlimit.LimitID{Ident: string(algo.AppendSpec(nil, spec))}, "k", 1, t0+2*sec); ok {
		t.Fatal("an inline concurrency limit's refusal was cached")
	}
}
