package fsm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// TestCommandTable: every command type has exactly one table entry, and the
// table alone decides what decodes, what a client may propose and what
// applies — there is no second list to forget.
func TestCommandTable(t *testing.T) {
	enc := allEncodings(t)
	proposable := map[byte]bool{CmdPutPolicy: true, CmdDeletePolicy: true, CmdResetKey: true, CmdPutDomain: true, CmdDeleteDomain: true,
		CmdPutPlan: true, CmdDeletePlan: true, CmdPutPrefixRule: true, CmdDeletePrefixRule: true, CmdSetDefaultPlan: true,
		CmdAssignPlans: true, CmdPutOverride: true, CmdDeleteOverride: true,
		CmdPutList: true, CmdDeleteList: true, CmdUnban: true, CmdChargeDegraded: true,
		CmdPutWebhook: true, CmdDeleteWebhook: true}
	seen := 0
	for typ, ct := range commands {
		if ct == nil {
			var c command
			if err := decodeCommand(&c, []byte{byte(typ), cmdVersion}); !errors.Is(err, ErrUnknownCommand) {
				t.Errorf("unregistered type %d: decode = %v, want ErrUnknownCommand", typ, err)
			}
			continue
		}
		seen++
		if (ct.validate != nil) != proposable[byte(typ)] {
			t.Errorf("%s: proposable by clients = %v, want %v", ct.name, ct.validate != nil, proposable[byte(typ)])
		}
	}
	if seen != len(enc) {
		t.Fatalf("%d command types registered, %d encoders tested", seen, len(enc))
	}
	for name, b := range enc {
		if commands[b[0]] == nil {
			t.Errorf("%s: type %d not registered", name, b[0])
		}
	}

	// Registering a type twice, or one without decode or apply, is refused.
	for name, reg := range map[string]func(){
		"twice":     func() { registerCommand(CmdCheck, *commands[CmdCheck]) },
		"no decode": func() { registerCommand(200, commandType{name: "x", apply: commands[CmdCheck].apply}) },
		"no apply":  func() { registerCommand(201, commandType{name: "x", decode: commands[CmdCheck].decode}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registerCommand %s did not panic", name)
				}
			}()
			reg()
		}()
	}
	if commands[200] != nil || commands[201] != nil {
		t.Fatal("a refused registration stayed in the table")
	}
}

// TestTableDrivesApply: a command registered in the table is decoded and
// applied through it (a test-only type, removed afterwards).
func TestTableDrivesApply(t *testing.T) {
	const typ = 250
	var applied string
	registerCommand(typ, commandType{
		name:     "test",
		decode:   decodeName,
		validate: func(*command) error { return nil },
		apply: func(_ *applier, _ *persist.Tx, c *command) (interface{}, error) {
			applied = c.name
			return "ok", nil
		},
	})
	t.Cleanup(func() { commands[typ] = nil })
	b := appendString([]byte{typ, cmdVersion}, "hello")
	if err := ValidateCommand(b); err != nil {
		t.Fatalf("validate: %v", err)
	}
	f := openFSM(t, "", Options{NoSync: true})
	if r := newDriver(t, f).apply(b); r != "ok" || applied != "hello" {
		t.Fatalf("apply = %v, saw %q", r, applied)
	}
}

// TestDecodeCheckAllocatesNothing: decoding a check entry into a reused
// command allocates nothing (the apply path's zero-allocation decode).
func TestDecodeCheckAllocatesNothing(t *testing.T) {
	b := allEncodings(t)["check"]
	var c command
	if err := decodeCommand(&c, b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := decodeCommand(&c, b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("decodeCommand allocates %v times per check entry", n)
	}
}

// TestCheckEntryAllocations: applying a check entry of 16 ops on keys the
// state cache holds allocates only the response (the batch's response
// slice, the results and decisions, and the results boxed in an interface),
// nothing per op: what a follower pays per entry besides the shared commit.
func TestCheckEntryAllocations(t *testing.T) {
	f := openFSM(t, "", Options{NoSync: true, CommitEvery: 1 << 30})
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "p", Spec: mustSpec(t, algo.Config{Algorithm: "sliding_window", Limit: 1_000_000_000, Window: "1h"})})
	ops := make([]Op, 16)
	for i := range ops {
		ops[i] = single(fmt.Sprintf("key-%d", i), "p", 1)
	}
	entry := EncodeCheck(nil, t0, 0, ops)
	d.apply(entry) // the keys are now in the cache
	l := &raft.Log{Index: d.next, Type: raft.LogCommand, Data: entry}
	batch := []*raft.Log{l}
	allocs := testing.AllocsPerRun(200, func() {
		if rs, ok := f.ApplyBatch(batch)[0].([]Result); !ok || !rs[0].Allowed {
			t.Fatal("check refused")
		}
		l.Index++
	})
	if allocs > 4 {
		t.Fatalf("%v allocations per 16-op check entry, want at most 4 (the response)", allocs)
	}
}
