package algo

import (
	"strings"
	"testing"
	"time"
)

func concSpec(t testing.TB, limit int64, hold, maxHold string) Spec {
	t.Helper()
	s, err := Config{Algorithm: "concurrency", Limit: limit, Hold: hold, MaxHold: maxHold}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConcurrencySlots(t *testing.T) {
	s := concSpec(t, 2, "10s", "")
	if s.MaxHold != 100*time.Second {
		t.Fatalf("max_hold default %v, want 10 × hold", s.MaxHold)
	}
	sec := int64(time.Second)
	var st []byte
	acq := func(now int64, id string) (Decision, time.Duration) {
		t.Helper()
		d, hold, next, err := Acquire(nil, &s, st, now, 1, []byte(id))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			st = next
		}
		return d, hold
	}
	if d, hold := acq(0, "a"); !d.Allowed || hold != 10*time.Second || d.Remaining != 1 {
		t.Fatalf("first acquire %+v hold %v", d, hold)
	}
	if d, _ := acq(1*sec, "b"); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("second %+v", d)
	}
	if d, hold := acq(2*sec, "a"); !d.Allowed || hold != 8*time.Second {
		t.Fatalf("a repeated acquire of a held id is that slot: %+v %v", d, hold)
	}
	d, _ := acq(2*sec, "c")
	if d.Allowed || d.RetryAfter != 8*time.Second {
		t.Fatalf("third while two held: %+v (retry_after = until a's hold ends)", d)
	}
	// Renew b at 5 s: ends at 15 s.
	ans, left, _, next, err := Renew(nil, &s, st, 5*sec, []byte("b"))
	if err != nil || ans != SlotHeld || left != 10*time.Second {
		t.Fatalf("renew: %v %v %v", ans, left, err)
	}
	st = next
	// At 10 s a's hold has ended: c gets its place.
	if d, _ := acq(10*sec, "c"); !d.Allowed {
		t.Fatalf("after a's hold ended: %+v", d)
	}
	if ids, _ := HeldSlots(&s, st, 10*sec); strings.Join(ids, ",") != "b,c" {
		t.Fatalf("held %v", ids)
	}
	// Releasing a (expired) answers freed; c released twice: held then freed; z unknown.
	for _, tc := range []struct {
		id   string
		want SlotAnswer
	}{{"a", SlotFreed}, {"c", SlotHeld}, {"c", SlotFreed}, {"z", SlotUnknown}} {
		ans, _, next, err := Release(nil, &s, st, 11*sec, []byte(tc.id))
		if err != nil || ans != tc.want {
			t.Fatalf("release %s: %v %v, want %v", tc.id, ans, err, tc.want)
		}
		st = next
	}
	// A renewed slot never outlives acquisition + max_hold.
	for now := 12 * sec; now < 200*sec; now += 9 * sec {
		ans, left, _, next, _ := Renew(nil, &s, st, now, []byte("b"))
		if ans != SlotHeld {
			if now < 101*sec {
				t.Fatalf("b lost at %v", time.Duration(now))
			}
			break
		}
		if end := now + int64(left); end > 1*sec+int64(s.MaxHold) {
			t.Fatalf("b renewed past max_hold: ends %v", time.Duration(end))
		}
		st = next
	}
	// Long after everything, the state is fresh.
	if d, _, next, _ := Acquire(nil, &s, st, 1000*sec, 0, nil); next != nil || d.Remaining != 2 {
		t.Fatalf("state after every hold and tombstone ended: %x %+v", next, d)
	}
}

func TestConcurrencyValidation(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		field string
	}{
		{Config{Algorithm: "concurrency", Limit: 2}, "hold"},
		{Config{Algorithm: "concurrency", Limit: 2, Hold: "0s"}, "hold"},
		{Config{Algorithm: "concurrency", Limit: 2, Hold: "-1s"}, "hold"},
		{Config{Algorithm: "concurrency", Limit: 2, Hold: "10s", MaxHold: "5s"}, "max_hold"},
		{Config{Algorithm: "concurrency", Limit: 0, Hold: "10s"}, "limit"},
		{Config{Algorithm: "concurrency", Limit: MaxConcurrencyLimit + 1, Hold: "10s"}, "limit"},
		{Config{Algorithm: "concurrency", Limit: 2, Hold: "10s", Window: "1s"}, "window"},
		{Config{Algorithm: "fixed_window", Limit: 2, Window: "10s", Hold: "1s"}, "hold"},
	} {
		_, err := tc.c.Spec()
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.c, err, tc.field)
		}
	}
	s := concSpec(t, 3, "30s", "2m")
	if _, _, _, err := Acquire(nil, &s, nil, 0, 2, []byte("x")); err == nil {
		t.Fatal("cost 2 acquired")
	}
	b := AppendSpec(nil, s)
	got, n, err := DecodeSpec(b)
	if err != nil || n != len(b) || got != s {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if c := s.Config(); c.Hold != "30s" || c.MaxHold != "2m" || c.Window != "" {
		t.Fatalf("config %+v", c)
	}
}
