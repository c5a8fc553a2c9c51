package service

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Allow and deny lists. A list is cluster-wide configuration replicated
// through the log (fsm keeps its canonical encoding opaque); every node
// answers it from its own replicated copy, compiled here, with no Raft
// round. Precedence is deny > allow > limits: a check a deny list matches is
// refused (ReasonDenied), one an allow list matches is allowed
// (ReasonAllowed), and neither is counted anywhere.
//
// Where a match is decided: on the node that receives the check, against
// its applied copy of the lists, at its replicated time (Lists.Times'
// applied: the leader time of the last entry applied), never its own
// clock. An entry's expiry is a leader-time instant; it has ended once the
// replicated time reaches it, which every replica reaches at the same log
// index (the leader sweeps at the end, fsm/lists.go). Where the node's
// clock and its replicated time disagree (its view may be stale), it errs
// to the side that never over-admits: a deny entry holds until the
// replicated time passes its end, an allow entry stops at the earlier of
// the two (then the check is counted). fsm/DESIGN.md "Ends in leader time".
//
// A CIDR entry matches only CheckRequest.Addr: the client address the
// front end derived itself (forward-auth with key source ip), never a key
// that happens to look like an address, so a client that picks its own key
// cannot place itself inside or outside an address range.

// Lists is the Node's replicated allow and deny lists.
type Lists interface {
	// List is this replica's canonical encoding of a list.
	List(name string) ([]byte, bool)
	// Lists lists this replica's lists sorted by name.
	Lists() []nodeapi.List
	// ListsVersion changes whenever this replica's lists change.
	ListsVersion() uint64
	// PutList stores a canonical encoding through the leader. Errors as Node's.
	PutList(ctx context.Context, name string, canonical []byte) error
	// DeleteList deletes a list through the leader; *nodeapi.Error
	// not_found when it does not exist.
	DeleteList(ctx context.Context, name string) error
	// LeaderTime is max(the local clock, the leader time of the last
	// apply), Unix ns: an estimate of now for hints (Retry-After), never
	// what decides an end.
	LeaderTime() int64
	// Times is the leader time of the last entry this replica applied
	// (replicated; it decides ends) and the node's own clock (it may only
	// make an answer more careful), Unix ns.
	Times() (applied, clock int64)
}

// List kinds.
const (
	ListAllow = "allow"
	ListDeny  = "deny"
)

// ListRequest is a list as a client gives it, and as GetList returns it.
type ListRequest struct {
	Name     string      `json:"-"`
	Kind     string      `json:"kind"`
	Entries  []ListEntry `json:"entries"`
	Policies []string    `json:"policies,omitempty"`
}

