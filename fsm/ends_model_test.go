package fsm

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
)

// TestListEndsModel: list entries end in leader time, in apply. Whatever
// the lists and sweeps, after each sweep at leader time now a list holds
// exactly its entries that end after now (or never), in their order, and
// NextExpiry is never later than the earliest end still held (so the
// leader sweeps at it and the replicated time reaches it with no check
// arriving). A reopen computes the same.
func TestListEndsModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		path := t.TempDir() + "/fsm.db"
		f := openFSM(t, path, Options{})
		d := newDriver(t, f)
		type entry struct {
			key string
			end int64 // 0: never
		}
		model := map[string][]entry{}
		now := t0
		encode := func(es []entry) []byte {
			type le struct {
				Key     string `json:"key,omitempty"`
				Expires string `json:"expires,omitempty"`
			}
			doc := struct {
				Kind    string `json:"kind"`
				Entries []le   `json:"entries"`
			}{Kind: "deny", Entries: []le{}}
			for _, e := range es {
				x := le{Key: e.key}
				if e.end != 0 {
					x.Expires = time.Unix(0, e.end).UTC().Format(time.RFC3339Nano)
				}
				doc.Entries = append(doc.Entries, x)
			}
			b, _ := json.Marshal(doc)
			return b
		}
		check := func(when string) {
			var earliest int64
			for name, es := range model {
				l, ok := f.List(name)
				if !ok {
					rt.Fatalf("%s: list %s missing", when, name)
				}
				if got, want := string(l.Config), string(encode(es)); got != want {
					rt.Fatalf("%s: list %s = %s, want %s", when, name, got, want)
				}
				for _, e := range es {
					if e.end != 0 && (earliest == 0 || e.end < earliest) {
						earliest = e.end
					}
				}
			}
			if next, ok := f.NextExpiry(); earliest != 0 && (!ok || next > earliest) {
				rt.Fatalf("%s: NextExpiry %d %v, later than the earliest end held %d", when, next, ok, earliest)
			}
		}
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0: // put a list
				name := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "name")
				var es []entry
				for j := range rapid.IntRange(0, 4).Draw(rt, "entries") {
					e := entry{key: fmt.Sprintf("k%d", j)}
					if rapid.Bool().Draw(rt, "ends") {
						e.end = now + int64(rapid.IntRange(-5, 60).Draw(rt, "end"))*int64(time.Second)
					}
					es = append(es, e)
				}
				d.apply(EncodePutList(name, encode(es)))
				model[name] = es // an entry already ended is pruned at the next sweep
				if es == nil {
					model[name] = []entry{}
				}
			case 1: // delete one
				name := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "name")
				d.apply(EncodeDeleteList(name))
				delete(model, name)
			case 2: // a sweep at leader time
				now += int64(rapid.IntRange(0, 20).Draw(rt, "advance")) * int64(time.Second)
				d.apply(EncodeExpire(now, 1000))
				now = max(now, f.LastTime())
				for name, es := range model {
					kept := []entry{}
					for _, e := range es {
						if e.end == 0 || e.end > now {
							kept = append(kept, e)
						}
					}
					model[name] = kept
				}
				check(fmt.Sprintf("step %d, sweep at %d", i, now))
			default: // a check moves the replicated time but prunes nothing
				now += int64(rapid.IntRange(0, 5).Draw(rt, "advance")) * int64(time.Second)
				d.one(now, "", "x", 0)
			}
		}
		if err := f.Close(); err != nil {
			rt.Fatal(err)
		}
		f = openFSM(t, path, Options{})
		d = newDriver(t, f)
		d.apply(EncodeExpire(now, 1000))
		for name, es := range model {
			kept := []entry{}
			for _, e := range es {
				if e.end == 0 || e.end > now {
					kept = append(kept, e)
				}
			}
			model[name] = kept
		}
		check("after reopen")
		_ = f.Close()
	})
}

// TestBanEndsAtTheSweep: a ban's end is part of NextExpiry, and the sweep
// at it drops the ban from the index (Banned, Bans) on the replicated
// time; the record stays for its offences, so the next offence escalates.
func TestBanEndsAtTheSweep(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"})
	d.putPolicy(Policy{Name: "p", Spec: spec, OnExceed: onExceed(10*time.Second, time.Hour, 20*time.Second)})
	d.one(t0, "p", "k", 1)
	if r := d.one(t0, "p", "k", 1); r.Decisions[0].Reason != ReasonBanned {
		t.Fatalf("second check: %+v, want banned", r.Decisions[0])
	}
	until := t0 + int64(10*time.Second)
	if next, ok := f.NextExpiry(); !ok || next > until {
		t.Fatalf("NextExpiry = %d %v, want at most the ban's end %d", next, ok, until)
	}
	d.apply(EncodeExpire(until-1, 1000))
	if _, ok := f.Banned("p", "k", f.LastTime()); !ok {
		t.Fatal("a sweep before the end ended the ban")
	}
	d.apply(EncodeExpire(until, 1000))
	if _, ok := f.Banned("p", "k", 0); ok {
		t.Fatal("the sweep at the ban's end left it in the index")
	}
	if bans, _ := f.Bans("", 10, 0); len(bans) != 0 {
		t.Fatalf("listed after its end: %+v", bans)
	}
	if next, ok := f.NextExpiry(); ok && next <= until {
		t.Fatalf("NextExpiry = %d still at the ended ban", next)
	}
	if r := d.one(until+int64(time.Second), "p", "k", 1); r.Decisions[0].Reason != ReasonBanned || r.Decisions[0].RetryAfter != 20*time.Second {
		t.Fatalf("the next offence: %+v, want the escalated 20s ban", r.Decisions[0])
	}
}
