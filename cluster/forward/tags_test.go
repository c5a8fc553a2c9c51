package forward

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
)

// Tags written by the leader read back unit by unit, and a malformed or
// out-of-range encoding is refused before any unit beyond the damage is
// delivered. Fails if a unit is misplaced or a bad one is delivered.
func TestUnitTags(t *testing.T) {
	units := []TaggedUnit{{Tag{1<<63 + 5, 1}, 0, 2}, {Tag{7, 300}, 2, 1}, {Tag{7, 1 << 40}, 3, 128}}
	ext := AppendTags(nil, units)
	var got []TaggedUnit
	if err := ForEachTag(ext, 131, func(tg Tag, off, n int) { got = append(got, TaggedUnit{tg, off, n}) }); err != nil {
		t.Fatalf("read tags: %v", err)
	}
	if len(got) != len(units) {
		t.Fatalf("read %d units, wrote %d", len(got), len(units))
	}
	for i := range units {
		if got[i] != units[i] {
			t.Errorf("unit %d: read %+v, wrote %+v", i, got[i], units[i])
		}
	}
	if err := ForEachTag(nil, 0, func(Tag, int, int) { t.Error("a unit from no tags") }); err != nil {
		t.Errorf("no tags: %v", err)
	}
	// Ops beyond the entry's results: the first unit fits, the last does not.
	n := 0
	err := ForEachTag(ext, 130, func(Tag, int, int) { n++ })
	if !errors.Is(err, ErrBadTags) || n != 2 {
		t.Errorf("a unit beyond the results: %d units delivered, err %v; want 2 and ErrBadTags", n, err)
	}
	for cut := 1; cut < len(ext); cut++ {
		n := 0
		err := ForEachTag(ext[:cut], 131, func(Tag, int, int) { n++ })
		if err == nil || n >= len(units) {
			t.Errorf("tags cut to %d bytes: %d units, err %v", cut, n, err)
		}
	}
	bad := append([]byte{tagsVersion + 1}, ext[1:]...)
	if err := ForEachTag(bad, 131, func(Tag, int, int) { t.Error("a unit from an unknown version") }); !errors.Is(err, ErrBadTags) {
		t.Errorf("unknown version: %v", err)
	}
}

// A frame answered from the log is delivered once: the leader's answer that
// follows is dropped without closing the stream, and results that do not
// match the frame's ops are not delivered. Fails if a call is answered
// twice, a late answer breaks the stream, or foreign results are taken.
func TestStreamEarlyAnswer(t *testing.T) {
	release := make(chan struct{})
	leaderRes := []fsm.Result{{Allowed: false}}
	c, _ := streamPair(t, func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error) {
		<-release
		return leaderRes, nil
	})
	done := make(chan []fsm.Result, 1)
	go func() {
		res, err := c.do(context.Background(), oneCheck("early"))
		if err != nil {
			t.Errorf("check answered from the log: %v", err)
		}
		done <- res
	}()
	var id uint64
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for k := range c.frames {
			id = k
		}
		return id != 0
	})
	if c.early(id, []fsm.Result{{}, {}}) {
		t.Fatal("two results taken for a frame of one op")
	}
	if c.early(id+1, []fsm.Result{{}}) {
		t.Fatal("results taken for a frame not in flight")
	}
	fromLog := []fsm.Result{{Allowed: true, Decisions: []fsm.Decision{{Decision: algo.Decision{Allowed: true, Remaining: 3}}}}}
	if !c.early(id, fromLog) {
		t.Fatal("the log's results were not delivered")
	}
	res := <-done
	if len(res) != 1 || !res[0].Allowed || res[0].Decisions[0].Remaining != 3 {
		t.Fatalf("caller got %+v, want the log's results", res)
	}
	if c.early(id, fromLog) {
		t.Fatal("a frame answered twice from the log")
	}
	// The leader's answer arrives after: dropped, the stream stays open and
	// the frame's slot is freed.
	close(release)
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.frames) == 0 })
	if c.isClosed() {
		t.Fatal("the leader's answer after the log's closed the stream")
	}
	if _, err := c.do(context.Background(), oneCheck("after")); err != nil {
		t.Fatalf("next check on the stream: %v", err)
	}
}

// A stream nonce is used by one open stream at a time, and only a valid,
// non-zero one is used at all. Fails if a second stream with the same nonce
// would have its units tagged (another node's answers delivered to it).
func TestStreamNonceClaimedOnce(t *testing.T) {
	var srv streamServer
	if got := srv.claimNonce("2a", "node:a"); got != 0x2a {
		t.Fatalf("first claim of 2a: %#x", got)
	}
	if got := srv.claimNonce("2A", "node:b"); got != 0 {
		t.Fatalf("a second stream claimed the nonce in use: %#x", got)
	}
	for _, h := range []string{"", "0", "xyz", "-1", "10000000000000000"} {
		if got := srv.claimNonce(h, "node:c"); got != 0 {
			t.Errorf("nonce header %q claimed %#x", h, got)
		}
	}
	delete(srv.nonces, 0x2a) // the first stream closed
	if got := srv.claimNonce("2a", "node:b"); got != 0x2a {
		t.Fatalf("claim after the first stream closed: %#x", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
