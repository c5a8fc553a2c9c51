package service

import (
	"context"
	"testing"
	"time"
)

// TestBatchReserveAlwaysTheLog: a reserve entry of a Batch goes to the log
// even for a key the over-limit cache refuses (its settle must find the
// charge in the key's state), while a check entry beside it is answered
// from the cache; the op carries the hold.
func TestBatchReserveAlwaysTheLog(t *testing.T) {
	n := &refusingNode{node: newNode("p"), hot: map[string]bool{"hot": true}}
	s := New(DepsOf(n), Config{})
	rs, e := s.Batch(context.Background(), []CheckRequest{
		{Key: "hot", Policy: "p", Cost: 3, Reserve: 5 * time.Second},
		{Key: "hot", Policy: "p", Cost: 1},
	}, nil)
	if e != nil || rs[0].Err != nil || rs[1].Err != nil {
		t.Fatalf("batch: %+v %v", rs, e)
	}
	if len(n.ops) != 1 || len(n.ops[0].Checks) != 1 || n.ops[0].Checks[0].Reserve != 5*time.Second || n.ops[0].Checks[0].Cost != 3 {
		t.Fatalf("ops sent: %+v, want the reserve alone", n.ops)
	}
	if !Allowed(&rs[0].Decision) || Allowed(&rs[1].Decision) {
		t.Fatalf("the reserve from the log, the check from the cache: %+v", rs)
	}
}
