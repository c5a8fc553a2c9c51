package fsm

import (
	"strings"
	"testing"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// TestLimitOptionsBlockIsStrict: a limit without options encodes exactly as
// before the block existed (no flag, no bytes), and a block this binary
// cannot read — empty, with an unknown tag, or cut short — fails the
// decoder for a policy (the node stops rather than serve a policy it
// misread) and makes a plan's limit invalid content.
func TestLimitOptionsBlockIsStrict(t *testing.T) {
	spec := algo.Spec{Algorithm: algo.FixedWindow, Limit: 5, Window: 1e9}
	plain := appendPolicy(nil, Policy{Name: "p", Spec: spec})
	if got := appendLimitOptions(nil, &nodeapi.LimitOptions{}); len(got) != 0 {
		t.Fatalf("zero options wrote %x", got)
	}
	d := decoder{b: plain}
	if p, inv := decodePolicy(&d); d.err != nil || inv != nil || p.Spec != spec || !p.Options.IsZero() {
		t.Fatalf("plain policy: %+v %v %v", p, d.err, inv)
	}
	// The flags byte follows the version and the name ("p": length 1).
	const flagsAt = 3
	for name, block := range map[string][]byte{
		"empty":       {0},
		"unknown tag": {1, 0xff, 0},
		"cut short":   {1, 0xff, 5, 1},
	} {
		b := append(append([]byte(nil), plain...), block...)
		b[flagsAt] |= policyOptions
		d := decoder{b: b}
		if _, _ = decodePolicy(&d); d.err == nil {
			t.Errorf("policy with a %s options block decoded", name)
		}
		raw := append(algo.AppendSpec(nil, spec), block...)
		if _, _, err := decodePlanLimit(raw); err == nil || !strings.Contains(err.Error(), "options") {
			t.Errorf("plan limit with a %s options block: %v", name, err)
		}
	}
	if s, o, err := decodePlanLimit(algo.AppendSpec(nil, spec)); err != nil || s != spec || !o.IsZero() {
		t.Fatalf("plain plan limit: %+v %+v %v", s, o, err)
	}
}