// ListEntry matches an exact key, a key prefix or, for addresses limitd
// derived itself, a CIDR (exactly one of them), until Expires (RFC 3339,
// leader time; "" never).
type ListEntry struct {
	Key     string `json:"key,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	CIDR    string `json:"cidr,omitempty"`
	Expires string `json:"expires,omitempty"`
}

// ValidateList validates r, returning its canonical encoding (expiries in
// UTC, RFC 3339 with nanoseconds) and compiled form. known reports whether
// a policy exists. Errors name the field ("entries[3].cidr").
func ValidateList(r *ListRequest, known func(string) bool) ([]byte, *Error) {
	if e := ValidatePolicyName(r.Name, "name"); e != nil {
		return nil, e
	}
	if r.Kind != ListAllow && r.Kind != ListDeny {
		return nil, Invalid("kind", `must be "allow" or "deny", got `+strconv.Quote(r.Kind))
	}
	if len(r.Entries) > nodeapi.MaxListEntries {
		return nil, Invalid("entries", "at most "+strconv.Itoa(nodeapi.MaxListEntries)+" entries per list, got "+strconv.Itoa(len(r.Entries)))
	}
	seenPolicy := make(map[string]bool, len(r.Policies))
	for i, p := range r.Policies {
		f := "policies[" + strconv.Itoa(i) + "]"
		if e := ValidatePolicyName(p, f); e != nil {
			return nil, e
		}
		if seenPolicy[p] {
			return nil, Invalid(f, "policy "+strconv.Quote(p)+" is listed twice")
		}
		seenPolicy[p] = true
		if !known(p) {
			return nil, &Error{Code: CodeInvalidArgument, Field: f, Message: "unknown policy " + strconv.Quote(p)}
		}
	}
	out := ListRequest{Kind: r.Kind, Policies: r.Policies, Entries: make([]ListEntry, len(r.Entries))}
	keys := map[string]int{}
	type pref struct {
		s string
		i int
	}
	var prefixes []pref
	type cidr struct {
		p netip.Prefix
		i int
	}
	var cidrs []cidr
	for i, en := range r.Entries {
		f := "entries[" + strconv.Itoa(i) + "]"
		n := 0
		for _, v := range []string{en.Key, en.Prefix, en.CIDR} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			return nil, Invalid(f, `an entry has exactly one of "key", "prefix" and "cidr"`)
		}
		c := ListEntry{Key: en.Key, Prefix: en.Prefix}
		switch {
		case en.Key != "":
			if e := ValidateKey(en.Key, f+".key"); e != nil {
				return nil, e
			}
			if j, dup := keys[en.Key]; dup {
				return nil, Invalid(f+".key", "duplicates entries["+strconv.Itoa(j)+"]")
			}
			keys[en.Key] = i
		case en.Prefix != "":
			if e := ValidateKey(en.Prefix, f+".prefix"); e != nil {
				return nil, e
			}
			prefixes = append(prefixes, pref{en.Prefix, i})
		default:
			p, err := netip.ParsePrefix(en.CIDR)
			if err != nil {
				return nil, Invalid(f+".cidr", "not a CIDR such as 192.0.2.0/24 or 2001:db8::/32: "+err.Error())
			}
			if p.Addr().Is4In6() || p.Addr().Zone() != "" {
				return nil, Invalid(f+".cidr", "give an IPv4 range in IPv4 form, without a zone")
			}
			if m := p.Masked(); m != p {
				return nil, Invalid(f+".cidr", "has bits set past the prefix length; did you mean "+m.String()+"?")
			}
			cidrs = append(cidrs, cidr{p, i})
			c.CIDR = p.String()
		}
		if en.Expires != "" {
			t, err := time.Parse(time.RFC3339Nano, en.Expires)
			if err != nil {
				return nil, Invalid(f+".expires", "not an RFC 3339 time such as 2026-12-31T23:59:59Z: "+err.Error())
			}
			c.Expires = t.UTC().Format(time.RFC3339Nano)
		}
		out.Entries[i] = c
	}
	// Overlaps: an entry another entry already covers would make the list's
	// meaning depend on which one's expiry wins. Sorted, a prefix (or a
	// range) that covers others comes right before one it covers.
	sort.Slice(prefixes, func(a, b int) bool { return prefixes[a].s < prefixes[b].s })
	for k := 1; k < len(prefixes); k++ {
		if strings.HasPrefix(prefixes[k].s, prefixes[k-1].s) {
			a, b := prefixes[k-1].i, prefixes[k].i
			return nil, Invalid("entries["+strconv.Itoa(max(a, b))+"].prefix", "overlaps entries["+strconv.Itoa(min(a, b))+"]")
		}
	}
	for key, i := range keys {
		for _, p := range prefixes {
			if strings.HasPrefix(key, p.s) {
				return nil, Invalid("entries["+strconv.Itoa(i)+"].key", "is covered by the prefix of entries["+strconv.Itoa(p.i)+"]")
			}
		}
		if len(prefixes) > 64 {
			break // checked below by prefix length for long lists
		}
	}
	if len(prefixes) > 64 {
		byLen := prefixIndex(func(yield func(string, int64) bool) {
			for _, p := range prefixes {
				if !yield(p.s, int64(p.i)) {
					return
				}
			}
		})
		for key, i := range keys {
			if j, ok := byLen.match(key); ok {
				return nil, Invalid("entries["+strconv.Itoa(i)+"].key", "is covered by the prefix of entries["+strconv.Itoa(int(j))+"]")
			}
		}
	}
	sort.Slice(cidrs, func(a, b int) bool {
		if c := cidrs[a].p.Addr().Compare(cidrs[b].p.Addr()); c != 0 {
			return c < 0
		}
		return cidrs[a].p.Bits() < cidrs[b].p.Bits()
	})
	for k := 1; k < len(cidrs); k++ {
		if cidrs[k].p.Overlaps(cidrs[k-1].p) {
			a, b := cidrs[k-1].i, cidrs[k].i
			return nil, Invalid("entries["+strconv.Itoa(max(a, b))+"].cidr", "overlaps entries["+strconv.Itoa(min(a, b))+"]")
		}
	}
	enc, err := json.Marshal(out)
	if err != nil {
		return nil, Internal("encoding the list: " + err.Error())
	}
	if len(enc) > nodeapi.MaxListBytes {
		return nil, Invalid("entries", "the list encodes to "+strconv.Itoa(len(enc))+" bytes, more than "+strconv.Itoa(nodeapi.MaxListBytes))
	}
	return enc, nil
}

// PutList validates and stores a list (replacing one of the same name) and
// returns it as stored.
func (s *Service) PutList(ctx context.Context, r ListRequest) (ListRequest, *Error) {
	enc, e := ValidateList(&r, func(p string) bool { _, ok := s.deps.Policies.Policy(p); return ok })
	if e != nil {
		return ListRequest{}, e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := s.deps.Lists.PutList(ctx, r.Name, enc); err != nil {
		return ListRequest{}, s.nodeError(err)
	}
	out, _ := decodeList(r.Name, enc)
	return out, nil
}

// GetList returns this replica's copy of a list.
func (s *Service) GetList(name string) (ListRequest, *Error) {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return ListRequest{}, e
	}
	enc, ok := s.deps.Lists.List(name)
	if !ok {
		return ListRequest{}, &Error{Code: CodeNotFound, Field: "name", Message: "list " + strconv.Quote(name) + " does not exist"}
	}
	l, err := decodeList(name, enc)
	if err != nil {
		return ListRequest{}, Internal("list " + strconv.Quote(name) + ": " + err.Error())
	}
	return l, nil
}

// ListLists returns this replica's lists sorted by name.
func (s *Service) ListLists() ([]ListRequest, *Error) {
	ls := s.deps.Lists.Lists()
	out := make([]ListRequest, 0, len(ls))
	for _, l := range ls {
		r, err := decodeList(l.Name, l.Config)
		if err != nil {
			return nil, Internal("list " + strconv.Quote(l.Name) + ": " + err.Error())
		}
		out = append(out, r)
	}
	return out, nil
}

// DeleteList deletes a list through the leader.
func (s *Service) DeleteList(ctx context.Context, name string) *Error {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	return s.nodeError(s.deps.Lists.DeleteList(ctx, name))
}

func decodeList(name string, enc []byte) (ListRequest, error) {
	var l ListRequest
	if err := json.Unmarshal(enc, &l); err != nil {
		return ListRequest{}, err
	}
	l.Name = name
	if l.Entries == nil {
		l.Entries = []ListEntry{}
	}
	return l, nil
}

// listSet is the node's lists compiled, for one ListsVersion.
type listSet struct {
	version uint64
	lists   []*compiledList
}

type compiledList struct {
	deny     bool
	policies map[string]bool // nil: every check
	keys     map[string]int64
	prefixes prefixMatcher
	cidrBits []int // distinct prefix lengths, longest first
	cidrs    map[netip.Prefix]int64
}

// prefixMatcher finds a key's prefix by looking up each distinct prefix
// length: work per check is the number of distinct lengths, not entries.
type prefixMatcher struct {
	lens []int
	m    map[string]int64
}

func prefixIndex(all func(yield func(string, int64) bool)) prefixMatcher {
	pm := prefixMatcher{m: map[string]int64{}}
	for p, v := range all {
		pm.m[p] = v
		if !slices.Contains(pm.lens, len(p)) {
			pm.lens = append(pm.lens, len(p))
		}
	}
	sort.Ints(pm.lens)
	return pm
}

func (pm *prefixMatcher) match(key string) (int64, bool) {
	for _, n := range pm.lens {
		if n > len(key) {
			break
		}
		if v, ok := pm.m[key[:n]]; ok {
			return v, true
		}
	}
	return 0, false
}

// never marks an entry without an expiry in the compiled maps.
const never = int64(0)

func compileList(l ListRequest) *compiledList {
	c := &compiledList{deny: l.Kind == ListDeny, keys: map[string]int64{}, cidrs: map[netip.Prefix]int64{}}
	if len(l.Policies) > 0 {
		c.policies = map[string]bool{}
		for _, p := range l.Policies {
			c.policies[p] = true
		}
	}
	exp := func(s string) int64 {
		if s == "" {
			return never
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 1 // unreadable (never produced by ValidateList): long expired
		}
		return max(t.UnixNano(), 1)
	}
	c.prefixes = prefixIndex(func(yield func(string, int64) bool) {
		for _, e := range l.Entries {
			if e.Prefix != "" && !yield(e.Prefix, exp(e.Expires)) {
				return
			}
		}
	})
	for _, e := range l.Entries {
		switch {
		case e.Key != "":
			c.keys[e.Key] = exp(e.Expires)
		case e.CIDR != "":
			p, err := netip.ParsePrefix(e.CIDR)
			if err != nil {
				continue
			}
			c.cidrs[p] = exp(e.Expires)
			if !slices.Contains(c.cidrBits, p.Bits()) {
				c.cidrBits = append(c.cidrBits, p.Bits())
			}
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(c.cidrBits)))
	return c
}

// match reports whether the list matches, and the latest expiry among the
// live entries that do (never: one of them does not expire).
func (c *compiledList) match(key string, addr netip.Addr, now int64) (until int64, ok bool) {
	live := func(exp int64) bool { return exp == never || exp > now }
	take := func(exp int64) {
		if !ok || exp == never || (until != never && exp > until) {
			until = exp
		}
		ok = true
	}
	if exp, hit := c.keys[key]; hit && live(exp) {
		take(exp)
	}
	if exp, hit := c.prefixes.match(key); hit && live(exp) {
		take(exp)
	}
	if addr.IsValid() {
		for _, b := range c.cidrBits {
			p, err := addr.Prefix(b)
			if err != nil {
				continue
			}
			if exp, hit := c.cidrs[p]; hit && live(exp) {
				take(exp)
			}
		}
	}
	return until, ok
}

// listCache holds the compiled lists of the latest version seen.
type listCache struct {
	cur atomic.Pointer[listSet]
	mu  sync.Mutex
}

func (s *Service) listSet() *listSet {
	v := s.deps.Lists.ListsVersion()
	if ls := s.lists.cur.Load(); ls != nil && ls.version == v {
		return ls
	}
	s.lists.mu.Lock()
	defer s.lists.mu.Unlock()
	if ls := s.lists.cur.Load(); ls != nil && ls.version == v {
		return ls
	}
	ls := &listSet{version: v}
	for _, l := range s.deps.Lists.Lists() {
		r, err := decodeList(l.Name, l.Config)
		if err != nil {
			continue // never produced by ValidateList; the list matches nothing
		}
		ls.lists = append(ls.lists, compileList(r))
	}
	s.lists.cur.Store(ls)
	return ls
}

// listed answers c from the lists, if one matches: deny > allow. policy is
// "" for an inline limit (then only lists without "policies" apply).
func (s *Service) listed(c *nodeapi.Check, addr netip.Addr, l *Limit) (nodeapi.Decision, bool) {
	ls := s.listSet()
	if len(ls.lists) == 0 {
		return nodeapi.Decision{}, false
	}
	applied, clock := s.deps.Lists.Times()
	allow, deny := false, false
	var until int64
	for _, cl := range ls.lists {
		if cl.policies != nil && (c.Policy == "" || !cl.policies[c.Policy]) {
			continue
		}
		if !cl.deny && (allow || deny) {
			continue // decided: another allow adds nothing, a deny wins
		}
		// A deny ends at the replicated time (never over-admits, never
		// refuses past the end apply agrees on); an allow, which admits
		// uncounted, ends at the earlier of the node's clock and it.
		at := applied
		if !cl.deny {
			at = max(applied, clock)
		}
		u, ok := cl.match(c.Key, addr, at)
		if !ok {
			continue
		}
		if cl.deny {
			if !deny || u == never || (until != never && u > until) {
				until = u
			}
			deny = true
		} else {
			allow = true
		}
	}
	d := nodeapi.Decision{Decision: algo.Decision{Limit: l.Spec.Limit}}
	switch {
	case deny:
		d.Reason = nodeapi.ReasonDenied
		d.RetryAfter = algo.Never
		if until != never {
			// A hint counted from the best estimate of now; positive while
			// the deny holds (the node's clock may be past the end its
			// replicated time has not reached).
			d.RetryAfter = time.Duration(max(until-max(applied, clock), 1))
		}
		d.ResetAfter = max(d.RetryAfter, 0)
		return d, true
	case allow:
		d.Allowed, d.Reason, d.Remaining = true, nodeapi.ReasonAllowed, l.Spec.Limit
		return d, true
	}
	return nodeapi.Decision{}, false
}

// listedAll answers what the lists decide of an atomic op. A deny on any
// check refuses the group, consuming nothing anywhere (done; the other
// checks report refused with the denial's retry, reason none). When every
// check is allow-listed the group is allowed (done). Otherwise listed, when
// not nil, holds the allow-listed checks' answers (Reason set) and the
// others are decided as a smaller group.
func (s *Service) listedAll(reqs []CheckRequest, checks []nodeapi.Check, limits []Limit) (listed []nodeapi.Decision, out CheckAllResult, done bool) {
	var deny *nodeapi.Decision
	n := 0
	for i := range checks {
		d, ok := s.listed(&checks[i], reqs[i].Addr, &limits[i])
		if !ok {
			continue
		}
		if listed == nil {
			listed = make([]nodeapi.Decision, len(checks))
		}
		listed[i] = d
		n++
		if d.Reason == nodeapi.ReasonDenied && deny == nil {
			deny = &listed[i]
		}
	}
	switch {
	case deny != nil:
		ds := make([]nodeapi.Decision, len(checks))
		for i := range ds {
			if listed[i].Reason == nodeapi.ReasonDenied {
				ds[i] = listed[i]
			} else {
				ds[i] = nodeapi.Decision{Decision: algo.Decision{Limit: limits[i].Spec.Limit, RetryAfter: deny.RetryAfter, ResetAfter: deny.ResetAfter}}
			}
			s.obs.Decided(limits[i], ds[i])
		}
		return nil, CheckAllResult{Decisions: ds, Limits: limits}, true
	case n == len(checks) && n > 0:
		for i := range listed {
			s.obs.Decided(limits[i], listed[i])
		}
		return nil, CheckAllResult{Allowed: true, Decisions: listed, Limits: limits}, true
	}
	for i := range listed {
		if listed[i].Reason != 0 {
			s.obs.Decided(limits[i], listed[i])
		}
	}
	return listed, CheckAllResult{}, false
}
