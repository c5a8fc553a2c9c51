package groups

import (
	"fmt"
	"testing"

	"github.com/limitd/limitd/hashslot"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// The record group 0 holds reads back as written, and a node's
// --data-groups is compared with it: a number must equal the cluster's, and
// auto goes only with auto.
func TestRecordRoundTripAndMismatch(t *testing.T) {
	r, err := newRecord(3, "3")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseRecord(r.String())
	if err != nil {
		t.Fatal(err)
	}
	if got.groups != 3 || got.flag != "3" || *got.slots != *r.slots || got.slots.Epoch != 1 {
		t.Fatalf("read back %+v, wrote %+v", got, r)
	}
	for _, c := range []struct {
		n    int
		flag string
		ok   bool
	}{{3, "3", true}, {2, "2", false}, {6, "auto", false}} {
		if why := got.mismatch(c.n, c.flag); (why == "") != c.ok {
			t.Errorf("--data-groups %s against a cluster of 3: %q", c.flag, why)
		}
	}
	auto, _ := newRecord(6, "auto")
	if why := auto.mismatch(4, "auto"); why != "" {
		t.Errorf("auto against auto refused: %s", why)
	}
	if why := auto.mismatch(6, "6"); why == "" {
		t.Error("--data-groups 6 accepted in a cluster bootstrapped with auto")
	}
	for _, bad := range []string{"", "limitd-groups/1 groups=x flag=3 map=AA", "limitd-groups/2 groups=3 flag=3 map=AA"} {
		if _, err := parseRecord(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

// An op's group is its keys' slot's owner; an op whose keys span groups has
// none (the Host refuses it with cross_slot, naming the check).
func TestGroupOfOp(t *testing.T) {
	m, err := hashslot.Even([]uint32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	var a, b string // two keys of different groups
	for i := 0; b == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if a == "" {
			a = k
		} else if m.GroupOf(k) != m.GroupOf(a) {
			b = k
		}
	}
	one := nodeapi.Op{Checks: []nodeapi.Check{{Key: "{t}" + a}, {Key: "{t}" + b}}, All: true}
	if g, ok := groupOfOp(m, &one); !ok || g != m.GroupOf("t") {
		t.Fatalf("keys under one tag: group %d %v, want %d", g, ok, m.GroupOf("t"))
	}
	two := nodeapi.Op{Checks: []nodeapi.Check{{Key: a}, {Key: b}}, All: true}
	if _, ok := groupOfOp(m, &two); ok {
		t.Fatal("keys of two groups given one group")
	}
	e := crossSlot(&two)
	if e == nil || e.Code != service.CodeCrossSlot || e.Field != "checks[1].key" {
		t.Fatalf("cross-slot refusal %+v", e)
	}
}
