package grpcapi

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestTopKeysOfAPlanOverGRPC: plan-resolved checks sent to every node of a
// three-node cluster are counted under the plan on every node (the
// whole cluster's view, from the log each applied), and under the limit
// that refused; a plan or limit the cluster lacks is not_found naming it.
// Fails if TopKeysRequest's plan or plan_limit is dropped, or if a node
// counts only the checks it received.
func TestTopKeysOfAPlanOverGRPC(t *testing.T) {
	c := newTestCluster(t, 3, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	limits := map[string]*limitdv1.Limit{"hourly": fixedWindow(2), "daily": {Algorithm: "fixed_window", Limit: 100, Calendar: "day"}}
	if _, err := c.limitd(0).PutPlan(admin, &limitdv1.PutPlanRequest{Plan: &limitdv1.Plan{Name: "free", Limits: limits}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.limitd(1).SetDefaultPlan(admin, &limitdv1.SetDefaultPlanRequest{Plan: "free"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // 2 allowed, the 3rd refused by hourly, each through another node
		if _, err := c.limitd(i).Check(ctx, &limitdv1.CheckRequest{Key: "tenant:acme"}); err != nil {
			t.Fatal(err)
		}
	}
	view := func(node int, req *limitdv1.TopKeysRequest) string {
		r, err := c.limitd(node).TopKeys(admin, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetPlan() != req.GetPlan() || r.GetPlanLimit() != req.GetPlanLimit() {
			t.Fatalf("answer names %q/%q, asked %q/%q", r.GetPlan(), r.GetPlanLimit(), req.GetPlan(), req.GetPlanLimit())
		}
		s := ""
		for _, k := range r.GetKeys() {
			s += k.GetKey() + "=" + strconv.FormatInt(k.GetCount(), 10) + " "
		}
		return s
	}
	for node := 0; node < 3; node++ {
		for _, w := range []struct {
			req  *limitdv1.TopKeysRequest
			want string
		}{
			{&limitdv1.TopKeysRequest{Plan: "free", Window: "5m"}, "tenant:acme=2 "},
			{&limitdv1.TopKeysRequest{Plan: "free", Window: "1h", By: "refused"}, "tenant:acme=1 "},
			{&limitdv1.TopKeysRequest{Plan: "free", PlanLimit: "hourly", Window: "1h", By: "refused"}, "tenant:acme=1 "},
			{&limitdv1.TopKeysRequest{Plan: "free", PlanLimit: "daily", Window: "1h", By: "refused"}, ""},
		} {
			got := ""
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if got = view(node, w.req); got == w.want || time.Now().After(deadline) {
					break
				}
			}
			if got != w.want {
				t.Fatalf("node %d, %v: %q, want %q", node, w.req, got, w.want)
			}
		}
	}
	_, err := c.limitd(2).TopKeys(admin, &limitdv1.TopKeysRequest{Plan: "nope", Window: "5m"})
	wantError(t, err, codes.NotFound, "not_found", "plan")
	_, err = c.limitd(2).TopKeys(admin, &limitdv1.TopKeysRequest{Plan: "free", PlanLimit: "monthly", Window: "5m"})
	wantError(t, err, codes.NotFound, "not_found", "plan_limit")
	_, err = c.limitd(2).TopKeys(admin, &limitdv1.TopKeysRequest{Plan: "free", Policy: "api", Window: "5m"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "plan")
}
