package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

func sampleOps(t testing.TB) []Op {
	sw := mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 100, Window: "1m"})
	cal := mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "month", Timezone: "America/Argentina/Buenos_Aires"})
	tb := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s", Burst: 50})
	return []Op{
		{Checks: []Check{{Key: "user:42", Policy: "api", Cost: 1}}},
		{All: true, RequestID: "req-7", Checks: []Check{
			{Key: "user:42", Policy: "per-second", Cost: 3},
			{Key: "ключ/🔑", Spec: &sw, Cost: 0},
			{Key: strings.Repeat("k", 300), Spec: &cal, Cost: 1 << 40},
		}},
		{RequestID: strings.Repeat("r", 200), Checks: []Check{{Key: "x", Spec: &tb, Cost: 2}}},
		{Checks: []Check{{Key: "neither"}, {Key: "both", Policy: "p", Spec: &tb, Cost: -5}}},
		{},
	}
}

func TestOpsRoundTrip(t *testing.T) {
	ops := sampleOps(t)
	b := AppendOps([]byte("prefix"), ops)
	if !bytes.HasPrefix(b, []byte("prefix")) {
		t.Fatal("AppendOps overwrote dst")
	}
	got, err := DecodeOps(b[len("prefix"):])
	if err != nil {
		t.Fatal(err)
	}
	want := ops
	want[4].Checks = []Check{} // decoded as empty, not nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := DecodeOps(AppendOps(nil, nil)); err != nil {
		t.Fatalf("no ops: %v", err)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	rs := []Result{
		{Allowed: true, Decisions: []Decision{{Decision: algo.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 6e10}}}},
		{Replayed: true, Decisions: []Decision{
			{Decision: algo.Decision{Limit: 1 << 50, RetryAfter: algo.Never, ResetAfter: 1}},
			{Decision: algo.Decision{Allowed: true, Delay: 12345}, ShadowRefused: true},
		}},
		{Err: &Error{Code: "not_found", Field: "checks[1].policy", Message: `policy "x" does not exist`}},
	}
	got, err := DecodeResults(AppendResults(nil, rs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, rs)
	}
}

// allEncodings is one encoding of every command type and wire format.
func allEncodings(t testing.TB) map[string][]byte {
	ops := sampleOps(t)
	tb := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s"})
	return map[string][]byte{
		"check":           EncodeCheck(nil, t0, int64(DefaultRetention), ops[:3]),
		"put_policy":      EncodePutPolicy(Policy{Name: "api", Spec: tb, Shadow: true}),
		"delete_policy":   EncodeDeletePolicy("api"),
		"reset_key":       EncodeResetKey(Check{Key: "user:1", Spec: &tb, Cost: 9}),
		"expire":          EncodeExpire(t0, 10_000),
		"set_node":        EncodeSetNode("node-1", "10.0.0.1:8080"),
		"remove_node":     EncodeRemoveNode("node-1"),
		"put_domain":      EncodePutDomain("shop", []byte("domain: shop\n")),
		"delete_domain":   EncodeDeleteDomain("shop"),
		"grant_lease":     EncodeGrantLease(nil, t0, "node-1", []LeaseRequest{{ID: 7, Check: Check{Key: "user:1", Policy: "api"}}}),
		"return_lease":    EncodeReturnLease(nil, t0, "node-1", []LeaseReturn{{ID: 7, Check: Check{Key: "user:1", Policy: "api"}, Unspent: 3}}),
		"put_plan":        EncodePutPlan(Plan{Name: "pro", Limits: []PlanLimit{{Name: "daily", Spec: tb}}}),
		"delete_plan":     EncodeDeletePlan("pro"),
		"put_rule":        EncodePutPrefixRule(PrefixRule{Prefix: "org:", Plan: "pro"}),
		"delete_rule":     EncodeDeletePrefixRule("org:"),
		"default_plan":    EncodeSetDefaultPlan("pro"),
		"assign_plans":    EncodeAssignPlans([]Assignment{{Key: "user:1", Plan: "pro"}}),
		"put_override":    EncodePutOverride("user:1", Override{Limits: []LimitOverride{{Name: "daily", Limit: 9}}, Expires: t0}),
		"del_override":    EncodeDeleteOverride("user:1"),
		"put_list":        EncodePutList("bots", []byte(`{"kind":"deny"}`)),
		"delete_list":     EncodeDeleteList("bots"),
		"unban":           EncodeUnban("user:1", "api"),
		"charge_degraded": EncodeChargeDegraded(t0, "n1-1", []DegradedCharge{{Policy: "api", Key: "user:1", Units: 3}}),
		"put_webhook":     EncodePutWebhook(nodeapi.Webhook{Name: "ops", URL: "https://hooks.example/limitd", Secret: "s3cret"}),
		"delete_webhook":  EncodeDeleteWebhook("ops"),
		"ack_events":      EncodeAckEvents([]uint64{7 << 16, 7<<16 | 1}),
		"hs_own":          EncodeHashSlotsOwn(t0, []uint16{0, 1, 4095}),
		"hs_freeze":       EncodeHashSlotFreeze(t0, 7, 3),
		"hs_unfreeze":     EncodeHashSlotUnfreeze(7, 3),
		"hs_import":       EncodeHashSlotImport(t0, 7, 3, t0, []byte("blob")),
		"hs_drop":         EncodeHashSlotDrop(7, 3),
	}
}

