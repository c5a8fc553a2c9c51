package service

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// listNode is node with replicated lists and a clock the test sets.
type listNode struct {
	*node
	lmu     sync.Mutex
	lists   map[string][]byte
	version uint64
	now     int64
	skew    int64 // the node's clock minus the replicated time
}

func newListNode(policies ...string) *listNode {
	return &listNode{node: newNode(policies...), lists: map[string][]byte{}, now: time.Unix(1_800_000_000, 0).UnixNano()}
}

func (n *listNode) List(name string) ([]byte, bool) {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	b, ok := n.lists[name]
	return b, ok
}
func (n *listNode) Lists() []nodeapi.List {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	var out []nodeapi.List
	for k, v := range n.lists {
		out = append(out, nodeapi.List{Name: k, Config: v})
	}
	return out
}
func (n *listNode) ListsVersion() uint64 { n.lmu.Lock(); defer n.lmu.Unlock(); return n.version }
func (n *listNode) PutList(_ context.Context, name string, enc []byte) error {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	n.lists[name] = enc
	n.version++
	return nil
}
func (n *listNode) DeleteList(_ context.Context, name string) error {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	if _, ok := n.lists[name]; !ok {
		return &nodeapi.Error{Code: nodeapi.CodeNotFound, Message: "no such list"}
	}
	delete(n.lists, name)
	n.version++
	return nil
}
func (n *listNode) LeaderTime() int64 {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	return max(n.now, n.now+n.skew)
}

// Times: now is the replicated (applied) leader time; the node's own clock
// is skew away from it.
func (n *listNode) Times() (int64, int64) {
	n.lmu.Lock()
	defer n.lmu.Unlock()
	return n.now, n.now + n.skew
}

func TestListValidationNamesTheField(t *testing.T) {
	n := newListNode("api")
	s := New(DepsOf(n), Config{})
	cases := []struct {
		r     ListRequest
		field string
	}{
		{ListRequest{Name: "l", Kind: "block"}, "kind"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Key: "a"}, {CIDR: "10.0.0.0/33"}}}, "entries[1].cidr"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{CIDR: "10.0.0.1/8"}}}, "entries[0].cidr"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Key: "a"}, {Key: "b"}, {Key: "a"}}}, "entries[2].key"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Prefix: "ab"}, {Prefix: "a"}}}, "entries[1].prefix"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Key: "abc"}, {Prefix: "ab"}}}, "entries[0].key"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{CIDR: "10.0.0.0/8"}, {CIDR: "10.1.0.0/16"}}}, "entries[1].cidr"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Key: "a", Prefix: "b"}}}, "entries[0]"},
		{ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{{Key: "a", Expires: "tomorrow"}}}, "entries[0].expires"},
		{ListRequest{Name: "l", Kind: "allow", Policies: []string{"api", "nope"}}, "policies[1]"},
		{ListRequest{Name: "", Kind: "allow"}, "name"},
	}
	for _, c := range cases {
		_, e := s.PutList(context.Background(), c.r)
		if e == nil || e.Code != CodeInvalidArgument || e.Field != c.field {
			t.Errorf("%+v: got %v, want invalid_argument on %s", c.r, e, c.field)
		}
	}
	if len(n.lists) != 0 {
		t.Fatalf("a refused list was stored: %v", n.lists)
	}
	l, e := s.PutList(context.Background(), ListRequest{Name: "l", Kind: "deny", Entries: []ListEntry{
		{CIDR: "192.0.2.0/24", Expires: "2030-01-01T01:00:00+01:00"}, {Key: "k"}}})
	if e != nil {
		t.Fatal(e)
	}
	if l.Entries[0].Expires != "2030-01-01T00:00:00Z" || l.Entries[1].Key != "k" {
		t.Fatalf("stored %+v", l)
	}
	if got, e := s.GetList("l"); e != nil || len(got.Entries) != 2 || got.Kind != "deny" {
		t.Fatalf("GetList: %+v %v", got, e)
	}
}

