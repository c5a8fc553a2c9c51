package grpcapi

import (
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestUsageOverGRPC: the history option on a policy, a key's windows, the
// export of a closed window as a stream, top keys, each admin only.
func TestUsageOverGRPC(t *testing.T) {
	c := newTestCluster(t, 1, testConfig{Config: Config{AdminToken: "tok"}})
	ctx := ctxT(t)
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	g := c.limitd(0)
	_, err := g.PutPolicy(admin, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit: &limitdv1.Limit{Algorithm: "token_bucket", Limit: 3, Window: "1s", History: "1m"}}})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "policy.limit.history")
	p, err := g.PutPolicy(admin, &limitdv1.PutPolicyRequest{Policy: &limitdv1.Policy{Name: "api",
		Limit: &limitdv1.Limit{Algorithm: "fixed_window", Limit: 3, Window: "1s", History: "1m"}}})
	if err != nil || p.GetLimit().GetHistory() != "1m" {
		t.Fatalf("put: %v %v", p, err)
	}
	// Start early in a second, so that the four checks share a window.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	var first time.Time
	for i := 0; i < 4; i++ {
		r, err := g.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "api"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = time.Now()
		}
		_ = r
	}
	time.Sleep(time.Until(first.Truncate(time.Second).Add(1100 * time.Millisecond)))
	if _, err := g.Check(ctx, &limitdv1.CheckRequest{Key: "k", Policy: "api"}); err != nil {
		t.Fatal(err)
	}
	_, err = g.GetUsage(ctx, &limitdv1.GetUsageRequest{Key: "k", Policy: "api"})
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	var u *limitdv1.GetUsageResponse
	deadline := time.Now().Add(5 * time.Second)
	for { // the read is the last finished commit: wait for the check's
		if u, err = g.GetUsage(admin, &limitdv1.GetUsageRequest{Key: "k", Policy: "api"}); err != nil {
			t.Fatal(err)
		}
		if n := len(u.GetWindows()); n > 0 && u.GetWindows()[n-1].GetUsed() == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var used, refused int64
	for _, w := range u.GetWindows()[:len(u.GetWindows())-1] {
		used, refused = used+w.GetUsed(), refused+w.GetRefused()
	}
	if used != 3 || refused < 1 || !u.GetWindows()[len(u.GetWindows())-1].GetCurrent() {
		t.Fatalf("usage: %v", u)
	}
	closed := u.GetWindows()[0]
	st, err := g.ExportUsage(admin, &limitdv1.ExportUsageRequest{Policy: "api", Window: closed.GetStart()})
	if err != nil {
		t.Fatal(err)
	}
	var rows []*limitdv1.ExportUsageMessage_Row
	m, err := st.Recv()
	if err != nil || m.GetHeader() == nil || !m.GetHeader().GetStart().AsTime().Equal(closed.GetStart().AsTime()) {
		t.Fatalf("header: %v %v", m, err)
	}
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m.GetRow())
	}
	if len(rows) != 1 || rows[0].GetKey() != "k" || rows[0].GetUsed() != closed.GetUsed() {
		t.Fatalf("rows %v, window %v", rows, closed)
	}
	st, _ = g.ExportUsage(ctx, &limitdv1.ExportUsageRequest{Policy: "api", Window: closed.GetStart()})
	_, err = st.Recv()
	wantError(t, err, codes.Unauthenticated, "unauthenticated", "")
	st, _ = g.ExportUsage(admin, &limitdv1.ExportUsageRequest{Policy: "api", Window: timestamppb.New(time.Now().Add(time.Hour))})
	_, err = st.Recv()
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "window")

	top, err := g.TopKeys(admin, &limitdv1.TopKeysRequest{Policy: "api", Window: "5m"})
	if err != nil || len(top.GetKeys()) != 1 || top.GetKeys()[0].GetKey() != "k" || top.GetKeys()[0].GetCount() != 4 {
		t.Fatalf("top: %v %v", top, err)
	}
	_, err = g.TopKeys(admin, &limitdv1.TopKeysRequest{Policy: "api", Window: "2m"})
	wantError(t, err, codes.InvalidArgument, "invalid_argument", "window")
}
