package service

import (
	"context"
	"reflect"
	"testing"

	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
)

// check/all across hash slots: refused with cross_slot naming the check
// (nothing sent to the node) when the node routes by slot; decided as one
// op otherwise; counted either way. Under one {tag} it is one slot.
func TestCheckAllCrossSlot(t *testing.T) {
	ctx := context.Background()
	across := []CheckRequest{{Key: "a:1", Policy: "p", Cost: 1}, {Key: "b:2", Policy: "p", Cost: 1}}
	if hashslot.Of("a:1") == hashslot.Of("b:2") {
		t.Fatal("the test's keys share a slot")
	}
	tagged := []CheckRequest{{Key: "{u}:a", Policy: "p", Cost: 1}, {Key: "{u}:b", Policy: "p", Cost: 1}}

	n := newNode("p")
	s := New(DepsOf(n), Config{RefuseCrossSlot: true})
	_, e := s.CheckAll(ctx, across, "")
	if e == nil || e.Code != CodeCrossSlot || e.Field != "checks[1].key" || len(n.ops) != 0 {
		t.Fatalf("across slots with data groups: %+v, %d ops sent", e, len(n.ops))
	}
	if a := AnswerOf(e.Code); a.HTTPStatus != 409 {
		t.Fatalf("cross_slot answers %d", a.HTTPStatus)
	}
	if _, e := s.CheckAll(ctx, tagged, ""); e != nil || len(n.ops) != 1 {
		t.Fatalf("under one tag: %v, %d ops", e, len(n.ops))
	}
	if got := s.CrossSlotChecks(); got != 1 {
		t.Fatalf("counted %d cross-slot requests, want 1", got)
	}

	n = newNode("p")
	s = New(DepsOf(n), Config{})
	if r, e := s.CheckAll(ctx, across, ""); e != nil || !r.Allowed || len(n.ops) != 1 {
		t.Fatalf("across slots with one group: %+v %v", r, e)
	}
	if got := s.CrossSlotChecks(); got != 1 {
		t.Fatalf("counted %d cross-slot requests with one group, want 1", got)
	}
}

// A node of one group serves one group 0 owning every slot.
func TestSlotsOfOneGroup(t *testing.T) {
	n := newNode("p")
	n.status.LeaderID = "n1"
	n.status.Members = []nodeapi.Member{{ID: "n2", HTTPAddr: "127.0.0.1:8082"}, {ID: "n1", HTTPAddr: "127.0.0.1:8081"}}
	s := New(DepsOf(n), Config{})
	v, e := s.Slots(context.Background())
	if e != nil || v.Epoch != 0 || len(v.Groups) != 1 || v.Groups[0].ID != 0 || v.Groups[0].Leader != "n1" ||
		len(v.Groups[0].Slots) != 1 || v.Groups[0].Slots[0] != [2]uint16{0, hashslot.Count - 1} {
		t.Fatalf("slots %+v %v", v, e)
	}
	// The nodes by id, with the HTTP address a client sends a group's keys to.
	if want := []SlotNode{{"n1", "127.0.0.1:8081"}, {"n2", "127.0.0.1:8082"}}; !reflect.DeepEqual(v.Nodes, want) {
		t.Fatalf("nodes %+v, want %+v", v.Nodes, want)
	}
}

// epochSource is a node with data groups' slot map and its epoch.
type epochSource struct {
	epoch uint64
	open  bool
}

func (e *epochSource) Slots(context.Context) (Slots, error) { return Slots{Epoch: e.epoch}, nil }
func (e *epochSource) SlotEpoch() (uint64, bool)            { return e.epoch, e.open }

// Limitd-Slot-Epoch: absent on a one-group node and before the data groups
// are open; the map's epoch after, following its changes.
func TestSlotEpochHeader(t *testing.T) {
	if h := New(DepsOf(newNode("p")), Config{}).SlotEpochHeader(); h != nil {
		t.Fatalf("one group: %v", h)
	}
	src := &epochSource{epoch: 1}
	s := New(DepsOf(newNode("p")), Config{Slots: src})
	if h := s.SlotEpochHeader(); h != nil {
		t.Fatalf("not open: %v", h)
	}
	src.open = true
	if h := s.SlotEpochHeader(); !reflect.DeepEqual(h, []string{"1"}) {
		t.Fatalf("epoch 1: %v", h)
	}
	src.epoch = 12
	if h := s.SlotEpochHeader(); !reflect.DeepEqual(h, []string{"12"}) {
		t.Fatalf("epoch 12: %v", h)
	}
}
