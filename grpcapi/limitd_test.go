package grpcapi

import (
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/limitd/limitd/fsm"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// wantError checks a gRPC error's code, its ErrorInfo reason and, when
// field is not "", the BadRequest field.
func wantError(t *testing.T, err error, code codes.Code, reason, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
	var gotReason, gotField string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			gotReason = d.GetReason()
		case *errdetails.BadRequest:
			gotField = d.GetFieldViolations()[0].GetField()
		}
	}
	if gotReason != reason || gotField != field {
		t.Fatalf("error %v: reason %q field %q, want %q %q", err, gotReason, gotField, reason, field)
	}
}

func fixedWindow(limit int64) *limitdv1.Limit {
	return &limitdv1.Limit{Algorithm: "fixed_window", Limit: limit, Window: "1h"}
}

// TestLimitdAPI: every limitd.v1 method with the HTTP API's semantics:
// policies, check, atomic check-all that consumes nothing when refused,
// batch with per-entry errors, peek, reset, request_id replay and conflict.
func TestLimitdAPI(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)

	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api", Limit: &limitdv1.Limit{Algorithm: "sliding_window", Limit: 3, Window: "60s"}}})
	if err != nil || pol.GetLimit().GetWindow() != "1m" {
		t.Fatalf("PutPolicy: %v %v", pol, err)
	}
	if got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "api"}); err != nil || !proto.Equal(got, pol) {
		t.Fatalf("GetPolicy: %v %v", got, err)
	}
	if l, err := cl.ListPolicies(ctx, &limitdv1.ListPoliciesRequest{}); err != nil || len(l.GetPolicies()) != 1 {
		t.Fatalf("ListPolicies: %v %v", l, err)
	}

	for i, want := range []int64{2, 1, 0} {
		r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "api"})
		if err != nil || !r.GetDecision().GetAllowed() || r.GetDecision().GetRemaining() != want {
			t.Fatalf("check %d: %v %v", i, r, err)
		}
	}
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "api"})
	if err != nil || r.GetDecision().GetAllowed() || r.GetDecision().GetRetryAfter().AsDuration() <= 0 {
		t.Fatalf("fourth check: %v %v", r, err)
	}
	never, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "n", Limit: fixedWindow(2), Cost: proto.Int64(5)})
	if err != nil || !never.GetDecision().GetNever() {
		t.Fatalf("cost above the limit: %v %v", never, err)
	}

	// request_id: a repeat is replayed and consumes nothing.
	first, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "idem", Limit: fixedWindow(5), RequestId: "req-1"})
	if err != nil || first.GetReplayed() || first.GetDecision().GetRemaining() != 4 {
		t.Fatalf("first: %v %v", first, err)
	}
	again, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "idem", Limit: fixedWindow(5), RequestId: "req-1"})
	if err != nil || !again.GetReplayed() || again.GetDecision().GetRemaining() != 4 {
		t.Fatalf("replay: %v %v", again, err)
	}
	_, err = cl.CheckAll(ctx, &limitdv1.CheckAllRequest{RequestId: "req-1", Checks: []*limitdv1.CheckRequest{
		{Key: "a", Limit: fixedWindow(1)}, {Key: "b", Limit: fixedWindow(1)}}})
	wantError(t, err, codes.AlreadyExists, "conflict", "request_id")

	// CheckAll: refused consumes nothing.
	all := func(limitB int64) *limitdv1.CheckAllResponse {
		t.Helper()
		r, err := cl.CheckAll(ctx, &limitdv1.CheckAllRequest{Checks: []*limitdv1.CheckRequest{
			{Key: "x", Limit: fixedWindow(10)}, {Key: "y", Limit: fixedWindow(limitB), Cost: proto.Int64(2)}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := all(1); r.GetAllowed() || r.GetDecisions()[0].GetAllowed() != true || r.GetDecisions()[1].GetAllowed() {
		t.Fatalf("refused all: %v", r)
	}
	peek, err := cl.Peek(ctx, &limitdv1.PeekRequest{Key: "x", Limit: fixedWindow(10)})
	if err != nil || peek.GetDecision().GetRemaining() != 10 {
		t.Fatalf("refused CheckAll consumed: %v %v", peek, err)
	}

	// Batch: a bad entry gets its own error, the others are decided.
	b, err := cl.Batch(ctx, &limitdv1.BatchRequest{Checks: []*limitdv1.CheckRequest{
		{Key: "a", Policy: "api"}, {Key: "", Policy: "api"}, {Key: "b", Policy: "nope"},
		{Key: "c", Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1, Window: "60"}}}})
	if err != nil || len(b.GetResults()) != 4 || b.GetResults()[0].GetResponse() == nil {
		t.Fatalf("Batch: %v %v", b, err)
	}
	for i, want := range []struct{ code, field string }{{}, {"invalid_argument", "checks[1].key"}, {"not_found", "checks[2].policy"}, {"invalid_argument", "checks[3].limit.window"}} {
		if i == 0 {
			continue
		}
		e := b.GetResults()[i].GetError()
		if e.GetCode() != want.code || e.GetField() != want.field {
			t.Fatalf("batch entry %d: %v, want %s %s", i, e, want.code, want.field)
		}
	}

	// Reset, then the key is fresh.
	if _, err := cl.Reset(ctx, &limitdv1.ResetRequest{Key: "u", Policy: "api"}); err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Peek(ctx, &limitdv1.PeekRequest{Key: "u", Policy: "api"}); err != nil || p.GetDecision().GetRemaining() != 3 {
		t.Fatalf("after reset: %v %v", p, err)
	}
	if _, err := cl.DeletePolicy(ctx, &limitdv1.DeletePolicyRequest{Name: "api"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.DeletePolicy(ctx, &limitdv1.DeletePolicyRequest{Name: "api"})
	wantError(t, err, codes.NotFound, "not_found", "policy")
	_, err = cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "api"})
	wantError(t, err, codes.NotFound, "not_found", "name")
}

// TestLimitdErrorsNameTheField: invalid input is INVALID_ARGUMENT with the
// HTTP API's field names.
func TestLimitdErrorsNameTheField(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	_, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1, Window: "60"}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "limit.window")
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Policy: "p"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "key")
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Limit: fixedWindow(1), Cost: proto.Int64(-1)})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "cost")
	_, err = cl.CheckAll(ctx, &limitdv1.CheckAllRequest{Checks: []*limitdv1.CheckRequest{{Key: "k", Limit: fixedWindow(1)}, {Key: "k", Limit: &limitdv1.Limit{Algorithm: "magic"}}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "checks[1].limit.algorithm")
	_, err = cl.CheckAll(ctx, &limitdv1.CheckAllRequest{})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "checks")
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "missing"})
	wantError(t, err, codes.NotFound, "not_found", "policy")
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "bad name!", Limit: fixedWindow(1)}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "name")
}

