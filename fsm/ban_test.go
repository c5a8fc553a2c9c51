package fsm

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

func onExceed(ban time.Duration, forget time.Duration, steps ...time.Duration) OnExceed {
	o := OnExceed{Ban: ban, ForgetAfter: forget, Steps: len(steps)}
	copy(o.Escalate[:], steps)
	return o
}

// TestBanModel drives a policy with on_exceed through random checks, time
// steps, unbans, expiry sweeps and reopenings, against a plain model: a
// replica of the same limit without the option decides what the limit
// says (a banned check never reaches it, as it reaches no state), and a
// map of (offences, until) per key decides the bans. Every answer, the
// listing of bans and, at the end, a snapshot's restore must agree.
func TestBanModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: int64(rapid.IntRange(1, 3).Draw(rt, "limit")), Window: "10s"})
		steps := []time.Duration{}
		prev := time.Duration(rapid.IntRange(1, 30).Draw(rt, "ban")) * time.Second
		first := prev
		for range rapid.IntRange(0, 3).Draw(rt, "steps") {
			prev += time.Duration(rapid.IntRange(1, 60).Draw(rt, "step")) * time.Second
			steps = append(steps, prev)
		}
		forget := time.Duration(rapid.IntRange(0, 120).Draw(rt, "forget")) * time.Second
		o := onExceed(first, forget, steps...)
		path := filepath.Join(t.TempDir(), "fsm.db")
		f := openFSM(t, path, Options{})
		d := newDriver(t, f)
		ref := newDriver(t, openFSM(t, "", Options{}))
		d.putPolicy(Policy{Name: "p", Spec: spec, OnExceed: o})
		ref.putPolicy(Policy{Name: "p", Spec: spec})
		type banned struct {
			n     int
			until int64
		}
		model := map[string]banned{}
		stepOf := func(n int) time.Duration {
			all := append([]time.Duration{o.Ban}, steps...)
			return all[min(n, len(all))-1]
		}
		forgetOf := forget
		if forgetOf == 0 {
			forgetOf = stepOf(len(steps) + 1)
		}
		now := t0
		keys := []string{"a", "b"}
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			now += int64(rapid.IntRange(0, 20).Draw(rt, "advance")) * int64(time.Second)
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				r := d.apply(EncodeUnban(key, ""))
				m, had := model[key]
				remembered := had && now < m.until+int64(forgetOf)
				var e *Error
				err, _ := r.(error)
				// A record past its memory may still be in the file until
				// the sweep: unbanning it is either answer.
				if remembered && err != nil || !had && (!errors.As(err, &e) || e.Code != CodeNotFound) {
					rt.Fatalf("unban %s: %v (model %+v %v)", key, r, m, had)
				}
				delete(model, key)
				continue
			case 1:
				d.apply(EncodeExpire(now, 100))
				for k, m := range model {
					if now >= m.until+int64(forgetOf) {
						delete(model, k)
					}
				}
				continue
			case 2:
				if err := f.Close(); err != nil {
					rt.Fatal(err)
				}
				f = openFSM(t, path, Options{})
				d = newDriver(t, f)
				continue
			}
			got := d.one(now, "p", key, 1)
			if got.Err != nil {
				rt.Fatal(got.Err)
			}
			gd := got.Decisions[0]
			m := model[key]
			if m.until > now {
				if gd.Allowed || gd.Reason != nodeapi.ReasonBanned || gd.RetryAfter != time.Duration(m.until-now) {
					rt.Fatalf("%s at %d: %+v, want banned until %d", key, now, gd, m.until)
				}
				continue
			}
			want := ref.one(now, "p", key, 1).Decisions[0]
			if want.Allowed {
				if !gd.Allowed || gd.Reason != 0 || gd.Remaining != want.Remaining {
					rt.Fatalf("%s at %d: %+v, want %+v", key, now, gd, want)
				}
				continue
			}
			if now >= m.until+int64(forgetOf) {
				m.n = 0 // forgotten
			}
			m.n++
			m.until = now + int64(stepOf(m.n))
			model[key] = m
			if gd.Allowed || gd.Reason != nodeapi.ReasonBanned || gd.RetryAfter != stepOf(m.n) {
				rt.Fatalf("%s at %d: offence %d answered %+v, want a ban of %v", key, now, m.n, gd, stepOf(m.n))
			}
			bans, _ := f.Bans("", 10, now)
			found := false
			for _, b := range bans {
				if b.Key == key && b.Policy == "p" && b.Until == m.until && b.Offences == m.n {
					found = true
				}
			}
			if !found {
				rt.Fatalf("Bans() = %+v, want %s until %d after %d offences", bans, key, m.until, m.n)
			}
			if until, ok := f.Banned("p", key, now); !ok || until != m.until {
				rt.Fatalf("Banned = %d %v", until, ok)
			}
		}
		snap := takeSnapshot(t, f)
		dst := openFSM(t, "", Options{})
		if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			rt.Fatal(err)
		}
		if digest(t, dst) != digest(t, f) {
			rt.Fatal("restored digest differs")
		}
		a, _ := f.Bans("", 100, now)
		b, _ := dst.Bans("", 100, now)
		if len(a) != len(b) {
			rt.Fatalf("bans after restore %+v, before %+v", b, a)
		}
	})
}

