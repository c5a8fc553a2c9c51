package fsm

import (
	"encoding/binary"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// TestGoldenLogEncodings pins the Raft log entries and the results wire form
// (also stored for request-id replays) to bytes written by the release before
// algo's windows and durations became time.Duration: entries already in a
// log or a snapshot must decode to the same commands and results.
func TestGoldenLogEncodings(t *testing.T) {
	spec, err := algo.Spec{Algorithm: algo.TokenBucket, Limit: 2, Window: time.Second, Burst: 3}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	now := int64(1_735_689_600)*int64(time.Second) + 123_456_789
	ops := []Op{
		{Checks: []Check{{Key: "k", Spec: &spec, Cost: 2}}},
		{Checks: []Check{{Key: "a", Policy: "p", Cost: 1}, {Key: "b", Policy: "q"}}, All: true, RequestID: "r1"},
	}
	rs := []Result{
		{Allowed: true, Decisions: []Decision{{Decision: algo.Decision{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 500 * time.Millisecond, Delay: 250}}}},
		{Decisions: []Decision{
			{Decision: algo.Decision{Limit: 3, ResetAfter: 9 * time.Second, RetryAfter: 6 * time.Second}},
			{Decision: algo.Decision{Limit: 3, RetryAfter: algo.Never}, ShadowRefused: true},
		}},
	}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"check", EncodeCheck(nil, now, int64(10*time.Minute), ops),
			"0101aab496fbd89fb4963080c0cbacf6220102000102016b0c0104028094ebdc0303000000040302723102010161017002010162017100"},
		{"put policy", EncodePutPolicy(Policy{Name: "p", Spec: spec, Shadow: true}), "0201010170010104028094ebdc0303000000"},
		{"results", AppendResults(nil, rs), "010201010104028094ebdc0300f403000200060080e888874380f085da2c00020600000100"},
	} {
		if got := hex.EncodeToString(tc.got); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.name, got, tc.want)
		}
	}
	// And back: the same bytes decode to the same values.
	b, _ := hex.DecodeString("010201010104028094ebdc0300f403000200060080e888874380f085da2c00020600000100")
	back, err := DecodeResults(b)
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Errorf("DecodeResults = %+v, %v; want %+v", back, err, rs)
	}
	cmd, _ := hex.DecodeString("0101aab496fbd89fb4963080c0cbacf6220102000102016b0c0104028094ebdc0303000000040302723102010161017002010162017100")
	header := 2 + len(binary.AppendVarint(binary.AppendVarint(nil, now), int64(10*time.Minute))) // type, version, now, retention
	gotOps, err := DecodeOps(cmd[header:])
	if err != nil || !reflect.DeepEqual(gotOps, ops) {
		t.Errorf("DecodeOps = %+v, %v; want %+v", gotOps, err, ops)
	}
}