// TestAdminTokenOnAdminMethods: admin methods need the token, others do not.
func TestAdminTokenOnAdminMethods(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{Config: Config{AdminToken: "s3cret"}})
	cl := c.limitd(0)
	ctx := ctxT(t)
	put := &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "p", Limit: fixedWindow(1)}}
	_, err := cl.PutPolicy(ctx, put)
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	_, err = cl.PutPolicy(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong"), put)
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	for _, call := range []func() error{
		func() error { _, err := cl.Reset(ctx, &limitdv1.ResetRequest{Key: "k", Policy: "p"}); return err },
		func() error { _, err := cl.DeletePolicy(ctx, &limitdv1.DeletePolicyRequest{Name: "p"}); return err },
		func() error {
			_, err := cl.PutRLSDomain(ctx, &limitdv1.PutRLSDomainRequest{Config: "domain: d\n"})
			return err
		},
		func() error {
			_, err := cl.DeleteRLSDomain(ctx, &limitdv1.DeleteRLSDomainRequest{Domain: "d"})
			return err
		},
	} {
		wantError(t, call(), codes.Unauthenticated, "unauthenticated", "")
	}
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	if _, err := cl.PutPolicy(admin, put); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "p"}); err != nil {
		t.Fatalf("a check needs no token: %v", err)
	}
	if !strings.Contains(status.Convert(func() error { _, err := cl.PutPolicy(ctx, put); return err }()).Message(), "Bearer") {
		t.Fatal("the error does not say how to authenticate")
	}
}

// TestPolicyLocalRefusals: local_refusals has presence over gRPC. An explicit
// false is replicated (the cache is off for the policy), an unset field is
// the default true — also when it replaces a policy that had it off — and
// GetPolicy and ListPolicies always say which.
func TestPolicyLocalRefusals(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	svc := service.New(c.nodes[0], service.Config{})
	replicated := func() fsm.Policy {
		t.Helper()
		p, e := svc.GetPolicy("pay")
		if e != nil {
			t.Fatalf("replicated policy: %v", e)
		}
		return p
	}

	off := false
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "pay", Limit: fixedWindow(5), LocalRefusals: &off}})
	if err != nil || pol.LocalRefusals == nil || *pol.LocalRefusals {
		t.Fatalf("PutPolicy local_refusals=false: %v %v", pol, err)
	}
	if !replicated().NoLocalRefusals {
		t.Fatal("local_refusals=false over gRPC was not replicated")
	}
	got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "pay"})
	if err != nil || got.LocalRefusals == nil || *got.LocalRefusals {
		t.Fatalf("GetPolicy: %v %v, want local_refusals false", got, err)
	}
	l, err := cl.ListPolicies(ctx, &limitdv1.ListPoliciesRequest{})
	if err != nil || len(l.GetPolicies()) != 1 || l.GetPolicies()[0].LocalRefusals == nil || *l.GetPolicies()[0].LocalRefusals {
		t.Fatalf("ListPolicies: %v %v, want local_refusals false", l, err)
	}

	// Unset: the default, true, replacing the policy that had it off.
	pol, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "pay", Limit: fixedWindow(5)}})
	if err != nil || pol.LocalRefusals == nil || !*pol.LocalRefusals {
		t.Fatalf("PutPolicy without local_refusals: %v %v", pol, err)
	}
	if replicated().NoLocalRefusals {
		t.Fatal("an unset local_refusals turned the cache off")
	}
}