// TestListPrecedenceModel: whatever the lists, a check is refused when a
// deny list that applies to its policy has a live entry matching it,
// otherwise allowed when an allow list does, and otherwise decided by its
// limit (it reaches the node); list answers are never counted. Live is
// decided on the replicated leader time whatever the node's own clock says
// (a deny holds until the replicated time passes its end: never
// over-admits); an allow entry ends at the earlier of the node's clock and
// the replicated time (the check is then counted).
func TestListPrecedenceModel(t *testing.T) {
	keys := []string{"a", "ab", "abc", "b", "bc", "10.0.0.1", "10.0.1.1"}
	prefixes := []string{"a", "b", "x"}
	cidrs := []string{"10.0.0.0/24", "10.0.0.0/16", "10.0.0.1/32", "2001:db8::/32"}
	policies := []string{"p1", "p2"}
	rapid.Check(t, func(t *rapid.T) {
		n := newListNode(policies...)
		s := New(DepsOf(n), Config{})
		type entry struct {
			kind, value string
			exp         int64 // 0: never
		}
		type list struct {
			deny     bool
			policies []string
			entries  []entry
		}
		var model []list
		for i := range rapid.IntRange(0, 4).Draw(t, "lists") {
			l := list{deny: rapid.Bool().Draw(t, "deny")}
			if rapid.Bool().Draw(t, "scoped") {
				l.policies = []string{rapid.SampledFrom(policies).Draw(t, "policy")}
			}
			r := ListRequest{Name: "l" + string(rune('0'+i)), Kind: ListAllow, Policies: l.policies}
			if l.deny {
				r.Kind = ListDeny
			}
			for range rapid.IntRange(0, 4).Draw(t, "entries") {
				var e entry
				var le ListEntry
				switch rapid.IntRange(0, 2).Draw(t, "type") {
				case 0:
					e = entry{kind: "key", value: rapid.SampledFrom(keys).Draw(t, "key")}
					le.Key = e.value
				case 1:
					e = entry{kind: "prefix", value: rapid.SampledFrom(prefixes).Draw(t, "prefix")}
					le.Prefix = e.value
				default:
					e = entry{kind: "cidr", value: rapid.SampledFrom(cidrs).Draw(t, "cidr")}
					le.CIDR = e.value
				}
				if rapid.Bool().Draw(t, "expires") {
					e.exp = n.now + int64(rapid.IntRange(1, 100).Draw(t, "exp"))*int64(time.Second)
					le.Expires = time.Unix(0, e.exp).UTC().Format(time.RFC3339Nano)
				}
				r.Entries = append(r.Entries, le)
				l.entries = append(l.entries, e)
			}
			if _, err := s.PutList(context.Background(), r); err != nil {
				continue // overlapping entries: refused, and not in the model
			}
			model = append(model, l)
		}
		for range rapid.IntRange(1, 20).Draw(t, "checks") {
			n.lmu.Lock()
			n.now += int64(rapid.IntRange(0, 30).Draw(t, "advance")) * int64(time.Second)
			n.skew = int64(rapid.IntRange(-40, 40).Draw(t, "clockSkew")) * int64(time.Second)
			now, clock := n.now, n.now+n.skew
			n.lmu.Unlock()
			key := rapid.SampledFrom(keys).Draw(t, "checkKey")
			policy := rapid.SampledFrom(policies).Draw(t, "checkPolicy")
			fromIP := rapid.Bool().Draw(t, "fromIP")
			req := CheckRequest{Key: key, Policy: policy, Cost: 1}
			if a, err := netip.ParseAddr(key); err == nil && fromIP {
				req.Addr = a
			}
			matches := func(l list) bool {
				if l.policies != nil && l.policies[0] != policy {
					return false
				}
				for _, e := range l.entries {
					if e.exp != 0 && (e.exp <= now || !l.deny && e.exp <= clock) {
						continue
					}
					switch e.kind {
					case "key":
						if e.value == key {
							return true
						}
					case "prefix":
						if strings.HasPrefix(key, e.value) {
							return true
						}
					case "cidr":
						if req.Addr.IsValid() && netip.MustParsePrefix(e.value).Contains(req.Addr) {
							return true
						}
					}
				}
				return false
			}
			want := nodeapi.ReasonNone
			for _, l := range model {
				if matches(l) && !l.deny && want == nodeapi.ReasonNone {
					want = nodeapi.ReasonAllowed
				}
			}
			for _, l := range model {
				if matches(l) && l.deny {
					want = nodeapi.ReasonDenied
				}
			}
			before := len(n.ops)
			res, e := s.Check(context.Background(), &req)
			if e != nil {
				t.Fatal(e)
			}
			reached := len(n.ops) > before
			if res.Decision.Reason != want || reached != (want == nodeapi.ReasonNone) {
				t.Fatalf("check %q under %s (addr %v) at %d: reason %v reached %v, want %v", key, policy, req.Addr, now, res.Decision.Reason, reached, want)
			}
			if want == nodeapi.ReasonDenied && res.Decision.Allowed || want == nodeapi.ReasonAllowed && !res.Decision.Allowed {
				t.Fatalf("reason %v with allowed %v", want, res.Decision.Allowed)
			}
			if want == nodeapi.ReasonDenied && res.Decision.RetryAfter != algo.Never && res.Decision.RetryAfter <= 0 {
				t.Fatalf("denied with retry_after %v", res.Decision.RetryAfter)
			}
		}
	})
}