func TestCommandsDecode(t *testing.T) {
	tb := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s"})
	enc := allEncodings(t)
	var c command
	for name, check := range map[string]func() bool{
		"check": func() bool {
			return c.typ == CmdCheck && c.now == t0 && c.retention == int64(DefaultRetention) && len(c.ops) == 3 && len(c.checks) == 5 &&
				c.ops[1].all && string(c.ops[1].requestID) == "req-7" && c.ops[1].first == 1 && c.ops[1].n == 3
		},
		"put_policy": func() bool {
			return c.typ == CmdPutPolicy && c.policyErr == nil && reflect.DeepEqual(c.policy, Policy{Name: "api", Spec: tb, Shadow: true})
		},
		"delete_policy": func() bool { return c.typ == CmdDeletePolicy && c.name == "api" },
		"reset_key": func() bool {
			return c.typ == CmdResetKey && string(c.checks[0].key) == "user:1" && c.checks[0].kind == limitSpec && c.checks[0].cost == 0
		},
		"expire":      func() bool { return c.typ == CmdExpire && c.now == t0 && c.max == 10_000 },
		"set_node":    func() bool { return c.typ == CmdSetNode && c.name == "node-1" && c.addr == "10.0.0.1:8080" },
		"remove_node": func() bool { return c.typ == CmdRemoveNode && c.name == "node-1" },
		"grant_lease": func() bool {
			return c.typ == CmdGrantLease && c.now == t0 && string(c.holder) == "node-1" && len(c.leases) == 1 &&
				c.leases[0].id == 7 && string(c.leases[0].check.key) == "user:1" && string(c.leases[0].check.policy) == "api"
		},
		"return_lease": func() bool {
			return c.typ == CmdReturnLease && len(c.leases) == 1 && c.leases[0].id == 7 && c.leases[0].check.cost == 3
		},
	} {
		if err := decodeCommand(&c, enc[name]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !check() {
			t.Fatalf("%s decoded as %+v", name, c)
		}
	}
}

func TestDecodersRejectEveryTruncation(t *testing.T) {
	var c command
	for name, b := range allEncodings(t) {
		for n := 0; n < len(b); n++ {
			if err := decodeCommand(&c, b[:n]); err == nil {
				t.Fatalf("%s truncated to %d of %d bytes decoded", name, n, len(b))
			}
		}
		if err := decodeCommand(&c, append(bytes.Clone(b), 0)); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("%s with a trailing byte: %v", name, err)
		}
	}
	ops := AppendOps(nil, sampleOps(t))
	results := AppendResults(nil, []Result{{Allowed: true, Decisions: make([]Decision, 3)}, {Err: &Error{Code: "c"}}})
	for n := 0; n < len(ops); n++ {
		if _, err := DecodeOps(ops[:n]); err == nil {
			t.Fatalf("ops truncated to %d of %d bytes decoded", n, len(ops))
		}
	}
	for n := 0; n < len(results); n++ {
		if _, err := DecodeResults(results[:n]); err == nil {
			t.Fatalf("results truncated to %d of %d bytes decoded", n, len(results))
		}
	}
}

