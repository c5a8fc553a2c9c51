package rls

import (
	"fmt"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
)

// Unit is a rate-limit unit, numbered as in envoy's RateLimitResponse.RateLimit.Unit
// (so a proto value converts with a cast).
type Unit int32

const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = map[Unit]string{
	UnitSecond: "second", UnitMinute: "minute", UnitHour: "hour", UnitDay: "day",
	UnitWeek: "week", UnitMonth: "month", UnitYear: "year",
}

// String is the unit's name in configurations ("second", ...).
func (u Unit) String() string {
	if s, ok := unitNames[u]; ok {
		return s
	}
	return fmt.Sprintf("unit(%d)", int32(u))
}

// ParseUnit reads a unit name, case-insensitively as envoy ratelimit does.
func ParseUnit(s string) (Unit, bool) {
	s = strings.ToLower(s)
	for u, name := range unitNames {
		if name == s {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Duration is the unit's length as envoy ratelimit divides time by it: a
// month is 30 days and a year 365 days, counted from the Unix epoch.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case UnitSecond:
		return time.Second
	case UnitMinute:
		return time.Minute
	case UnitHour:
		return time.Hour
	case UnitDay:
		return day
	case UnitWeek:
		return 7 * day
	case UnitMonth:
		return 30 * day
	case UnitYear:
		return 365 * day
	}
	return 0
}

// Rule is a compiled rate_limit block.
type Rule struct {
	// FullKey is envoy ratelimit's name for the rule: the domain and the
	// descriptor path, "messaging.message_type_marketing.to_number".
	FullKey         string
	Name            string
	Replaces        []string
	Unit            Unit
	RequestsPerUnit uint32
	Unlimited       bool
	Shadow          bool
	DetailedMetric  bool
	// Plan: the descriptor is decided under the key's plan (Descriptor.Plan);
	// no other field but FullKey is set.
	Plan bool
	// Spec is the limit the rule checks with; unset when Unlimited or when
	// RequestsPerUnit is 0 (every hit is over the limit, nothing is stored).
	Spec algo.Spec
}

// Domain is a compiled, validated domain configuration. It is immutable and
// safe for concurrent use.
type Domain struct {
	config    *Config
	canonical []byte
	root      *level
	counting  Counting
}

// level is one descriptor list.
type level struct {
	exact   map[entryKey]*node // key and value (wildcard values too, matched literally)
	keyOnly map[string]*node
	wild    []wildNode // wildcard values, in configuration order
}

type entryKey struct{ key, value string }

type wildNode struct {
	key, value string
	parts      []string // the value split at '*'
	n          *node
}

// node is one configured descriptor.
type node struct {
	rule           *Rule // nil without rate_limit
	next           *level
	valueToMetric  bool
	shareThreshold bool
	pattern        string // the wildcard value, when shareThreshold
}

// Name is the domain.
func (d *Domain) Name() string { return d.config.Domain }

// Counting is how requests with several descriptors are counted.
func (d *Domain) Counting() Counting { return d.counting }

// Config returns the validated configuration (do not modify it).
func (d *Domain) Config() *Config { return d.config }

// Canonical is the replicated form of the configuration.
func (d *Domain) Canonical() []byte { return d.canonical }

// Compile validates a decoded configuration completely and builds its
// matcher. Errors are *Error values naming file (for messages), the field and
// the descriptor path.
func Compile(file string, c *Config) (*Domain, error) {
	bad := func(field, desc, msg string) error {
		return &Error{File: file, Field: field, Descriptor: desc, Message: msg}
	}
	switch {
	case c.Domain == "":
		return nil, bad("domain", "", "required (a non-empty domain name)")
	case len(c.Domain) > MaxDomainLen:
		return nil, bad("domain", "", fmt.Sprintf("longer than %d bytes", MaxDomainLen))
	}
	d := &Domain{config: c, counting: c.Counting}
	switch c.Counting {
	case "":
		d.counting = CountAtomic
	case CountAtomic, CountIndependent:
	default:
		return nil, bad("counting", "", fmt.Sprintf("unknown counting %q (want atomic or independent)", c.Counting))
	}
	var err error
	d.root, err = compileLevel(file, c.Domain, c.Descriptors, "descriptors", 1)
	if err != nil {
		return nil, err
	}
	d.canonical = c.Canonical()
	if len(d.canonical) > MaxConfigBytes {
		return nil, bad("", "", fmt.Sprintf("canonical form larger than %d bytes", MaxConfigBytes))
	}
	return d, nil
}

func compileLevel(file, parentKey string, ds []Descriptor, field string, depth int) (*level, error) {
	if depth > MaxDepth {
		return nil, &Error{File: file, Field: field, Descriptor: parentKey,
			Message: fmt.Sprintf("descriptors nested deeper than %d levels", MaxDepth)}
	}
	l := &level{exact: map[entryKey]*node{}, keyOnly: map[string]*node{}}
	for i := range ds {
		desc := &ds[i]
		f := fmt.Sprintf("%s[%d]", field, i)
		full := parentKey + "." + desc.Key
		if desc.Value != "" {
			full += "_" + desc.Value
		}
		bad := func(sub, msg string) error {
			return &Error{File: file, Line: desc.line, Field: join(f, sub), Descriptor: full, Message: msg}
		}
		if desc.Key == "" {
			return nil, bad("key", "required (a non-empty key)")
		}
		n := &node{valueToMetric: desc.ValueToMetric, shareThreshold: desc.ShareThreshold}
		wild := strings.Contains(desc.Value, "*")
		if desc.ShareThreshold {
			if !wild {
				return nil, bad("share_threshold", "only allowed with a wildcard value (one containing '*')")
			}
			n.pattern = desc.Value
		}
		if desc.Plan {
			// The key's plan holds the limits: a rule's fields would be
			// ignored, and a shared counter key would be no tenant's.
			switch {
			case desc.RateLimit != nil:
				return nil, bad("plan", "a descriptor decided under the key's plan has no rate_limit")
			case desc.ShadowMode:
				return nil, bad("shadow_mode", "not supported with plan: true")
			case desc.ShareThreshold:
				return nil, bad("share_threshold", "not supported with plan: true (the request's value is the key)")
			}
			n.rule = &Rule{FullKey: full, Plan: true}
		}
		if desc.RateLimit != nil {
			r, err := compileRule(desc, full)
			if err != nil {
				if e, ok := err.(*Error); ok {
					e.File, e.Descriptor, e.Line = file, full, desc.RateLimit.line
					e.Field = join(join(f, "rate_limit"), e.Field)
				}
				return nil, err
			}
			n.rule = r
		}
		if len(desc.Descriptors) > 0 {
			next, err := compileLevel(file, full, desc.Descriptors, f+".descriptors", depth+1)
			if err != nil {
				return nil, err
			}
			n.next = next
		}
		if desc.Value == "" {
			if l.keyOnly[desc.Key] != nil {
				return nil, bad("key", fmt.Sprintf("duplicate descriptor %q (another one in this list has the same key and no value)", desc.Key))
			}
			l.keyOnly[desc.Key] = n
			continue
		}
		ek := entryKey{desc.Key, desc.Value}
		if l.exact[ek] != nil {
			return nil, bad("value", fmt.Sprintf("duplicate descriptor %q = %q in this list", desc.Key, desc.Value))
		}
		l.exact[ek] = n
		if wild {
			l.wild = append(l.wild, wildNode{key: desc.Key, value: desc.Value, parts: strings.Split(desc.Value, "*"), n: n})
		}
	}
	return l, nil
}

// compileRule validates a rate_limit block. Error fields are relative to it.
func compileRule(desc *Descriptor, full string) (*Rule, error) {
	rl := desc.RateLimit
	bad := func(field, msg string) error { return &Error{Field: field, Message: msg} }
	r := &Rule{
		FullKey: full, Name: rl.Name, Unlimited: rl.Unlimited, Shadow: desc.ShadowMode,
		DetailedMetric: desc.DetailedMetric, RequestsPerUnit: rl.RequestsPerUnit,
	}
	seen := map[string]bool{}
	for i, rep := range rl.Replaces {
		f := fmt.Sprintf("replaces[%d].name", i)
		switch {
		case rep.Name == "":
			return nil, bad(f, "required (the name of the rule this one replaces)")
		case rep.Name == rl.Name:
			return nil, bad(f, "a rule cannot replace itself")
		case seen[rep.Name]:
			return nil, bad(f, fmt.Sprintf("%q is listed twice", rep.Name))
		}
		seen[rep.Name] = true
		r.Replaces = append(r.Replaces, rep.Name)
	}
	if rl.Unlimited {
		switch {
		case rl.Unit != "":
			return nil, bad("unit", "must be empty when unlimited is true")
		case rl.RequestsPerUnit != 0:
			return nil, bad("requests_per_unit", "must be empty when unlimited is true")
		case rl.Algorithm != "" || rl.Burst != 0 || rl.Timezone != "":
			return nil, bad("algorithm", "algorithm, burst and timezone must be empty when unlimited is true")
		}
		return r, nil
	}
	u, ok := ParseUnit(rl.Unit)
	if !ok {
		if rl.Unit == "" {
			return nil, bad("unit", "required (second, minute, hour, day, week, month or year)")
		}
		return nil, bad("unit", fmt.Sprintf("unknown unit %q (want second, minute, hour, day, week, month or year)", rl.Unit))
	}
	r.Unit = u
	spec, err := RuleSpec(u, 1, rl.RequestsPerUnit, rl.Algorithm, rl.Burst, rl.Timezone)
	if err != nil {
		return nil, err
	}
	r.Spec = spec
	return r, nil
}

// RuleSpec maps a rule to the limit it checks with. Without algorithm and
// timezone it is a fixed window of multiplier units aligned to the Unix
// epoch: envoy ratelimit's window, so counts carry over in a migration. A
// timezone makes a day, week or month unit a calendar window in that zone
// (weeks start on Monday); an algorithm other than fixed_window uses the unit
// as its window. requests_per_unit 0 (every hit refused) has no spec: the
// zero Spec is returned. Errors are *Error with the rate_limit field.
func RuleSpec(u Unit, multiplier, requestsPerUnit uint32, algorithm string, burst int64, timezone string) (algo.Spec, error) {
	bad := func(field, msg string) (algo.Spec, error) { return algo.Spec{}, &Error{Field: field, Message: msg} }
	if u.Duration() == 0 {
		return bad("unit", fmt.Sprintf("unknown unit %d", int32(u)))
	}
	if multiplier == 0 {
		multiplier = 1
	}
	cfg := algo.Config{Algorithm: algorithm, Limit: int64(requestsPerUnit), Burst: burst}
	if cfg.Algorithm == "" {
		cfg.Algorithm = algo.FixedWindow.String()
	}
	if timezone != "" {
		if cfg.Algorithm != algo.FixedWindow.String() {
			return bad("timezone", "only for fixed_window (a calendar window)")
		}
		if multiplier != 1 {
			return bad("timezone", "a calendar window is one unit long")
		}
		switch u {
		case UnitDay, UnitWeek, UnitMonth:
			cfg.Calendar, cfg.Timezone = u.String(), timezone
		default:
			return bad("timezone", fmt.Sprintf("only for the calendar units day, week and month (not %s)", u))
		}
	} else {
		// Compare before multiplying: a year × 2^32 overflows int64, and a
		// wrapped product could pass for a short window.
		if time.Duration(multiplier) > algo.MaxWindow/u.Duration() {
			return bad("unit", fmt.Sprintf("window longer than %s", algo.FormatWindow(algo.MaxWindow)))
		}
		w := u.Duration() * time.Duration(multiplier)
		if w > algo.MaxWindow {
			return bad("unit", fmt.Sprintf("window longer than %s", algo.FormatWindow(algo.MaxWindow)))
		}
		cfg.Window = algo.FormatWindow(w)
	}
	if requestsPerUnit == 0 {
		if algorithm != "" || burst != 0 || timezone != "" {
			return bad("requests_per_unit", "0 refuses every hit; algorithm, burst and timezone must be empty")
		}
		return algo.Spec{}, nil
	}
	spec, err := cfg.Spec()
	if err != nil {
		var fe *algo.FieldError
		if e, ok := err.(*algo.FieldError); ok {
			fe = e
		} else {
			return bad("", err.Error())
		}
		field := fe.Field
		switch field {
		case "limit":
			field = "requests_per_unit"
		case "window", "calendar":
			field = "unit"
		}
		return bad(field, fe.Message)
	}
	return spec, nil
}

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Match is the rule a request descriptor matched, with the values its
// counter is keyed by.
type Match struct {
	Rule *Rule
	// Shared[i], when not "", is the wildcard pattern that replaces entry i's
	// value in the counter key (share_threshold).
	Shared []string
}

// how an entry matched a level.
type how uint8

const (
	viaValue how = iota
	viaWildcard
	viaKey
)

// walk matches entries level by level as envoy ratelimit does, calling
// visit for each entry that matched (n) until the walk ends. It returns the
// node of the last entry when every entry matched, else nil.
func (d *Domain) walk(entries []Entry, visit func(i int, n *node, h how, w *wildNode)) *node {
	l := d.root
	for i, e := range entries {
		h := viaValue
		var wn *wildNode
		n := l.exact[entryKey{e.Key, e.Value}]
		if n == nil {
			for j := range l.wild {
				if w := &l.wild[j]; w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					n, h, wn = w.n, viaWildcard, w
					break
				}
			}
		}
		if n == nil {
			n, h = l.keyOnly[e.Key], viaKey
		}
		if n == nil {
			return nil
		}
		if visit != nil {
			visit(i, n, h, wn)
		}
		if i == len(entries)-1 {
			return n
		}
		if n.next == nil {
			return nil // the request is deeper than the configuration
		}
		l = n.next
	}
	return nil
}

