package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
)

// Bounds on one RLS request.
const (
	// MaxRequestDescriptors bounds the descriptors of one request.
	MaxRequestDescriptors = 64
	// MaxRequestEntries bounds the entries of one descriptor.
	MaxRequestEntries = 64
	// MaxKeyLen bounds the counter key a descriptor makes (the state
	// machine's key limit).
	MaxKeyLen = 1024
)

// Request is an RLS request (envoy.service.ratelimit.v3.RateLimitRequest).
type Request struct {
	Domain      string
	Descriptors []RequestDescriptor
	// HitsAddend is the cost of each descriptor that has none of its own;
	// 0 means 1.
	HitsAddend uint32
}

// RequestDescriptor is one descriptor of a request.
type RequestDescriptor struct {
	Entries []Entry
	// Limit, when set, replaces the configured rule (envoy's limit override).
	Limit *Override
	// HitsAddend, when set, is this descriptor's cost (0 is a peek).
	HitsAddend *uint64
	// Negative (envoy's is_negative_hits) gives the cost back instead of
	// spending it: a request's descriptors are all negative or none
	// (service/reserve.go).
	Negative bool
}

// Override is a limit sent with a descriptor.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
	Multiplier      uint32 // 0 or 1: one unit
}

// RequestError is a request that cannot be decided; Field names the request
// field ("descriptors[1].hits_addend").
type RequestError struct {
	Field   string
	Message string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Message }

// Kind is what deciding a descriptor takes.
type Kind uint8

const (
	// NoLimit: no rule matched (or it was replaced): OK, nothing counted.
	NoLimit Kind = iota
	// Unlimited: the rule is unlimited: OK with remaining MaxUint32.
	Unlimited
	// Blocked: requests_per_unit 0: every hit is over the limit, nothing is
	// stored; a zero cost is OK.
	Blocked
	// Checked: a check of Key under Spec for Cost.
	Checked
	// PlanChecked: a check of Key under the key's plan for Cost (a
	// descriptor with plan: true); decided on its own, atomically over the
	// plan's limits, not in the request's all-or-nothing group (the state
	// machine decides a plan check as one op by itself).
	PlanChecked
)

// Item is one descriptor's part of a plan.
type Item struct {
	Kind Kind
	Rule *Rule // nil for NoLimit
	Key  string
	Spec algo.Spec
	Cost int64
}

// Group is a set of Checked items to decide in one step. When All is set it
// is all-or-nothing; when Peek is set the items are checked with cost 0
// (another descriptor already refuses, so an atomic request spends nothing).
type Group struct {
	Items []int
	All   bool
	Peek  bool
}

// Plan is how to decide one request: its items (one per descriptor) and the
// groups of checks to run.
type Plan struct {
	Items  []Item
	Groups []Group
}

// KeyPrefix starts every counter key made from a descriptor, so RLS counters
// never share state with keys of limitd's own API.
const KeyPrefix = "rls:"

