package api

import (
	"testing"
	"time"
)

// TestReservationExpiryOverHTTP: a policy's "reservation_expiry" is kept and
// read back ("return"; the default "settle" is left out), a reservation
// under "return" whose hold ends unsettled gives its estimate back once, and
// a bad value, "return" on an algorithm that cannot be reserved or on a
// shadow policy, and the member on a plan's limit are 400s naming the field
// that change nothing.
func TestReservationExpiryOverHTTP(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/tok", `{"algorithm":"fixed_window","limit":100,"window":"1h","reservation_expiry":"return"}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/policies/tok", "", admin).json(t); m["reservation_expiry"] != "return" {
		t.Fatalf("get: %v", m)
	}
	ts.want(ts.do("PUT", "/v1/policies/keep", `{"algorithm":"fixed_window","limit":100,"window":"1h","reservation_expiry":"settle"}`, admin), 200, "", "")
	if m := ts.do("GET", "/v1/policies/keep", "", admin).json(t); m["reservation_expiry"] != nil {
		t.Fatalf("the default is left out: %v", m)
	}
	for _, body := range []string{
		`{"algorithm":"fixed_window","limit":100,"window":"1h","reservation_expiry":"refund"}`,
		`{"algorithm":"fixed_window","limit":100,"window":"1h","reservation_expiry":1}`,
		`{"algorithm":"sliding_log","limit":100,"window":"1h","reservation_expiry":"return"}`,
		`{"algorithm":"fixed_window","limit":100,"window":"1h","shadow":true,"reservation_expiry":"return"}`,
	} {
		ts.want(ts.do("PUT", "/v1/policies/tok", body, admin), 400, "invalid_argument", "reservation_expiry")
	}
	if m := ts.do("GET", "/v1/policies/tok", "", admin).json(t); m["reservation_expiry"] != "return" || m["algorithm"] != "fixed_window" {
		t.Fatalf("a refused put changed the policy: %v", m)
	}
	r := ts.do("PUT", "/v1/plans/p", `{"limits":{"a":{"algorithm":"fixed_window","limit":5,"window":"1h","reservation_expiry":"return"}}}`, admin)
	if r.code != 400 {
		t.Fatalf("a plan limit with reservation_expiry: %d %s", r.code, r.body)
	}

	remaining := func(policy string) int64 {
		return num(t, ts.do("POST", "/v1/check", `{"key":"u","policy":"`+policy+`","cost":0}`).json(t), "remaining")
	}
	for _, p := range []string{"tok", "keep"} {
		ts.want(ts.do("POST", "/v1/check", `{"key":"u","policy":"`+p+`","cost":30,"reserve":{"hold":"5s"}}`), 200, "", "")
	}
	if remaining("tok") != 70 || remaining("keep") != 70 {
		t.Fatal("a reserve did not spend its estimate")
	}
	store.Log.Advance(5 * time.Second)
	remaining("tok") // the entry that sweeps the ended holds
	if got := remaining("tok"); got != 100 {
		t.Fatalf("return: remaining %d after the hold's end, want the estimate back", got)
	}
	if got := remaining("keep"); got != 70 {
		t.Fatalf("settle: remaining %d after the hold's end, want it kept", got)
	}
	store.Log.Advance(time.Second)
	if got := remaining("tok"); got != 100 {
		t.Fatalf("returned twice? remaining %d", got)
	}
}
