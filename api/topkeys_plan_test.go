package api

import (
	"strings"
	"testing"
	"time"
)

// TestTopKeysRouteOfPlans: GET /v1/keys/top names a plan (its checks'
// allowed cost and refusals) or a plan's limit (plan_limit: the refusals
// that limit made); the answer names them back. Fails if plan=… is
// refused, answered from a policy's sketch, or if a bad plan, limit or
// combination is not a 400/404 naming the parameter.
func TestTopKeysRouteOfPlans(t *testing.T) {
	ts, store := newPlanServer(t)
	store.Log.SetNow(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	ts.want(ts.do("PUT", "/v1/plans/free", freeBody, admin), 200, "", "") // per_second 2/s, daily 100
	ts.want(ts.do("PUT", "/v1/plans/default", `{"plan":"free"}`, admin), 200, "", "")
	for _, k := range []string{"a", "b", "b", "b"} { // b: 2 allowed, the 3rd refused by per_second
		ts.do("POST", "/v1/check", `{"key":"`+k+`"}`)
	}
	m := ts.do("GET", "/v1/keys/top?plan=free&window=5m", "", admin).json(t)
	if ks := keysOf(t, m); strings.Join(ks, ",") != "b,a" || m["plan"] != "free" || m["policy"] != nil || num(t, m["keys"].([]any)[0].(map[string]any), "count") != 2 {
		t.Fatalf("plan, allowed: %v", m)
	}
	m = ts.do("GET", "/v1/keys/top?plan=free&plan_limit=per_second&window=1h&by=refused", "", admin).json(t)
	if ks := keysOf(t, m); strings.Join(ks, ",") != "b" || m["plan_limit"] != "per_second" {
		t.Fatalf("plan limit, refused: %v", m)
	}
	m = ts.do("GET", "/v1/keys/top?plan=free&plan_limit=daily&window=1h&by=refused", "", admin).json(t)
	if ks := keysOf(t, m); len(ks) != 0 {
		t.Fatalf("a limit that refused nothing: %v", m)
	}
	ts.want(ts.do("GET", "/v1/keys/top?plan=free&window=5m", ""), 401, CodeUnauthenticated, "")
	ts.want(ts.do("GET", "/v1/keys/top?plan=nope&window=5m", "", admin), 404, CodeNotFound, "plan")
	ts.want(ts.do("GET", "/v1/keys/top?plan=free&plan_limit=monthly&window=5m", "", admin), 404, CodeNotFound, "plan_limit")
	ts.want(ts.do("GET", "/v1/keys/top?plan=free&policy=api&window=5m", "", admin), 400, CodeInvalidArgument, "plan")
	ts.want(ts.do("GET", "/v1/keys/top?policy=api&plan_limit=daily&window=5m", "", admin), 400, CodeInvalidArgument, "plan_limit")
	ts.want(ts.do("GET", "/v1/keys/top?window=5m", "", admin), 400, CodeInvalidArgument, "policy")
	ts.want(ts.do("GET", "/v1/keys/top?plan=free&window=5m&plan-limit=x", "", admin), 400, CodeInvalidArgument, "plan-limit")
}
