package grpcapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/cluster/clustertest"
	"github.com/limitd/limitd/nodeapi"
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
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.name")
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "p", Limit: &limitdv1.Limit{Algorithm: "token_bucket", Limit: 1, Window: "1s", Burst: -1}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.limit.burst")
	_, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "p", Limit: fixedWindow(1), MaxKeys: -1}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.max_keys")
}

// A policy's max_keys travels over gRPC both ways (a PutPolicy that dropped
// it would leave the policy unbounded), and binds: a key past it is
// RESOURCE_EXHAUSTED while the keys it holds are decided.
func TestPolicyMaxKeysOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "b", Limit: fixedWindow(5), MaxKeys: 1}})
	if err != nil || pol.GetMaxKeys() != 1 {
		t.Fatalf("put: %v %v, want max_keys 1", pol, err)
	}
	if got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "b"}); err != nil || got.GetMaxKeys() != 1 {
		t.Fatalf("get: %v %v, want max_keys 1", got, err)
	}
	if _, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "one", Policy: "b"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "two", Policy: "b"})
	wantError(t, err, codes.ResourceExhausted, "key_budget_exhausted", "key")
	if d, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "one", Policy: "b"}); err != nil || !d.GetDecision().GetAllowed() {
		t.Fatalf("the key the policy holds: %v %v", d, err)
	}
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
	svc := service.New(clustertest.ServiceDeps(c.nodes[0]), service.Config{})
	replicated := func() nodeapi.Policy {
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

// TestPolicyLease: limitd.v1.Policy carries the lease option both ways —
// put, get and list answer it and it is replicated as given; a
// get-modify-put keeps it; unset share and max_ttl take the HTTP API's
// defaults; a replace without it turns leases off (PUT replaces the policy).
func TestPolicyLease(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	svc := service.New(clustertest.ServiceDeps(c.nodes[0]), service.Config{})
	replicated := func() algo.Lease {
		t.Helper()
		p, e := svc.GetPolicy("quota")
		if e != nil {
			t.Fatalf("replicated policy: %v", e)
		}
		return p.Lease
	}
	daily := &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1_000_000, Calendar: "day"}

	put := &limitdv1.Policy{Name: "quota", Limit: daily, Lease: &limitdv1.Lease{Share: proto.Float64(0.25), MaxTtl: "3s"}}
	pol, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: put})
	if err != nil || pol.GetLease().GetShare() != 0.25 || pol.GetLease().GetMaxTtl() != "3s" || pol.GetLease().Share == nil {
		t.Fatalf("PutPolicy with a lease: %v %v", pol, err)
	}
	if got := replicated(); got != (algo.Lease{Share: 250_000, MaxTTL: 3 * time.Second}) {
		t.Fatalf("replicated lease %+v, want share 250000 max_ttl 3s", got)
	}
	got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "quota"})
	if err != nil || !proto.Equal(got, pol) {
		t.Fatalf("GetPolicy: %v %v, want %v", got, err, pol)
	}
	l, err := cl.ListPolicies(ctx, &limitdv1.ListPoliciesRequest{})
	if err != nil || len(l.GetPolicies()) != 1 || !proto.Equal(l.GetPolicies()[0], pol) {
		t.Fatalf("ListPolicies: %v %v, want [%v]", l, err, pol)
	}

	// Read-modify-write: raise the limit of what GetPolicy answered.
	got.Limit.Limit = 2_000_000
	pol, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: got})
	if err != nil || !proto.Equal(pol.GetLease(), got.GetLease()) {
		t.Fatalf("get-modify-put: %v %v, want lease %v", pol, err, got.GetLease())
	}
	if got := replicated(); got != (algo.Lease{Share: 250_000, MaxTTL: 3 * time.Second}) {
		t.Fatalf("lease after a get-modify-put %+v, want it kept", got)
	}

	// An empty Lease is the defaults, as {"lease": {}} is over HTTP.
	pol, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "quota", Limit: daily, Lease: &limitdv1.Lease{}}})
	if err != nil || pol.GetLease().GetShare() != 0.05 || pol.GetLease().GetMaxTtl() != "2s" {
		t.Fatalf("PutPolicy with the default lease: %v %v", pol, err)
	}
	if got := replicated(); got != (algo.Lease{Share: algo.DefaultLeaseShare, MaxTTL: algo.DefaultLeaseTTL}) {
		t.Fatalf("replicated default lease %+v", got)
	}

	// strict, either way, is stored and answered as given, or refused by
	// name while the service does not carry it — never dropped.
	for _, strict := range []bool{true, false} {
		pol, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "quota", Limit: daily, Lease: &limitdv1.Lease{Strict: proto.Bool(strict)}}})
		if err != nil {
			wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.lease.strict")
		} else if pol.GetLease().Strict == nil || pol.GetLease().GetStrict() != strict {
			t.Fatalf("PutPolicy with strict %v: %v", strict, pol)
		}
	}

	// A replace without the field has no leases.
	pol, err = cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "quota", Limit: daily}})
	if err != nil || pol.Lease != nil || replicated().Enabled() {
		t.Fatalf("PutPolicy without a lease: %v %v, replicated %+v", pol, err, replicated())
	}
}