func TestDecodersBoundAllocation(t *testing.T) {
	// Counts larger than the input could hold are refused before anything
	// is allocated for them.
	huge := binary.AppendUvarint(nil, 1<<40)
	for name, decode := range map[string]func() error{
		"ops":     func() error { _, err := DecodeOps(append([]byte{opsVersion}, huge...)); return err },
		"results": func() error { _, err := DecodeResults(append([]byte{resultsVersion}, huge...)); return err },
		"checks of an op": func() error {
			_, err := DecodeOps(append([]byte{opsVersion, 1, 0}, huge...))
			return err
		},
		"command": func() error {
			var c command
			return decodeCommand(&c, append([]byte{CmdCheck, cmdVersion, 0, 0, opsVersion}, huge...))
		},
	} {
		allocs := testing.AllocsPerRun(10, func() {
			if err := decode(); err == nil || !strings.Contains(err.Error(), "exceeds") {
				t.Fatalf("%s: %v", name, err)
			}
		})
		if allocs > 64 { // a few for the error; a slice per claimed item would be 1<<40
			t.Fatalf("%s: %v allocations for a refused count", name, allocs)
		}
	}
}

func TestDecodeOpsValidatesSpecs(t *testing.T) {
	bad := algo.Spec{Algorithm: algo.FixedWindow, Limit: 5} // no window
	b := AppendOps(nil, []Op{{Checks: []Check{{Key: "k", Spec: &bad, Cost: 1}}}})
	if _, err := DecodeOps(b); err == nil {
		t.Fatal("DecodeOps accepted an invalid inline spec")
	}
}

func TestInsertLength(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 20000} {
		body := bytes.Repeat([]byte{0xAB}, n)
		dst := append([]byte("head"), 0)
		dst = append(dst, body...)
		dst = insertLength(dst, 4)
		d := decoder{b: dst, off: 4}
		if got := d.bytes(); d.err != nil || !bytes.Equal(got, body) || d.off != len(dst) {
			t.Fatalf("body of %d bytes: err %v, got %d bytes", n, d.err, len(got))
		}
	}
}

func TestValidateCommand(t *testing.T) {
	tb := mustSpec(t, algo.Config{Algorithm: "token_bucket", Limit: 5, Window: "1s"})
	noWindow := algo.Spec{Algorithm: algo.FixedWindow, Limit: 5}
	for _, tc := range []struct {
		name string
		cmd  []byte
		ok   bool
	}{
		{"put policy", EncodePutPolicy(Policy{Name: "p", Spec: tb}), true},
		{"delete policy", EncodeDeletePolicy("p"), true},
		{"reset under a policy", EncodeResetKey(Check{Key: "k", Policy: "p"}), true},
		{"reset under an inline limit", EncodeResetKey(Check{Key: "k", Spec: &tb}), true},
		{"invalid policy spec", EncodePutPolicy(Policy{Name: "p", Spec: noWindow}), false},
		{"invalid inline limit", EncodeResetKey(Check{Key: "k", Spec: &noWindow}), false},
		{"check", EncodeCheck(nil, t0, 0, []Op{single("k", "p", 1)}), false},
		{"expire", EncodeExpire(t0, 1), false},
		{"set node", EncodeSetNode("n", "a"), false},
		{"unknown type", []byte{99, cmdVersion}, false},
		{"truncated", EncodeDeletePolicy("p")[:3], false},
	} {
		if err := ValidateCommand(tc.cmd); (err == nil) != tc.ok {
			t.Errorf("%s: ValidateCommand = %v", tc.name, err)
		}
	}
}
