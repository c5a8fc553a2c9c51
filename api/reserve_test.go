package api

import (
	"strconv"
	"testing"
	"time"
)

// TestReserveSettleRefundRoutes runs costs known later through the HTTP API:
// a reserve and its settle below, at and above the estimate (the extra
// taking the key into debt, refused until it rolls), a repeated settle
// (replayed), a settle at another cost (conflict), one after the hold ended,
// an overdraft, refunds bounded by what the request spent and a refund
// after the window rolled (a no-op that says so), and the bad inputs, each
// naming its field.
func TestReserveSettleRefundRoutes(t *testing.T) {
	ts, store := newPlanServer(t)
	ts.want(ts.do("PUT", "/v1/policies/tokens", `{"algorithm":"fixed_window","limit":100,"window":"1h"}`, admin), 200, "", "")
	remaining := func(key string) int64 {
		return num(t, ts.do("POST", "/v1/check", `{"key":"`+key+`","policy":"tokens","cost":0}`).json(t), "remaining")
	}
	res := ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens","cost":60,"reserve":{"hold":"60s"}}`)
	ts.want(res, 200, "", "")
	m := res.json(t)
	rsv, _ := m["reservation"].(string)
	if m["allowed"] != true || rsv == "" || num(t, m, "reservation_expires_ms") != 60000 || num(t, m, "remaining") != 40 {
		t.Fatalf("reserve: %s", res.body)
	}
	settle := func(cost int64) response {
		return ts.do("POST", "/v1/settle", `{"reservation":"`+rsv+`","cost":`+strconv.FormatInt(cost, 10)+`}`)
	}
	// Settled below the estimate: the difference comes back.
	if r := settle(25).json(t); num(t, r, "credited") != 35 || r["rolled"] != false || num(t, r, "remaining") != 75 {
		t.Fatalf("settle at 25 of 60: %v", r)
	}
	if r := settle(25).json(t); r["replayed"] != true || num(t, r, "credited") != 35 || remaining("u") != 75 {
		t.Fatalf("a repeated settle: %v", r)
	}
	ts.want(settle(30), 409, "conflict", "cost")
	// Settled above the estimate: the extra always applies, into debt.
	m = ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens","cost":70,"reserve":{"hold":"10s"}}`).json(t)
	rsv = m["reservation"].(string)
	if r := settle(120).json(t); num(t, r, "credited") != -50 || num(t, r, "debt") != 45 || num(t, r, "remaining") != 0 {
		t.Fatalf("settle at 120 of 70: %v", r)
	}
	if r := ts.do("POST", "/v1/check", `{"key":"u","policy":"tokens"}`).json(t); r["allowed"] != false || num(t, r, "retry_after_ms") <= 0 {
		t.Fatalf("a key in debt: %v", r)
	}
	// A reservation not settled by its hold's end stays at its estimate.
	m = ts.do("POST", "/v1/check", `{"key":"v","policy":"tokens","cost":10,"reserve":{"hold":"5s"}}`).json(t)
	rsv = m["reservation"].(string)
	store.Log.Advance(5 * time.Second)
	ts.want(settle(1), 400, "invalid_argument", "reservation")
	if remaining("v") != 90 {
		t.Fatal("an ended reservation gave something back")
	}
	// An overdraft always applies.
	if r := ts.do("POST", "/v1/check", `{"key":"v","policy":"tokens","cost":150,"overdraft":true}`).json(t); r["allowed"] != true || num(t, r, "debt") != 60 {
		t.Fatalf("overdraft: %v", r)
	}
	// Refunds: at most what the request spent, in its window.
	ts.do("POST", "/v1/check", `{"key":"w","policy":"tokens","cost":30,"request_id":"job-1"}`)
	if r := ts.do("POST", "/v1/refund", `{"request_id":"job-1","cost":20}`).json(t); num(t, r, "credited") != 20 || r["rolled"] != false || remaining("w") != 90 {
		t.Fatalf("refund 20 of 30: %v", r)
	}
	ts.want(ts.do("POST", "/v1/refund", `{"request_id":"job-1","cost":11}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("PUT", "/v1/policies/minute", `{"algorithm":"fixed_window","limit":10,"window":"1m"}`, admin), 200, "", "")
	ts.do("POST", "/v1/check", `{"key":"w","policy":"minute","cost":5,"request_id":"job-2"}`)
	store.Log.Advance(time.Minute)
	if r := ts.do("POST", "/v1/refund", `{"request_id":"job-2","cost":5}`).json(t); num(t, r, "credited") != 0 || r["rolled"] != true {
		t.Fatalf("refund after the window rolled: %v", r)
	}
	ts.want(ts.do("POST", "/v1/refund", `{"request_id":"never","cost":1}`), 404, "not_found", "request_id")
	// Bad input changes nothing and names the field.
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","policy":"tokens","reserve":{}}`), 400, "invalid_argument", "reserve.hold")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","policy":"tokens","reserve":{"hold":"-1s"}}`), 400, "invalid_argument", "reserve.hold")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","policy":"tokens","cost":0,"reserve":{"hold":"1s"}}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/check", `{"key":"x","limit":{"algorithm":"sliding_log","limit":5,"window":"1m"},"overdraft":true}`), 400, "invalid_argument", "limit.algorithm")
	ts.want(ts.do("POST", "/v1/check/batch", `{"checks":[{"key":"x","policy":"tokens","overdraft":true}]}`), 200, "", "")
	ts.want(ts.do("POST", "/v1/settle", `{"reservation":"nope","cost":1}`), 400, "invalid_argument", "reservation")
	ts.want(ts.do("POST", "/v1/settle", `{"reservation":"`+rsv+`"}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/settle", `{"reservation":"`+rsv+`","cost":-1}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/refund", `{"request_id":"job-1","cost":-1}`), 400, "invalid_argument", "cost")
	ts.want(ts.do("POST", "/v1/refund", `{"cost":1}`), 400, "invalid_argument", "request_id")
	ts.want(ts.do("POST", "/v1/refund", `{"request_id":"job-1","cost":1,"key":"x"}`), 400, "invalid_argument", "key")
	// An overdraft past what the count can hold exactly: 400 naming cost.
	if r := ts.do("POST", "/v1/check", `{"key":"big","policy":"tokens","cost":1000000000000,"overdraft":true}`).json(t); r["allowed"] != true || num(t, r, "debt") != 999999999900 {
		t.Fatalf("overdraft to the bound: %v", r)
	}
	ts.want(ts.do("POST", "/v1/check", `{"key":"big","policy":"tokens","cost":1,"overdraft":true}`), 400, "invalid_argument", "cost")
	if r := ts.do("POST", "/v1/check", `{"key":"big","policy":"tokens","cost":1,"overdraft":true}`); r.code != 400 {
		t.Fatalf("the refused overflow changed the key: %s", r.body)
	}
	if remaining("x") != 100 {
		t.Fatal("bad input changed the key")
	}
}
