package grpcapi

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// TestRLSLeaderFailoverNoOverAdmission: RLS traffic to every node while the
// leader stops. No more than the limit is ever answered OK, every OK answer
// was counted, and a request whose answer was lost with the old leader is a
// gRPC error (Envoy applies its failure mode), never a guessed OK.
func TestRLSLeaderFailoverNoOverAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node failover")
	}
	const limit = 40
	c := newTestCluster(t, 3, testConfig{})
	ctx := ctxT(t)
	cfg := "domain: fo\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 40}\n"
	d, err := c.putDomain(ctx, 0, &limitdv1.PutRLSDomainRequest{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c.waitDomain("fo", []byte(d.GetConfig()))
	// Stay clear of a day boundary (the window would reset mid-test).
	if left := 24*time.Hour - time.Duration(time.Now().UnixNano()%int64(24*time.Hour)); left < time.Minute {
		time.Sleep(left)
	}
	req := &rlspb.RateLimitRequest{Domain: "fo", Descriptors: []*extpb.RateLimitDescriptor{descriptor("user", "u")}}
	leader := c.leader()
	var ok, over, failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 6; g++ {
		node := g % 3
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 25; i++ { // 150 requests in all, bounded
				rctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				r, err := c.rls(node).ShouldRateLimit(rctx, req)
				cancel()
				switch {
				case err != nil:
					switch status.Code(err) {
					case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
						failed.Add(1)
					default:
						t.Errorf("unexpected error: %v", err)
					}
				case r.GetOverallCode() == rlspb.RateLimitResponse_OK:
					ok.Add(1)
				default:
					over.Add(1)
				}
			}
		}()
	}
	close(start)
	// Stop the leader once some traffic has been decided.
	deadline := time.Now().Add(10 * time.Second)
	for ok.Load()+over.Load() < 15 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	c.stop(leader)
	wg.Wait()
	if ok.Load() > limit {
		t.Fatalf("over-admission: %d OK answers for a limit of %d", ok.Load(), limit)
	}
	// Every OK answer was counted: the survivors' remaining budget is at
	// most limit - OK.
	survivor := (leader + 1) % 3
	peek := &rlspb.RateLimitRequest{Domain: "fo", Descriptors: []*extpb.RateLimitDescriptor{
		{Entries: req.Descriptors[0].Entries, HitsAddend: wrapperspb.UInt64(0)}}}
	var rem uint32
	deadline = time.Now().Add(10 * time.Second)
	for {
		r, err := c.rls(survivor).ShouldRateLimit(ctxT(t), peek)
		if err == nil {
			rem = r.GetStatuses()[0].GetLimitRemaining()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after failover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if int64(rem) > limit-ok.Load() {
		t.Fatalf("%d OK answers but %d of %d remain: an admitted request was lost", ok.Load(), rem, limit)
	}
	t.Logf("OK %d, OVER_LIMIT %d, errors %d (leader n%d stopped), remaining %d", ok.Load(), over.Load(), failed.Load(), leader, rem)
}