// Match finds the rule for a request descriptor as envoy ratelimit does: at
// each level the entry's key and value, else the first wildcard value (in
// configuration order) that matches, else the key alone; the rule counts
// only when it sits at the level of the descriptor's last entry; a level
// with no nested descriptors ends the walk; there is no backtracking. nil
// when nothing matches.
func (d *Domain) Match(entries []Entry) *Match {
	var shared []string
	n := d.walk(entries, func(i int, n *node, h how, _ *wildNode) {
		if h == viaWildcard && n.shareThreshold {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = n.pattern
		}
	})
	if n == nil || n.rule == nil {
		return nil
	}
	return &Match{Rule: n.rule, Shared: shared}
}

// MetricKey is envoy ratelimit's statistics key for a descriptor that
// matched rule r: the rule's FullKey, with request values where
// detailed_metric (every entry's value) or value_to_metric (that entry's
// value) ask for them, and a shared wildcard pattern in place of the value
// where share_threshold applies. Request values make the key set
// unbounded: callers bound it.
func (d *Domain) MetricKey(entries []Entry, r *Rule) string {
	var detailed, enhanced strings.Builder
	detailed.WriteString(d.Name())
	enhanced.WriteString(d.Name())
	d.walk(entries, func(i int, n *node, h how, w *wildNode) {
		e := entries[i]
		var v string
		share := h == viaWildcard && n.shareThreshold
		switch {
		case share:
			v = n.pattern
		case h == viaWildcard && n.valueToMetric:
			v = e.Value
		case h == viaWildcard:
			v = w.value
		case h == viaValue:
			v = e.Value
		case n.valueToMetric:
			v = e.Value
		}
		enhanced.WriteString("." + e.Key)
		if v != "" {
			enhanced.WriteString("_" + v)
		}
		detailed.WriteString("." + e.Key)
		if share {
			detailed.WriteString("_" + n.pattern)
		} else if e.Value != "" {
			detailed.WriteString("_" + e.Value)
		}
	})
	if r.DetailedMetric {
		return detailed.String()
	}
	return enhanced.String()
}

// wildcardMatch reports whether value matches a pattern split at '*': each
// '*' matches any run of characters, the literal parts appear in order.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
