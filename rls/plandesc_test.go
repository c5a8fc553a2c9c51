package rls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/rls"
)

// TestPlanDescriptor: a descriptor with plan: true matches like any other
// and makes a PlanChecked item whose key is the request's last value,
// verbatim, decided in a group of its own (with Peek when a blocked
// descriptor makes an atomic request spend nothing); its status reports the
// plan's deciding limit. plan beside rate_limit, shadow_mode or
// share_threshold is refused naming the field, and so is a request whose
// value is empty. Fails if the flag is lost in parsing or in the canonical
// form (the replicated config), if the key is prefixed or taken from
// another entry, or if a plan item joins the all-or-nothing group (the
// state machine decides a plan check as an op by itself).
func TestPlanDescriptor(t *testing.T) {
	const yaml = `domain: api
descriptors:
  - key: tenant
    plan: true
  - key: org
    descriptors:
      - key: user
        plan: true
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`
	d, err := rls.Parse("api.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	again, err := rls.Parse("", d.Canonical())
	if err != nil || string(again.Canonical()) != string(d.Canonical()) || !again.Config().Descriptors[0].Plan {
		t.Fatalf("canonical form: %s %v", d.Canonical(), err)
	}
	req := rls.Request{Domain: "api", Descriptors: []rls.RequestDescriptor{
		{Entries: []rls.Entry{{Key: "tenant", Value: "tenant:acme"}}},
		{Entries: []rls.Entry{{Key: "path", Value: "/a"}}},
		{Entries: []rls.Entry{{Key: "org", Value: "o1"}, {Key: "user", Value: "u:7"}}},
	}}
	p, err := rls.NewPlan(d, &req)
	if err != nil {
		t.Fatal(err)
	}
	if it := p.Items[0]; it.Kind != rls.PlanChecked || it.Key != "tenant:acme" || it.Cost != 1 {
		t.Fatalf("item 0: %+v", it)
	}
	if it := p.Items[2]; it.Kind != rls.PlanChecked || it.Key != "u:7" {
		t.Fatalf("item 2 (nested): %+v", it)
	}
	if len(p.Groups) != 2 || !p.Groups[0].All || len(p.Groups[0].Items) != 1 || p.Groups[0].Items[0] != 1 ||
		p.Groups[1].All || p.Groups[1].Peek || len(p.Groups[1].Items) != 2 {
		t.Fatalf("groups: %+v", p.Groups)
	}
	res := make([]rls.Result, 3)
	res[0] = rls.Result{Decision: algo.Decision{Allowed: false, Limit: 100, Remaining: 0, ResetAfter: 7}, Consumed: true, Limit: "pro/daily"}
	res[1] = rls.Result{Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 9}, Consumed: true}
	res[2] = rls.Result{Decision: algo.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 8}, Consumed: true, Limit: "free/hourly"}
	resp := p.Respond(res, time.Unix(0, 0))
	if !resp.OverLimit || !resp.Statuses[0].OverLimit || resp.Statuses[0].Limit.Name != "pro/daily" || resp.Statuses[0].Limit.RequestsPerUnit != 100 ||
		resp.Statuses[0].UntilReset != 7 || resp.Statuses[2].OverLimit || resp.Statuses[2].Remaining != 3 || resp.Statuses[2].Limit.Name != "free/hourly" {
		t.Fatalf("respond: %+v %+v %+v", resp, *resp.Statuses[0].Limit, *resp.Statuses[2].Limit)
	}
	// A blocked descriptor: an atomic request spends nothing, the plan
	// checks too.
	req.Descriptors = append(req.Descriptors, rls.RequestDescriptor{Entries: []rls.Entry{{Key: "blocked"}}})
	if p, err = rls.NewPlan(d, &req); err != nil || !p.Groups[len(p.Groups)-1].Peek {
		t.Fatalf("with a blocked descriptor: %+v %v", p, err)
	}
	_, err = rls.NewPlan(d, &rls.Request{Domain: "api", Descriptors: []rls.RequestDescriptor{{Entries: []rls.Entry{{Key: "tenant", Value: ""}}}}})
	var re *rls.RequestError
	if !errors.As(err, &re) || re.Field != "descriptors[0].entries" {
		t.Fatalf("empty value: %v", err)
	}

	for _, c := range []struct{ yaml, field string }{
		{"domain: x\ndescriptors:\n  - key: t\n    plan: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "descriptors[0].plan"},
		{"domain: x\ndescriptors:\n  - key: t\n    plan: true\n    shadow_mode: true\n", "descriptors[0].shadow_mode"},
		{"domain: x\ndescriptors:\n  - key: t\n    value: 'a*'\n    plan: true\n    share_threshold: true\n", "descriptors[0].share_threshold"},
		{"domain: x\ndescriptors:\n  - key: t\n    plan: yes please\n", "descriptors[0].plan"},
	} {
		_, err := rls.Parse("x.yaml", []byte(c.yaml))
		var ce *rls.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%q: %v, want an error naming %s", c.yaml, err, c.field)
		}
	}
}