// NewPlan resolves a request against a domain (nil when the domain is not
// configured: like envoy ratelimit, every descriptor is then OK). It matches
// each descriptor, applies limit overrides and `replaces`, and groups the
// checks: non-shadow checks form one all-or-nothing group under atomic
// counting, while shadow rules and independent counting decide each
// descriptor on its own.
func NewPlan(d *Domain, req *Request) (*Plan, error) {
	switch {
	case req.Domain == "":
		return nil, &RequestError{Field: "domain", Message: "required"}
	case len(req.Descriptors) == 0:
		return nil, &RequestError{Field: "descriptors", Message: "required (at least one descriptor)"}
	case len(req.Descriptors) > MaxRequestDescriptors:
		return nil, &RequestError{Field: "descriptors", Message: fmt.Sprintf("more than %d descriptors", MaxRequestDescriptors)}
	}
	p := &Plan{Items: make([]Item, len(req.Descriptors))}
	defaultCost := int64(max(req.HitsAddend, 1))
	replaced := map[string]bool{}
	for i := range req.Descriptors {
		rd := &req.Descriptors[i]
		field := fmt.Sprintf("descriptors[%d]", i)
		if len(rd.Entries) > MaxRequestEntries {
			return nil, &RequestError{Field: field + ".entries", Message: fmt.Sprintf("more than %d entries", MaxRequestEntries)}
		}
		cost := defaultCost
		if rd.HitsAddend != nil {
			if *rd.HitsAddend > uint64(algo.MaxLimit) {
				return nil, &RequestError{Field: field + ".hits_addend", Message: fmt.Sprintf("larger than %d", algo.MaxLimit)}
			}
			cost = int64(*rd.HitsAddend)
		}
		it := &p.Items[i]
		it.Cost = cost
		if d == nil {
			continue
		}
		var shared []string
		switch {
		case rd.Limit != nil:
			r, err := overrideRule(d.Name(), rd)
			if err != nil {
				return nil, &RequestError{Field: field + ".limit." + err.Field, Message: err.Message}
			}
			it.Rule = r
		default:
			m := d.Match(rd.Entries)
			if m == nil {
				continue
			}
			it.Rule, shared = m.Rule, m.Shared
		}
		for _, name := range it.Rule.Replaces {
			replaced[name] = true
		}
		switch {
		case it.Rule.Plan:
			it.Kind = PlanChecked
			if len(rd.Entries) > 0 {
				it.Key = rd.Entries[len(rd.Entries)-1].Value
			}
			if it.Key == "" || len(it.Key) > MaxKeyLen {
				return nil, &RequestError{Field: field + ".entries", Message: fmt.Sprintf("the last entry's value is the key of a plan check: 1 to %d bytes", MaxKeyLen)}
			}
		case it.Rule.Unlimited:
			it.Kind = Unlimited
		case it.Rule.RequestsPerUnit == 0:
			it.Kind = Blocked
		default:
			it.Kind = Checked
			it.Spec = it.Rule.Spec
			it.Key = counterKey(d.Name(), rd.Entries, shared)
			if len(it.Key) > MaxKeyLen {
				return nil, &RequestError{Field: field + ".entries", Message: fmt.Sprintf("keys and values longer than %d bytes in all", MaxKeyLen)}
			}
		}
	}
	// A rule whose name another matched rule replaces is dropped, as in
	// envoy ratelimit (unlimited rules replace too).
	for i := range p.Items {
		it := &p.Items[i]
		if it.Rule != nil && it.Rule.Name != "" && replaced[it.Rule.Name] {
			*it = Item{Cost: it.Cost}
		}
	}
	p.group(d)
	return p, nil
}

func (p *Plan) group(d *Domain) {
	var main, shadow, plans []int
	blocked := false
	for i := range p.Items {
		it := &p.Items[i]
		switch {
		case it.Kind == Blocked && !it.Rule.Shadow && it.Cost > 0:
			blocked = true
		case it.Kind == PlanChecked:
			plans = append(plans, i)
		case it.Kind != Checked:
		case it.Rule.Shadow:
			shadow = append(shadow, i)
		default:
			main = append(main, i)
		}
	}
	if d != nil && d.Counting() == CountIndependent {
		if all := append(append(main, shadow...), plans...); len(all) > 0 {
			p.Groups = append(p.Groups, Group{Items: all})
		}
		return
	}
	if len(main) > 0 {
		p.Groups = append(p.Groups, Group{Items: main, All: true, Peek: blocked})
	}
	if len(shadow) > 0 {
		p.Groups = append(p.Groups, Group{Items: shadow})
	}
	if len(plans) > 0 {
		// Each decided on its own; a blocked descriptor still means an
		// atomic request spends nothing.
		p.Groups = append(p.Groups, Group{Items: plans, Peek: blocked})
	}
}

// overrideRule is the rule of a descriptor that carries its own limit.
func overrideRule(domain string, rd *RequestDescriptor) (*Rule, *Error) {
	o := rd.Limit
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range rd.Entries {
		b.WriteString("." + e.Key)
		if e.Value != "" {
			b.WriteString("_" + e.Value)
		}
	}
	r := &Rule{FullKey: b.String(), Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit}
	spec, err := RuleSpec(o.Unit, o.Multiplier, o.RequestsPerUnit, "", 0, "")
	if err != nil {
		return nil, err.(*Error)
	}
	r.Spec = spec
	return r, nil
}

