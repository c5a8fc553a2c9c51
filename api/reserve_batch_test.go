package api

import (
	"strings"
	"testing"
)

// TestReserveAsBatchEntry: a reserve is a /v1/check/batch entry decided as
// POST /v1/check decides it — its reservation token settles it, a retry
// with its request id replays the same reservation, its bad input is an
// error naming the entry's field (never answered from the over-limit
// cache: service TestBatchReserveAlwaysTheLog) — while an overdraft stays a check of its own
// and /v1/check/all still refuses a reserve.
func TestReserveAsBatchEntry(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/tokens", `{"algorithm":"fixed_window","limit":100,"window":"1h"}`, admin), 200, "", "")
	entries := []string{
		`{"key":"u","policy":"tokens","cost":30,"request_id":"b1","reserve":{"hold":"60s"}}`,
		`{"key":"u","policy":"tokens","cost":5}`,
		`{"key":"u","policy":"tokens","cost":5,"overdraft":true}`,
		`{"key":"u","policy":"tokens","cost":5,"reserve":{"hold":"-1s"}}`,
		`{"key":"u","policy":"tokens","cost":0,"reserve":{"hold":"1s"}}`,
		`{"key":"u","limit":{"algorithm":"sliding_log","limit":5,"window":"1m"},"reserve":{"hold":"1s"}}`,
		`{"key":"u","reserve":{"hold":"1s"}}`,
	}
	before := store.Log.Entries()
	rs := results(t, ts.do("POST", "/v1/check/batch", `{"checks":[`+strings.Join(entries, ",")+`]}`))
	if got := store.Log.Entries() - before; got != 1 {
		t.Fatalf("%d log entries for one batch, want 1", got)
	}
	rsv, _ := rs[0]["reservation"].(string)
	if rs[0]["allowed"] != true || !strings.HasPrefix(rsv, "r1.") || num(t, rs[0], "reservation_expires_ms") != 60000 || num(t, rs[0], "remaining") != 70 {
		t.Fatalf("the reserve entry: %v", rs[0])
	}
	if rs[1]["reservation"] != nil || num(t, rs[1], "remaining") != 65 {
		t.Fatalf("the check beside it: %v", rs[1])
	}
	for i, field := range map[int]string{2: "checks[2].overdraft", 3: "checks[3].reserve.hold", 4: "checks[4].cost",
		5: "checks[5].limit.algorithm", 6: "checks[6].reserve"} {
		if c, f := itemError(t, rs[i]); c != "invalid_argument" || f != field {
			t.Errorf("entry %d: %q on %q, want invalid_argument on %q", i, c, f, field)
		}
	}
	// The token settles the reservation, as a single reserve's does.
	if r := ts.do("POST", "/v1/settle", `{"reservation":"`+rsv+`","cost":10}`).json(t); num(t, r, "credited") != 20 || num(t, r, "remaining") != 85 {
		t.Fatalf("settle of the batch's reservation: %v", r)
	}
	// A retried entry replays its reservation and spends nothing again.
	rs = results(t, ts.do("POST", "/v1/check/batch", `{"checks":[`+entries[0]+`]}`))
	if rs[0]["replayed"] != true || rs[0]["reservation"] != rsv {
		t.Fatalf("a retried reserve entry: %v (first %s)", rs[0], rsv)
	}
	if r := ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens","cost":0}`).json(t); num(t, r, "remaining") != 85 {
		t.Fatalf("remaining after the retry: %v", r)
	}
	// All-or-nothing groups still take no reserve.
	ts.want(ts.do("POST", "/v1/check/all", `{"checks":[`+entries[1]+`,{"key":"u","policy":"tokens","cost":5,"reserve":{"hold":"1s"}}]}`), 400, "invalid_argument", "checks[1].reserve")
}
