package grpcapi

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestListsAndBansOverGRPC: the list and ban methods translate the service's
// answers (a bad entry is INVALID_ARGUMENT naming it under "list"), a denied
// check says so in Decision.reason, and a policy's on_exceed bans, is
// listed and is lifted.
func TestListsAndBansOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{})
	ctx := ctxT(t)
	cl := c.limitd(0)
	if _, err := cl.PutPolicy(ctx, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit:    &limitdv1.Limit{Algorithm: "fixed_window", Limit: 1, Window: "1h"},
		OnExceed: &limitdv1.OnExceed{Ban: "10m", Escalate: []string{"1h"}}}}); err != nil {
		t.Fatal(err)
	}
	_, err := cl.PutList(ctx, &limitdv1.PutListRequest{List: &limitdv1.List{Name: "b", Kind: "deny",
		Entries: []*limitdv1.ListEntry{{Key: "a"}, {Cidr: "10.0.0.0/40"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "entries[1].cidr") {
		t.Fatalf("bad list: %v", err)
	}
	l, err := cl.PutList(ctx, &limitdv1.PutListRequest{List: &limitdv1.List{Name: "b", Kind: "deny", Entries: []*limitdv1.ListEntry{{Key: "evil"}}}})
	if err != nil || l.GetEntries()[0].GetKey() != "evil" {
		t.Fatalf("put list: %v %v", l, err)
	}
	if ls, err := cl.ListLists(ctx, &limitdv1.ListListsRequest{}); err != nil || len(ls.GetLists()) != 1 {
		t.Fatalf("ListLists: %v %v", ls, err)
	}
	r, err := cl.Check(ctx, &limitdv1.CheckRequest{Key: "evil", Policy: "api"})
	if err != nil || r.GetDecision().GetAllowed() || r.GetDecision().GetReason() != "denied" {
		t.Fatalf("denied check: %v %v", r, err)
	}
	cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "api"})
	r, err = cl.Check(ctx, &limitdv1.CheckRequest{Key: "u", Policy: "api"})
	if err != nil || r.GetDecision().GetReason() != "banned" {
		t.Fatalf("banning check: %v %v", r, err)
	}
	bans, err := cl.ListBans(ctx, &limitdv1.ListBansRequest{})
	if err != nil || len(bans.GetBans()) != 1 || bans.GetBans()[0].GetKey() != "u" || bans.GetBans()[0].GetOffences() != 1 {
		t.Fatalf("ListBans: %v %v", bans, err)
	}
	if _, err := cl.Unban(ctx, &limitdv1.UnbanRequest{Key: "u"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Unban(ctx, &limitdv1.UnbanRequest{Key: "u"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second unban: %v", err)
	}
	p, err := cl.GetPolicy(ctx, &limitdv1.GetPolicyRequest{Name: "api"})
	if err != nil || p.GetOnExceed().GetBan() != "10m" || p.GetOnExceed().GetEscalate()[0] != "1h" {
		t.Fatalf("GetPolicy: %v %v", p, err)
	}
	if _, err := cl.DeleteList(ctx, &limitdv1.DeleteListRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
}