// counterKey is the state key of a descriptor: the domain and every entry,
// with a shared wildcard pattern in place of the value where
// share_threshold applies. Lengths are written out so no two descriptors
// make the same key.
func counterKey(domain string, entries []Entry, shared []string) string {
	var b strings.Builder
	b.WriteString(KeyPrefix)
	writeLen := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	writeLen(domain)
	for i, e := range entries {
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		b.WriteByte('|')
		writeLen(e.Key)
		b.WriteByte('=')
		writeLen(v)
	}
	return b.String()
}

// Result is the outcome of one Checked item.
type Result struct {
	Decision algo.Decision
	// Limit, for a PlanChecked item, is the name of the plan limit that
	// decided ("plan/limit"), reported as the status's limit name.
	Limit string
	// Consumed is false when the item's all-or-nothing group was refused:
	// the decision's Remaining is then what would remain after a spend that
	// did not happen. (Items of a Peek group were checked with cost 0.)
	Consumed bool
}

// Response is the answer to a request.
type Response struct {
	OverLimit bool
	Statuses  []Status
}

// Status is one descriptor's answer.
type Status struct {
	OverLimit bool
	// ShadowOverLimit: the rule is in shadow mode and was over the limit;
	// reported as OK.
	ShadowOverLimit bool
	Limit           *CurrentLimit // nil when no limit applied
	Remaining       uint32
	// UntilReset is the time until the limit's window (or state) resets;
	// 0 when no limit applied.
	UntilReset time.Duration
}

// CurrentLimit is the limit a status reports.
type CurrentLimit struct {
	Name            string
	RequestsPerUnit uint32
	Unit            Unit
	Rule            *Rule
}

// Respond builds the answer from the results of the Checked items (indexed
// like Items; others are ignored) at time now.
func (p *Plan) Respond(results []Result, now time.Time) *Response {
	resp := &Response{Statuses: make([]Status, len(p.Items))}
	peeked := make([]bool, len(p.Items))
	for _, g := range p.Groups {
		for _, i := range g.Items {
			peeked[i] = g.Peek
		}
	}
	for i := range p.Items {
		it, st := &p.Items[i], &resp.Statuses[i]
		switch it.Kind {
		case NoLimit:
		case Unlimited:
			st.Remaining = math.MaxUint32
		case Blocked:
			st.Limit = currentLimit(it.Rule)
			st.OverLimit = it.Cost > 0
			st.UntilReset = epochReset(it.Rule.Unit, now)
		case Checked:
			r := &results[i]
			st.Limit = currentLimit(it.Rule)
			rem := r.Decision.Remaining
			if !r.Decision.Allowed {
				st.OverLimit = true
				rem = 0
			} else if !r.Consumed && !peeked[i] {
				rem = min(rem+it.Cost, it.Spec.Limit)
			}
			st.Remaining = uint32(min(max(rem, 0), math.MaxUint32))
			st.UntilReset = r.Decision.ResetAfter
			if st.UntilReset <= 0 && it.Spec.Calendar == algo.CalendarNone && it.Spec.Window > 0 {
				st.UntilReset = it.Spec.Window - time.Duration(now.UnixNano())%it.Spec.Window
			}
		case PlanChecked:
			// The plan's deciding limit: its window is not a unit of
			// envoy's, so the unit is UNKNOWN and the limit's name says it.
			r := &results[i]
			st.Limit = &CurrentLimit{Name: r.Limit, RequestsPerUnit: uint32(min(max(r.Decision.Limit, 0), math.MaxUint32)), Rule: it.Rule}
			st.OverLimit = !r.Decision.Allowed
			st.Remaining = uint32(min(max(r.Decision.Remaining, 0), math.MaxUint32))
			if st.OverLimit {
				st.Remaining = 0
			}
			st.UntilReset = r.Decision.ResetAfter
		}
		if st.OverLimit && it.Rule.Shadow {
			st.OverLimit, st.ShadowOverLimit = false, true
		}
		if st.OverLimit {
			resp.OverLimit = true
		}
	}
	return resp
}

func currentLimit(r *Rule) *CurrentLimit {
	return &CurrentLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Rule: r}
}

// epochReset is the time until the current unit-long window (aligned to the
// Unix epoch) ends.
func epochReset(u Unit, now time.Time) time.Duration {
	w := int64(u.Duration())
	if w <= 0 {
		return 0
	}
	return time.Duration(w - now.UnixNano()%w)
}
