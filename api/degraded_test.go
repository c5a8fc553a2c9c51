package api

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// TestDegradedPolicyOverHTTP: "degraded":{"mode":"share"} round-trips on a
// policy; a bad mode, an algorithm without a count to overdraw and unknown
// members are 400s naming the field (nothing stored); with no quorum a check
// under the policy is answered "degraded":true with Limitd-Degraded: true,
// within the node's share, while a policy without it stays a 503.
func TestDegradedPolicyOverHTTP(t *testing.T) {
	ts := newTestServer(t, Config{})
	if r := ts.do("PUT", "/v1/policies/d", `{"algorithm":"fixed_window","limit":2,"window":"1h","degraded":{"mode":"share"}}`); r.code != 200 {
		t.Fatalf("put: %d %s", r.code, r.body)
	}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want := fsm.Policy{Name: "d", Spec: spec}
	want.Options.Degraded = nodeapi.DegradedShare
	if got := ts.store.applied[len(ts.store.applied)-1]; !bytes.Equal(got, fsm.EncodePutPolicy(want)) {
		t.Fatalf("proposed %x, want the policy with the degraded option", got)
	}
	ts.store.mu.Lock()
	ts.store.policies["d"] = want
	ts.store.mu.Unlock()
	r := ts.do("GET", "/v1/policies/d", "")
	if !strings.Contains(string(r.body), `"degraded":{"mode":"share"}`) {
		t.Fatalf("get does not show the option: %s", r.body)
	}
	for body, field := range map[string]string{
		`{"algorithm":"fixed_window","limit":2,"window":"1h","degraded":{"mode":"guess"}}`:               "degraded.mode",
		`{"algorithm":"token_bucket","limit":2,"window":"1h","degraded":{"mode":"share"}}`:               "degraded",
		`{"algorithm":"fixed_window","limit":2,"window":"1h","degraded":{"mode":"share","x":1}}`:         "degraded.x",
		`{"algorithm":"fixed_window","limit":2,"window":"1h","shadow":true,"degraded":{"mode":"share"}}`: "degraded",
	} {
		r := ts.do("PUT", "/v1/policies/e", body)
		if code, f, _ := r.errorBody(t); r.code != 400 || code != "invalid_argument" || f != field {
			t.Errorf("%s: %d %s %s, want 400 naming %s", body, r.code, code, f, field)
		}
	}
	if n := len(ts.store.applied); n != 1 {
		t.Fatalf("%d proposals: a refused policy was proposed", n)
	}
	ts.store.putPolicy(t, "plain", algo.Config{Algorithm: "fixed_window", Limit: 2, Window: "1h"}, false)
	ts.store.checkErr = nodeapi.ErrNoLeader
	allowed := 0
	for range 4 {
		r := ts.do("POST", "/v1/check", `{"key":"k","policy":"d"}`)
		if r.header.Get("Limitd-Degraded") != "true" {
			t.Fatalf("no Limitd-Degraded header: %d %v %s", r.code, r.header, r.body)
		}
		m := r.json(t)
		if m["degraded"] != true {
			t.Fatalf("decision not marked degraded: %s", r.body)
		}
		if m["allowed"] == true {
			allowed++
		}
	}
	if allowed != 2 { // one voter: the whole limit is its share
		t.Fatalf("%d allowed alone, want the share 2", allowed)
	}
	if r := ts.do("POST", "/v1/check", `{"key":"k","policy":"plain"}`); r.code != 503 || r.header.Get("Limitd-Degraded") != "" {
		t.Fatalf("a policy without the option: %d %v, want 503 not degraded", r.code, r.header)
	}
	ts.store.checkErr = nil
	if r := ts.do("POST", "/v1/check", `{"key":"k","policy":"d"}`); r.header.Get("Limitd-Degraded") != "" || strings.Contains(string(r.body), "degraded") {
		t.Fatalf("a check decided by the quorum is marked degraded: %v %s", r.header, r.body)
	}
}

// TestDegradedCollectorsReportTheFigures: the counters read the service's.
func TestDegradedCollectorsReportTheFigures(t *testing.T) {
	ts := newTestServer(t, Config{})
	spec, _ := algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1h"}.Spec()
	p := fsm.Policy{Name: "d", Spec: spec}
	p.Options.Degraded = nodeapi.DegradedShare
	ts.store.mu.Lock()
	ts.store.policies["d"] = p
	ts.store.checkErr = nodeapi.ErrNoLeader
	ts.store.mu.Unlock()
	svc := service.New(service.DepsOf(ts.store), service.Config{})
	for range 3 {
		if _, e := svc.Check(context.Background(), &service.CheckRequest{Key: "k", Policy: "d", Cost: 1}); e != nil {
			t.Fatal(e)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(DegradedCollectors(svc)...)
	want := map[string]float64{"limitd_degraded_admitted_units_total": 1, "limitd_degraded_refused_total": 2, "limitd_degraded_pending_units": 1}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if w, ok := want[mf.GetName()]; ok && v != w {
			t.Errorf("%s = %v, want %v", mf.GetName(), v, w)
		}
		delete(want, mf.GetName())
	}
	if len(want) != 0 {
		t.Errorf("missing %v", want)
	}
}