// TestPolicyGetPutKeepsService: a policy stored through the service (as the
// HTTP API and policies files store it, from the lease's JSON form) is
// stored unchanged after a GetPolicy and a PutPolicy of what it answered:
// every field the service keeps, the lease's included, crosses gRPC both
// ways. (The seeds are decoded leniently: a field this service does not
// have yet, such as "strict", is left out here rather than refused.)
func TestPolicyGetPutKeepsService(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	svc := service.New(clustertest.ServiceDeps(c.nodes[0]), service.Config{})
	for i, seed := range []struct {
		limit                   algo.Config
		lease                   string // JSON; "" for none
		shadow, noLocalRefusals bool
	}{
		{algo.Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "month", Timezone: "Europe/Paris"}, `{"share":0.1,"max_ttl":"1s"}`, false, true},
		{algo.Config{Algorithm: "sliding_window", Limit: 50, Window: "90s"}, `{"share":1,"max_ttl":"10m","strict":false}`, false, false},
		{algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s", Burst: 20}, `{"share":0.000001,"max_ttl":"250ms","strict":true}`, false, false},
		{algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s", Burst: 20}, `{}`, false, false},
		{algo.Config{Algorithm: "sliding_log", Limit: 5, Window: "15m", CountRefused: true}, "", true, false},
	} {
		var lease *algo.LeaseConfig
		if seed.lease != "" {
			lease = new(algo.LeaseConfig)
			if err := json.Unmarshal([]byte(seed.lease), lease); err != nil {
				t.Fatal(err)
			}
		}
		want, e := svc.PutPolicy(ctx, service.PolicyRequest{Name: "seed", Config: seed.limit, Shadow: seed.shadow, NoLocalRefusals: seed.noLocalRefusals, Lease: lease})
		if e != nil {
			t.Fatalf("seed %d: %v", i, e)
		}
		got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "seed"})
		if err != nil {
			t.Fatalf("seed %d: GetPolicy: %v", i, err)
		}
		if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: got}); err != nil {
			t.Fatalf("seed %d: PutPolicy of %v: %v", i, got, err)
		}
		after, e := svc.GetPolicy("seed")
		if e != nil || !reflect.DeepEqual(after, want) {
			t.Fatalf("seed %d: after a gRPC get and put: %+v %v, want %+v", i, after, e, want)
		}
	}
}

// TestPolicyLeaseErrors: a bad lease option is INVALID_ARGUMENT naming the
// field by its path in the request, with the HTTP API's rules, and nothing
// is stored.
func TestPolicyLeaseErrors(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	cl := c.limitd(0)
	ctx := ctxT(t)
	good := &limitdv1.Lease{Share: proto.Float64(0.1), MaxTtl: "1s"}
	first, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "q", Limit: fixedWindow(100), Lease: good}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		pol   *limitdv1.Policy
		field string
	}{
		{"share 0", &limitdv1.Policy{Limit: fixedWindow(100), Lease: &limitdv1.Lease{Share: proto.Float64(0)}}, "policy.lease.share"},
		{"share above 1", &limitdv1.Policy{Limit: fixedWindow(100), Lease: &limitdv1.Lease{Share: proto.Float64(1.5)}}, "policy.lease.share"},
		{"share negative", &limitdv1.Policy{Limit: fixedWindow(100), Lease: &limitdv1.Lease{Share: proto.Float64(-0.1)}}, "policy.lease.share"},
		{"max_ttl not a duration", &limitdv1.Policy{Limit: fixedWindow(100), Lease: &limitdv1.Lease{MaxTtl: "2"}}, "policy.lease.max_ttl"},
		{"max_ttl above 10m", &limitdv1.Policy{Limit: fixedWindow(100), Lease: &limitdv1.Lease{MaxTtl: "11m"}}, "policy.lease.max_ttl"},
		{"sliding_log", &limitdv1.Policy{Limit: &limitdv1.Limit{Algorithm: "sliding_log", Limit: 5, Window: "1m"}, Lease: good}, "policy.lease"},
		{"leaky_bucket", &limitdv1.Policy{Limit: &limitdv1.Limit{Algorithm: "leaky_bucket", Limit: 5, Window: "1s"}, Lease: good}, "policy.lease"},
		{"shadow", &limitdv1.Policy{Limit: fixedWindow(100), Shadow: true, Lease: good}, "policy.lease"},
		{"limit", &limitdv1.Policy{Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 100, Window: "60"}, Lease: good}, "policy.limit.window"},
	} {
		tc.pol.Name = "q"
		_, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: tc.pol})
		t.Run(tc.name, func(t *testing.T) { wantError(t, err, codes.InvalidArgument, "invalid_argument", tc.field) })
	}
	got, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "q"})
	if err != nil || !proto.Equal(got, first) {
		t.Fatalf("after refused puts: %v %v, want the first policy %v", got, err, first)
	}
}
