package api

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type inflightAnswer struct {
	Key         string `json:"key"`
	Policy      string `json:"policy"`
	Concurrency bool   `json:"concurrency"`
	At          string `json:"at"`
	Slots       []struct {
		Slot        string `json:"slot"`
		Expires     string `json:"expires"`
		ExpiresInMS int64  `json:"expires_in_ms"`
	} `json:"slots"`
	SlotsHeld    int `json:"slots_held"`
	Reservations []struct {
		Reservation string `json:"reservation"`
		Cost        int64  `json:"cost"`
		Expires     string `json:"expires"`
		ExpiresInMS int64  `json:"expires_in_ms"`
	} `json:"reservations"`
	MoreReservations bool `json:"more_reservations"`
}

// inflightNode is leaseNode's one-node cluster with a concurrency policy
// "workers" (a slot "job-1" held by key "user/1") and a reservation of 7
// units open on "user/1" under "quota".
func inflightNode(t *testing.T, token string) (base, reservation string) {
	t.Helper()
	c := leaseNode(t, token)
	base = c.URL(0)
	if code, body := httpDo(t, "PUT", base+"/v1/policies/workers", token, `{"algorithm":"concurrency","limit":3,"hold":"5m"}`); code != 200 {
		t.Fatalf("put policy: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", base+"/v1/check", "", `{"key":"user/1","policy":"workers","request_id":"job-1"}`); code != 200 || !strings.Contains(body, `"slot":"job-1"`) {
		t.Fatalf("acquire: %d %s", code, body)
	}
	code, body := httpDo(t, "POST", base+"/v1/check", "", `{"key":"user/1","policy":"quota","cost":7,"request_id":"gen-1","reserve":{"hold":"10m"}}`)
	var r struct {
		Reservation string `json:"reservation"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != 200 || r.Reservation == "" {
		t.Fatalf("reserve: %d %s", code, body)
	}
	return base, r.Reservation
}

// readInflight polls the read until cond holds: a read sees the node's
// last commit of its state file, which may trail the answered write.
func readInflight(t *testing.T, base, token, key, query string, cond func(inflightAnswer) bool) inflightAnswer {
	t.Helper()
	var a inflightAnswer
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, body := httpDo(t, "GET", base+"/v1/keys/"+key+"/inflight?"+query, token, "")
		a = inflightAnswer{}
		if code == 200 {
			if err := json.Unmarshal([]byte(body), &a); err != nil {
				t.Fatal(err)
			}
			if cond(a) {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s/inflight?%s: %d %s", key, query, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInflightReadListsSlotsAndReservations: GET /v1/keys/{key}/inflight
// (admin) lists a key's held slot with its expiry under its concurrency
// policy, and its open reservation with its estimate and expiry under the
// other; a key with a '/' is reached as it is.
func TestInflightReadListsSlotsAndReservations(t *testing.T) {
	const token = "s3cret"
	base, res := inflightNode(t, token)
	a := readInflight(t, base, token, "user/1", "policy=workers", func(a inflightAnswer) bool { return a.SlotsHeld == 1 })
	if a.Key != "user/1" || a.Policy != "workers" || !a.Concurrency || len(a.Slots) != 1 || a.Slots[0].Slot != "job-1" ||
		a.Slots[0].ExpiresInMS <= 0 || a.Slots[0].ExpiresInMS > (5*time.Minute).Milliseconds() || len(a.Reservations) != 0 {
		t.Fatalf("slots: %+v", a)
	}
	exp, err := time.Parse(time.RFC3339Nano, a.Slots[0].Expires)
	at, err2 := time.Parse(time.RFC3339Nano, a.At)
	if err != nil || err2 != nil || abs(exp.Sub(at).Milliseconds()-a.Slots[0].ExpiresInMS) > 1 { // both times are to the ms
		t.Fatalf("expires %q at %q: %v %v", a.Slots[0].Expires, a.At, err, err2)
	}
	a = readInflight(t, base, token, url.PathEscape("user/1"), "policy=quota", func(a inflightAnswer) bool { return len(a.Reservations) == 1 })
	if a.Concurrency || len(a.Slots) != 0 || a.Reservations[0].Reservation != res || a.Reservations[0].Cost != 7 ||
		a.Reservations[0].ExpiresInMS <= 0 || a.Reservations[0].ExpiresInMS > (10*time.Minute).Milliseconds() || a.MoreReservations {
		t.Fatalf("reservations: %+v", a)
	}
	// Settled: no longer open.
	if code, body := httpDo(t, "POST", base+"/v1/settle", "", `{"reservation":"`+res+`","cost":3}`); code != 200 {
		t.Fatalf("settle: %d %s", code, body)
	}
	readInflight(t, base, token, "user/1", "policy=quota", func(a inflightAnswer) bool { return len(a.Reservations) == 0 })
	// Every read is counted by its result (other tests' reads may run at once: at least).
	counts := func() (float64, float64) {
		return testutil.ToFloat64(usageReads.WithLabelValues("inflight", "ok")), testutil.ToFloat64(usageReads.WithLabelValues("inflight", "error"))
	}
	okBefore, errBefore := counts()
	if code, _ := httpDo(t, "GET", base+"/v1/keys/user/1/inflight?max=0", token, ""); code != 400 {
		t.Fatalf("max=0: %d", code)
	}
	readInflight(t, base, token, "user/1", "policy=quota", func(a inflightAnswer) bool { return true })
	if ok, bad := counts(); ok < okBefore+1 || bad < errBefore+1 {
		t.Fatalf("limitd_usage_reads_total{read=\"inflight\"}: ok %v→%v, error %v→%v", okBefore, ok, errBefore, bad)
	}
	// A peek of the key is still a peek.
	if code, body := httpDo(t, "GET", base+"/v1/keys/user/1?policy=workers", "", ""); code != 200 || !strings.Contains(body, `"remaining":2`) {
		t.Fatalf("peek: %d %s", code, body)
	}
}

// TestInflightReadRefusals: the read is for admins; bad input is a 400 (or
// an unknown name a 404) naming the field, a fixed JSON error.
func TestInflightReadRefusals(t *testing.T) {
	const token = "s3cret"
	base, _ := inflightNode(t, token)
	readInflight(t, base, token, "user/1", "policy=workers", func(a inflightAnswer) bool { return a.SlotsHeld == 1 })
	if code, body := httpDo(t, "GET", base+"/v1/keys/user/1/inflight?policy=workers", "", ""); code != 401 {
		t.Fatalf("without the token: %d %s", code, body)
	}
	for _, tc := range []struct {
		query, field string
		status       int
	}{
		{"policy=nope", "policy", 404},
		{"policy=bad%20name", "policy", 400},
		{"policy=workers&limit=daily", "limit", 400},
		{"policy=workers&max=0", "max", 400},
		{"policy=workers&max=x", "max", 400},
		{"policy=workers&max=1001", "max", 400},
		{"policy=workers&window=5m", "window", 400},
		{"policy=workers&policy=quota", "policy", 400},
		{"", "key", 404}, // no policy: the key's plan, and it has none
	} {
		code, body := httpDo(t, "GET", base+"/v1/keys/user/1/inflight?"+tc.query, token, "")
		var e struct {
			Error struct{ Code, Field, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != tc.status || e.Error.Field != tc.field {
			t.Errorf("?%s: %d %s, want %d naming %s", tc.query, code, body, tc.status, tc.field)
		}
	}
}

func abs(v int64) int64 { return max(v, -v) }

// TestInflightReadOfAPlanLimit: with no policy, the read is of the key's
// plan's limit (named by limit=, or the plan's one limit). Plans take no
// concurrency limits and a reserve names a policy, so its lists are empty.
func TestInflightReadOfAPlanLimit(t *testing.T) {
	const token = "s3cret"
	base, _ := inflightNode(t, token)
	for _, w := range [][2]string{
		{"/v1/plans/pro", `{"limits":{"jobs":{"algorithm":"fixed_window","limit":5,"window":"1h"}}}`},
		{"/v1/keys/acme/plan", `{"plan":"pro"}`},
	} {
		if code, body := httpDo(t, "PUT", base+w[0], token, w[1]); code != 200 {
			t.Fatalf("PUT %s: %d %s", w[0], code, body)
		}
	}
	if code, body := httpDo(t, "POST", base+"/v1/check", "", `{"key":"acme","request_id":"j1"}`); code != 200 {
		t.Fatalf("plan check: %d %s", code, body)
	}
	var a struct {
		inflightAnswer
		Plan  string `json:"plan"`
		Limit string `json:"limit"`
	}
	for _, q := range []string{"", "limit=jobs"} {
		readInflight(t, base, token, "acme", q, func(inflightAnswer) bool { return true })
		_, body := httpDo(t, "GET", base+"/v1/keys/acme/inflight?"+q, token, "")
		if err := json.Unmarshal([]byte(body), &a); err != nil || a.Plan != "pro" || a.Limit != "jobs" || a.Policy != "" || a.Concurrency ||
			len(a.Slots) != 0 || len(a.Reservations) != 0 || !strings.Contains(body, `"slots":[]`) {
			t.Fatalf("?%s: %s", q, body)
		}
	}
	if code, body := httpDo(t, "GET", base+"/v1/keys/acme/inflight?limit=daily", token, ""); code != 404 || !strings.Contains(body, `"field":"limit"`) {
		t.Fatalf("an unknown plan limit: %d %s", code, body)
	}
}
