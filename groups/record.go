package groups

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/limitd/limitd/hashslot"
)

// record is the groups record group 0 holds: the data groups' count, the
// --data-groups spelling that chose it ("auto" or the number) and the slot
// map. One line, so that it fits the node table's string.
type record struct {
	groups int
	flag   string
	slots  *hashslot.Map
}

func (r record) String() string {
	b, _ := r.slots.MarshalBinary()
	return "limitd-groups/1 groups=" + strconv.Itoa(r.groups) + " flag=" + r.flag + " map=" + base64.RawURLEncoding.EncodeToString(b)
}

func parseRecord(s string) (record, error) {
	var r record
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "limitd-groups/1" {
		return r, fmt.Errorf("groups record %q: not of this build's form", s)
	}
	kv := map[string]string{}
	for _, p := range f[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return r, fmt.Errorf("groups record %q: %q is not key=value", s, p)
		}
		kv[k] = v
	}
	n, err := strconv.Atoi(kv["groups"])
	if err != nil || n < 1 {
		return r, fmt.Errorf("groups record %q: bad groups", s)
	}
	b, err := base64.RawURLEncoding.DecodeString(kv["map"])
	if err != nil {
		return r, fmt.Errorf("groups record %q: map: %v", s, err)
	}
	m := &hashslot.Map{}
	if err := m.UnmarshalBinary(b); err != nil {
		return r, fmt.Errorf("groups record %q: map: %v", s, err)
	}
	return record{groups: n, flag: kv["flag"], slots: m}, nil
}

// newRecord is the record of a cluster bootstrapped with n data groups:
// slots split evenly over groups 1..n, epoch 1.
func newRecord(n int, flag string) (record, error) {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(i + 1)
	}
	m, err := hashslot.Even(ids)
	if err != nil {
		return record{}, err
	}
	return record{groups: n, flag: flag, slots: m}, nil
}

// matches says why a node started with n data groups (spelled flag) may
// not serve a cluster recorded as r ("" when it may): "auto" is a choice
// every node makes alike only when every node was given "auto".
func (r record) mismatch(n int, flag string) string {
	switch {
	case flag == "auto" && r.flag == "auto":
		return ""
	case flag == "auto" || r.flag == "auto":
		return fmt.Sprintf("this node has --data-groups %s, the cluster was bootstrapped with --data-groups %s (%d data groups)", flag, r.flag, r.groups)
	case n != r.groups:
		return fmt.Sprintf("this node has --data-groups %d, the cluster was bootstrapped with %d data groups", n, r.groups)
	}
	return ""
}