func TestOnExceedValidation(t *testing.T) {
	for _, c := range []struct {
		o     OnExceed
		field string
	}{
		{onExceed(0, 0), "on_exceed.ban"},
		{onExceed(time.Minute, -1), "on_exceed.forget_after"},
		{onExceed(time.Minute, 0, time.Hour, time.Hour), "on_exceed.escalate[1]"},
		{onExceed(time.Minute, 0, time.Second), "on_exceed.escalate[0]"},
	} {
		if e := ValidateOnExceed(&c.o); e == nil || e.Field != c.field {
			t.Errorf("%+v: %v, want %s", c.o, e, c.field)
		}
	}
	// An invalid option in the log is an answer, not a stop.
	d := newDriver(t, openFSM(t, "", Options{}))
	p := Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"}), OnExceed: onExceed(time.Minute, 0, time.Second)}
	if err, _ := d.apply(EncodePutPolicy(p)).(error); err == nil {
		t.Fatal("an invalid on_exceed was stored")
	}
	p.OnExceed = onExceed(time.Minute, time.Hour, 2*time.Minute)
	d.putPolicy(p)
	if got, _ := d.f.Policy("p"); got.OnExceed != p.OnExceed {
		t.Fatalf("stored %+v, want %+v", got.OnExceed, p.OnExceed)
	}
}

// TestBanIndexIsBounded: past its bound the in-memory index leaves bans
// out (and says so), and apply still enforces them from the state.
func TestBanIndexIsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	f.bans.max = 2
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}), OnExceed: onExceed(time.Hour, 0)})
	for _, k := range []string{"a", "b", "c"} {
		d.one(t0, "p", k, 1)
		if r := d.one(t0, "p", k, 1); r.Decisions[0].Reason != nodeapi.ReasonBanned {
			t.Fatalf("%s: %+v", k, r)
		}
	}
	if bans, _ := f.Bans("", 10, t0); len(bans) != 2 || !f.BansUnindexed() {
		t.Fatalf("index %+v, unindexed %v", bans, f.BansUnindexed())
	}
	if _, ok := f.Banned("p", "c", t0); ok {
		t.Fatal("a ban past the bound is in the index")
	}
	if r := d.one(t0+1, "p", "c", 1); r.Decisions[0].Reason != nodeapi.ReasonBanned || r.Decisions[0].RetryAfter != time.Hour-1 {
		t.Fatalf("an unindexed ban is not enforced: %+v", r)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, path, Options{})
	if bans, _ := f.Bans("", 10, t0); len(bans) != 3 || f.BansUnindexed() {
		t.Fatalf("after reopen with the default bound: %+v", bans)
	}
}
