package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// Plans (nodeapi/plan.go says what they are). A check that names only a key
// (limit kind limitPlan) is decided here, in apply, under the key's plan:
//
//	the key's assignment > the longest matching prefix rule > the default plan
//
// Resolving in apply makes the resolution atomic with the check and the same
// on every replica, at no extra Raft round.
//
// Storage:
//   - Plans, prefix rules and the default plan are cluster-wide
//     configuration: the policies bucket, under keys that start with a byte
//     no policy name may start with (planKeyPrefix, ruleKeyPrefix,
//     defaultPlanKey), like RLS domains, so snapshots and digests cover them
//     with no change to the layout.
//   - A key's assignment ('a' ‖ key) and override ('o' ‖ key) belong to the
//     key and live in the state bucket, so whatever moves a key's state moves
//     them with it. An assignment never expires (algo.MaxTime); an override
//     expires at its own expiry, through the ordinary sweep.
//   - A plan limit's state is stored under 'n' ‖ uvarint(len(limit name)) ‖
//     limit name ‖ key: under the limit's name, not the plan's, so a key
//     moved to another plan keeps what it consumed in every limit the two
//     plans share by name (a state of another algorithm starts fresh).

// Command types for plans (see the list in types.go; never renumber).
const (
	CmdPutPlan          byte = 12 // plan → error
	CmdDeletePlan       byte = 13 // name → error (not_found if absent; conflict while a rule or the default names it)
	CmdPutPrefixRule    byte = 14 // prefix, plan → error
	CmdDeletePrefixRule byte = 15 // prefix → error
	CmdSetDefaultPlan   byte = 16 // plan name, "" clears → error
	CmdAssignPlans      byte = 17 // []Assignment (plan "" unassigns) → error; all or nothing
	CmdPutOverride      byte = 18 // key, Override → error
	CmdDeleteOverride   byte = 19 // key → error
)

// Storage keys of the configuration in the policies bucket.
const (
	planKeyPrefix  = "\x00plan\x00"
	ruleKeyPrefix  = "\x00plan-rule\x00"
	defaultPlanKey = "\x00plan-default\x00"
)

// Storage tags of a key's plan records in the state bucket.
const (
	tagAssignment byte = 'a'
	tagOverride   byte = 'o'
	tagPlanLimit  byte = 'n'

	// limitPlan is the check kind of a plan check (codec.go's limitPolicy,
	// limitSpec), limitAdjust of an adjustment (its policy bytes name the
	// plan limit, its cost is the signed amount).
	limitPlan   byte = 4
	limitAdjust byte = 8
	limitInfo   byte = 16 // a read of the key's plan records (Check.PlanInfo)
)

// persist key groups of the assignment and override records (keyGroup): the
// store counts each exactly, as of every write and expiry, and recounts
// them from the file at Open and Restore, so the counts need no stored
// field and state written before they existed is counted the same way. A
// plan check skips the lookup of a record kind no key holds: on a replica
// without overrides (or assignments) a plan-resolved check does the same
// state lookups as the inline check of its limits.
var (
	assignmentGroup = []byte("\x00plan-assignment")
	overrideGroup   = []byte("\x00plan-override")
)

// planRecordGroup is the key group of a plan record's storage key, nil for
// anything else.
func planRecordGroup(key []byte) []byte {
	if len(key) < 2 {
		return nil
	}
	switch key[0] {
	case tagAssignment:
		return assignmentGroup
	case tagOverride:
		return overrideGroup
	}
	return nil
}

// Aliases of nodeapi's plan types.
type (
	Plan          = nodeapi.Plan
	PlanLimit     = nodeapi.PlanLimit
	PrefixRule    = nodeapi.PrefixRule
	Assignment    = nodeapi.Assignment
	Override      = nodeapi.Override
	LimitOverride = nodeapi.LimitOverride
	KeyPlan       = nodeapi.KeyPlan
)

// planConfig is one immutable version of the plan configuration. The apply
// goroutine works on a staged copy (copy on write: changes are rare and
// bounded by MaxPlans) and publishes it after commit; readers load it.
type planConfig struct {
	plans   map[string]*Plan
	rules   map[string]string // prefix → plan
	lengths []int             // distinct rule prefix lengths, longest first
	def     string
	// byLimit is every plan's spec of each limit name (keepPlanLimit).
	byLimit map[string][]*algo.Spec
}

func (c *planConfig) clone() *planConfig {
	n := &planConfig{plans: make(map[string]*Plan, len(c.plans)), rules: make(map[string]string, len(c.rules)), def: c.def}
	for k, v := range c.plans {
		n.plans[k] = v
	}
	for k, v := range c.rules {
		n.rules[k] = v
	}
	n.lengths = c.lengths
	return n
}

func (c *planConfig) index() {
	c.byLimit = make(map[string][]*algo.Spec)
	for _, p := range c.plans {
		for i := range p.Limits {
			c.byLimit[p.Limits[i].Name] = append(c.byLimit[p.Limits[i].Name], &p.Limits[i].Spec)
		}
	}
	seen := map[int]bool{}
	c.lengths = c.lengths[:0:0]
	for p := range c.rules {
		if !seen[len(p)] {
			seen[len(p)] = true
			c.lengths = append(c.lengths, len(p))
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(c.lengths)))
}

// rule returns the plan of the longest rule whose prefix starts key.
func (c *planConfig) rule(key []byte) (string, string, bool) {
	for _, n := range c.lengths {
		if n <= len(key) {
			if p, ok := c.rules[string(key[:n])]; ok {
				return string(key[:n]), p, true
			}
		}
	}
	return "", "", false
}

// planTable is the replica's plan configuration.
type planTable struct {
	cur    atomic.Pointer[planConfig]
	staged *planConfig // apply goroutine only; nil: nothing staged
}

func emptyPlanConfig() *planConfig {
	return &planConfig{plans: map[string]*Plan{}, rules: map[string]string{}}
}

func (t *planTable) view() *planConfig {
	if t.staged != nil {
		return t.staged
	}
	if c := t.cur.Load(); c != nil {
		return c
	}
	return emptyPlanConfig()
}

func (t *planTable) stage() *planConfig {
	if t.staged == nil {
		t.staged = t.view().clone()
	}
	return t.staged
}

func (t *planTable) publish() {
	if t.staged != nil {
		t.cur.Store(t.staged)
		t.staged = nil
	}
}

func (t *planTable) discard() { t.staged = nil }

// loadEntry takes a policies-bucket entry of the plan configuration into c;
// false for anything else.
func (c *planConfig) loadEntry(key string, enc []byte) (bool, error) {
	switch {
	case key == defaultPlanKey:
		c.def = string(enc)
	case strings.HasPrefix(key, planKeyPrefix):
		d := decoder{b: enc}
		p, perr := decodePlanBody(&d)
		if d.err == nil && d.off != len(enc) {
			d.err = fmt.Errorf("%d trailing bytes", len(enc)-d.off)
		}
		if d.err == nil && perr != nil {
			d.err = perr
		}
		if d.err != nil {
			return true, fmt.Errorf("plan %q: %w: %v", key[len(planKeyPrefix):], persist.ErrCorrupt, d.err)
		}
		c.plans[p.Name] = &p
	case strings.HasPrefix(key, ruleKeyPrefix):
		c.rules[key[len(ruleKeyPrefix):]] = string(enc)
	default:
		return false, nil
	}
	return true, nil
}

// Encodings.

// appendPlanBody writes name ‖ count ‖ (limit name ‖ len-prefixed spec)*. It
// is the payload of CmdPutPlan and the value stored for the plan.
func appendPlanBody(dst []byte, p Plan) []byte {
	dst = appendString(dst, p.Name)
	dst = binary.AppendUvarint(dst, uint64(len(p.Limits)))
	for _, l := range p.Limits {
		dst = appendString(dst, l.Name)
		n := len(dst)
		dst = append(dst, 0)
		dst = algo.AppendSpec(dst, l.Spec)
		dst = appendLimitOptions(dst, &l.Options) // nothing when none: such a limit encodes as before
		dst = insertLength(dst, n)
	}
	return dst
}

// decodePlanBody reads appendPlanBody's output; invalid is a well-framed
// plan whose content is not valid (answered, never fatal).
func decodePlanBody(d *decoder) (p Plan, invalid error) {
	p.Name = string(d.bytes())
	n := d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		name := string(d.bytes())
		raw := d.bytes()
		if d.err != nil {
			break
		}
		s, opts, err := decodePlanLimit(raw)
		if err != nil && invalid == nil {
			invalid = limitFieldError(err, name)
		}
		p.Limits = append(p.Limits, PlanLimit{Name: name, Spec: s, Options: opts})
	}
	return p, invalid
}

// decodePlanLimit reads a plan limit's framed bytes: its spec, then its
// options block when the bytes go on. A bad options block is invalid
// content (the plan is refused), never a reason to stop: the framing
// around it is intact.
func decodePlanLimit(raw []byte) (algo.Spec, nodeapi.LimitOptions, error) {
	s, n, err := algo.DecodeSpec(raw)
	if err != nil {
		return algo.Spec{}, nodeapi.LimitOptions{}, err
	}
	if s, err = s.Validate(); err != nil {
		return algo.Spec{}, nodeapi.LimitOptions{}, err
	}
	if n == len(raw) {
		return s, nodeapi.LimitOptions{}, nil
	}
	d := decoder{b: raw, off: n}
	opts, invalid := decodeLimitOptions(&d)
	if d.err == nil && d.off != len(raw) {
		d.err = fmt.Errorf("%d trailing bytes", len(raw)-d.off)
	}
	if d.err != nil {
		return algo.Spec{}, nodeapi.LimitOptions{}, &algo.FieldError{Field: "options", Message: d.err.Error()}
	}
	return s, opts, limitOptionsFit(&s, &opts, invalid) // history.go
}

func limitFieldError(err error, name string) error {
	fe := fieldError(err, "limits."+name)
	return &algo.FieldError{Field: fe.Field, Message: fe.Message}
}

// EncodePutPlan builds a CmdPutPlan entry.
func EncodePutPlan(p Plan) []byte {
	return appendPlanBody([]byte{CmdPutPlan, cmdVersion}, p)
}

// EncodeDeletePlan builds a CmdDeletePlan entry.
func EncodeDeletePlan(name string) []byte {
	return appendString([]byte{CmdDeletePlan, cmdVersion}, name)
}

// EncodePutPrefixRule builds a CmdPutPrefixRule entry.
func EncodePutPrefixRule(r PrefixRule) []byte {
	return appendString(appendString([]byte{CmdPutPrefixRule, cmdVersion}, r.Prefix), r.Plan)
}

// EncodeDeletePrefixRule builds a CmdDeletePrefixRule entry.
func EncodeDeletePrefixRule(prefix string) []byte {
	return appendString([]byte{CmdDeletePrefixRule, cmdVersion}, prefix)
}

// EncodeSetDefaultPlan builds a CmdSetDefaultPlan entry ("" clears it).
func EncodeSetDefaultPlan(plan string) []byte {
	return appendString([]byte{CmdSetDefaultPlan, cmdVersion}, plan)
}

// EncodeAssignPlans builds a CmdAssignPlans entry (plan "" unassigns).
func EncodeAssignPlans(as []Assignment) []byte {
	dst := binary.AppendUvarint([]byte{CmdAssignPlans, cmdVersion}, uint64(len(as)))
	for _, a := range as {
		dst = appendString(appendString(dst, a.Key), a.Plan)
	}
	return dst
}

// EncodePutOverride builds a CmdPutOverride entry.
func EncodePutOverride(key string, o Override) []byte {
	return appendOverride(appendString([]byte{CmdPutOverride, cmdVersion}, key), o)
}

// EncodeDeleteOverride builds a CmdDeleteOverride entry.
func EncodeDeleteOverride(key string) []byte {
	return appendString([]byte{CmdDeleteOverride, cmdVersion}, key)
}

// appendOverride writes expires ‖ count ‖ (name ‖ limit ‖ burst)*; it is also
// the value stored under the key's override record.
func appendOverride(dst []byte, o Override) []byte {
	dst = binary.AppendVarint(dst, o.Expires)
	dst = binary.AppendUvarint(dst, uint64(len(o.Limits)))
	for _, l := range o.Limits {
		dst = appendString(dst, l.Name)
		dst = binary.AppendVarint(dst, l.Limit)
		dst = binary.AppendVarint(dst, l.Burst)
	}
	return dst
}

func decodeOverride(d *decoder) Override {
	o := Override{Expires: d.varint()}
	n := d.count(3)
	for i := 0; i < n && d.err == nil; i++ {
		o.Limits = append(o.Limits, LimitOverride{Name: string(d.bytes()), Limit: d.varint(), Burst: d.varint()})
	}
	return o
}

// command fields of the plan commands live in planCmd (command.plan).
type planCmd struct {
	plan       Plan
	planErr    error
	key, value string
	assigns    []Assignment
	override   Override
}

func init() {
	reg := func(typ byte, name string, decode func(c *command, d *decoder), apply func(a *applier, tx *persist.Tx, c *command) (*Error, error)) {
		registerCommand(typ, commandType{
			name:   name,
			decode: decode,
			validate: func(c *command) error {
				if e := validatePlanCommand(c); e != nil {
					return fmt.Errorf("%w: %s: %v", ErrBadCommand, name, e)
				}
				return nil
			},
			apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
				e, err := apply(a, tx, c)
				return errResponse(e), err
			},
		})
	}
	one := func(c *command, d *decoder) { c.pl.key = string(d.bytes()) }
	two := func(c *command, d *decoder) { c.pl.key, c.pl.value = string(d.bytes()), string(d.bytes()) }
	reg(CmdPutPlan, "put plan", func(c *command, d *decoder) { c.pl.plan, c.pl.planErr = decodePlanBody(d) }, (*applier).putPlan)
	reg(CmdDeletePlan, "delete plan", one, (*applier).deletePlan)
	reg(CmdPutPrefixRule, "put prefix rule", two, (*applier).putPrefixRule)
	reg(CmdDeletePrefixRule, "delete prefix rule", one, (*applier).deletePrefixRule)
	reg(CmdSetDefaultPlan, "set default plan", one, (*applier).setDefaultPlan)
	reg(CmdAssignPlans, "assign plans", func(c *command, d *decoder) {
		n := d.count(2)
		c.pl.assigns = c.pl.assigns[:0]
		for i := 0; i < n && d.err == nil; i++ {
			c.pl.assigns = append(c.pl.assigns, Assignment{Key: string(d.bytes()), Plan: string(d.bytes())})
		}
	}, (*applier).assignPlans)
	reg(CmdPutOverride, "put override", func(c *command, d *decoder) {
		c.pl.key = string(d.bytes())
		c.pl.override = decodeOverride(d)
	}, (*applier).putOverride)
	reg(CmdDeleteOverride, "delete override", one, (*applier).deleteOverride)
}

// validatePlanCommand checks the bounds a command can be judged by alone
// (ValidateCommand); what depends on the state is answered in apply.
func validatePlanCommand(c *command) *Error {
	switch c.typ {
	case CmdPutPlan:
		return planError(&c.pl.plan, c.pl.planErr)
	case CmdAssignPlans:
		if len(c.pl.assigns) == 0 || len(c.pl.assigns) > nodeapi.MaxAssignLines {
			return &Error{Code: CodeInvalidArgument, Field: "assignments", Message: fmt.Sprintf("must hold 1 to %d assignments", nodeapi.MaxAssignLines)}
		}
	}
	return nil
}

// ValidatePlanName checks a plan's name: what a policy name may be.
func validPlanName(name string) bool {
	return name != "" && len(name) <= MaxPolicyName && !reservedPolicyName(name)
}

func badPlanName(field string) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf("must be 1 to %d bytes", MaxPolicyName)}
}

func planNotFound(field, name string) *Error {
	return &Error{Code: CodeNotFound, Field: field, Message: fmt.Sprintf("plan %q does not exist", name)}
}

// planError validates a plan's content: its name, 1 to MaxPlanLimits limits
// with distinct valid names in order, each spec valid (errors name
// "limits.<name>.<field>").
func planError(p *Plan, invalid error) *Error {
	if !validPlanName(p.Name) {
		return badPlanName("name")
	}
	if invalid != nil {
		return fieldError(invalid, "")
	}
	if len(p.Limits) == 0 || len(p.Limits) > nodeapi.MaxPlanLimits {
		return &Error{Code: CodeInvalidArgument, Field: "limits", Message: fmt.Sprintf("a plan has 1 to %d limits", nodeapi.MaxPlanLimits)}
	}
	for i, l := range p.Limits {
		if l.Name == "" || len(l.Name) > nodeapi.MaxPlanLimitName {
			return &Error{Code: CodeInvalidArgument, Field: "limits", Message: fmt.Sprintf("a limit's name must be 1 to %d bytes", nodeapi.MaxPlanLimitName)}
		}
		if i > 0 && p.Limits[i-1].Name >= l.Name {
			return &Error{Code: CodeInvalidArgument, Field: "limits." + l.Name, Message: "limits must be sorted by name, each once"}
		}
		if _, err := l.Spec.Validate(); err != nil {
			return fieldError(err, "limits."+l.Name)
		}
	}
	return nil
}

func (a *applier) putPlan(tx *persist.Tx, c *command) (*Error, error) {
	p := c.pl.plan
	if e := planError(&p, c.pl.planErr); e != nil {
		return e, nil
	}
	cfg := a.f.plans.view()
	if _, ok := cfg.plans[p.Name]; !ok && len(cfg.plans) >= nodeapi.MaxPlans {
		return &Error{Code: CodeInvalidArgument, Field: "name", Message: fmt.Sprintf("the cluster holds its most plans (%d)", nodeapi.MaxPlans)}, nil
	}
	limits := make([]PlanLimit, len(p.Limits)) // the entry's slices are reused
	for i, l := range p.Limits {
		l.Spec, _ = l.Spec.Validate()
		limits[i] = l
	}
	p.Limits = limits
	if err := tx.PutPolicy(planKeyPrefix+p.Name, appendPlanBody(nil, p)); err != nil {
		return nil, err
	}
	s := a.f.plans.stage()
	s.plans[p.Name] = &p
	s.index()
	a.f.top.prunePlan(&p) // topkeys.go
	return nil, nil
}

// deletePlan refuses to delete a plan a prefix rule or the default names
// (cheap to know); keys assigned to it are answered not_found at their next
// check, since finding them would be unbounded work in one entry.
func (a *applier) deletePlan(tx *persist.Tx, c *command) (*Error, error) {
	name := c.pl.key
	cfg := a.f.plans.view()
	if _, ok := cfg.plans[name]; !ok {
		return planNotFound("plan", name), nil
	}
	if cfg.def == name {
		return &Error{Code: CodeConflict, Field: "plan", Message: fmt.Sprintf("plan %q is the default plan", name)}, nil
	}
	for prefix, p := range cfg.rules {
		if p == name {
			return &Error{Code: CodeConflict, Field: "plan", Message: fmt.Sprintf("plan %q is named by a prefix rule (%q, and maybe more)", name, prefix)}, nil
		}
	}
	if _, err := tx.DeletePolicy(planKeyPrefix + name); err != nil {
		return nil, err
	}
	s := a.f.plans.stage()
	delete(s.plans, name)
	s.index()
	a.f.top.forgetPlan(name) // topkeys.go
	return nil, nil
}

func (a *applier) putPrefixRule(tx *persist.Tx, c *command) (*Error, error) {
	prefix, plan := c.pl.key, c.pl.value
	if prefix == "" || len(prefix) > MaxKeyBytes {
		return &Error{Code: CodeInvalidArgument, Field: "prefix", Message: fmt.Sprintf("must be 1 to %d bytes", MaxKeyBytes)}, nil
	}
	cfg := a.f.plans.view()
	if _, ok := cfg.plans[plan]; !ok {
		return planNotFound("plan", plan), nil
	}
	if _, ok := cfg.rules[prefix]; !ok {
		if len(cfg.rules) >= nodeapi.MaxPrefixRules {
			return &Error{Code: CodeInvalidArgument, Field: "prefix", Message: fmt.Sprintf("the cluster holds its most prefix rules (%d)", nodeapi.MaxPrefixRules)}, nil
		}
		// Rules never nest, so a key matches at most one and no rule
		// silently shadows part of another.
		for other := range cfg.rules {
			if strings.HasPrefix(other, prefix) || strings.HasPrefix(prefix, other) {
				return &Error{Code: CodeInvalidArgument, Field: "prefix", Message: fmt.Sprintf("overlaps the prefix rule %q", other)}, nil
			}
		}
	}
	if err := tx.PutPolicy(ruleKeyPrefix+prefix, []byte(plan)); err != nil {
		return nil, err
	}
	s := a.f.plans.stage()
	s.rules[prefix] = plan
	s.index()
	return nil, nil
}

func (a *applier) deletePrefixRule(tx *persist.Tx, c *command) (*Error, error) {
	prefix := c.pl.key
	if _, ok := a.f.plans.view().rules[prefix]; !ok {
		return &Error{Code: CodeNotFound, Field: "prefix", Message: fmt.Sprintf("no prefix rule %q", prefix)}, nil
	}
	if _, err := tx.DeletePolicy(ruleKeyPrefix + prefix); err != nil {
		return nil, err
	}
	s := a.f.plans.stage()
	delete(s.rules, prefix)
	s.index()
	return nil, nil
}

func (a *applier) setDefaultPlan(tx *persist.Tx, c *command) (*Error, error) {
	plan := c.pl.key
	if plan == "" {
		if _, err := tx.DeletePolicy(defaultPlanKey); err != nil {
			return nil, err
		}
		a.f.plans.stage().def = ""
		return nil, nil
	}
	if _, ok := a.f.plans.view().plans[plan]; !ok {
		return planNotFound("plan", plan), nil
	}
	if err := tx.PutPolicy(defaultPlanKey, []byte(plan)); err != nil {
		return nil, err
	}
	a.f.plans.stage().def = plan
	return nil, nil
}

// planRecordKey is tag ‖ key, in a.plan.keyBuf until the next call.
func (a *applier) planRecordKey(tag byte, key string) []byte {
	a.plan.keyBuf = append(append(a.plan.keyBuf[:0], tag), key...)
	return a.plan.keyBuf
}

// assignPlans validates every assignment before it writes any: a bulk
// import is applied whole or not at all. Errors name the assignment as
// "assignments[i]" (the front end renders its own line numbers).
func (a *applier) assignPlans(tx *persist.Tx, c *command) (*Error, error) {
	if e := validatePlanCommand(c); e != nil {
		return e, nil
	}
	cfg := a.f.plans.view()
	for i, as := range c.pl.assigns {
		field := fmt.Sprintf("assignments[%d]", i)
		if as.Key == "" || len(as.Key) > MaxKeyBytes {
			return &Error{Code: CodeInvalidArgument, Field: field + ".key", Message: fmt.Sprintf("must be 1 to %d bytes", MaxKeyBytes)}, nil
		}
		if _, ok := cfg.plans[as.Plan]; as.Plan != "" && !ok {
			return planNotFound(field+".plan", as.Plan), nil
		}
	}
	for _, as := range c.pl.assigns {
		key := a.planRecordKey(tagAssignment, as.Key)
		st, err := tx.State(key)
		if err != nil {
			return nil, err
		}
		if as.Plan == "" {
			err = tx.DeleteState(key, st)
		} else {
			err = tx.PutState(key, st, []byte(as.Plan), algo.MaxTime)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// putOverride validates an override against the key's plan now: every limit
// it names is in the plan, a burst only for the buckets, and the spec it
// makes valid.
func (a *applier) putOverride(tx *persist.Tx, c *command) (*Error, error) {
	key, o := c.pl.key, c.pl.override
	if key == "" || len(key) > MaxKeyBytes {
		return &Error{Code: CodeInvalidArgument, Field: "key", Message: fmt.Sprintf("must be 1 to %d bytes", MaxKeyBytes)}, nil
	}
	p, _, e := a.resolvePlan(tx, []byte(key))
	if e != nil {
		return e, nil
	}
	if len(o.Limits) == 0 || len(o.Limits) > nodeapi.MaxPlanLimits {
		return &Error{Code: CodeInvalidArgument, Field: "limits", Message: fmt.Sprintf("an override names 1 to %d limits", nodeapi.MaxPlanLimits)}, nil
	}
	for i, lo := range o.Limits {
		if i > 0 && o.Limits[i-1].Name >= lo.Name {
			return &Error{Code: CodeInvalidArgument, Field: "limits." + lo.Name, Message: "limits must be sorted by name, each once"}, nil
		}
		pl, ok := p.Limit(lo.Name)
		if !ok {
			return &Error{Code: CodeInvalidArgument, Field: "limits." + lo.Name, Message: fmt.Sprintf("plan %q has no limit %q", p.Name, lo.Name)}, nil
		}
		if _, e := overridden(pl.Spec, lo); e != nil {
			return e, nil
		}
	}
	rk := a.planRecordKey(tagOverride, key)
	st, err := tx.State(rk)
	if err != nil {
		return nil, err
	}
	exp := o.Expires
	if exp <= 0 || exp > algo.MaxTime {
		exp = algo.MaxTime
	}
	return nil, tx.PutState(rk, st, appendOverride(nil, o), exp)
}

// overridden is spec with lo's fields in place of the plan's.
func overridden(spec algo.Spec, lo LimitOverride) (algo.Spec, *Error) {
	field := "limits." + lo.Name
	if lo.Limit < 0 {
		return spec, &Error{Code: CodeInvalidArgument, Field: field + ".limit", Message: "must be positive"}
	}
	if lo.Burst < 0 || lo.Burst > 0 && !spec.Algorithm.HasBurst() {
		return spec, &Error{Code: CodeInvalidArgument, Field: field + ".burst", Message: fmt.Sprintf("%s has no burst", spec.Algorithm)}
	}
	if lo.Limit > 0 {
		spec.Limit = lo.Limit
	}
	if lo.Burst > 0 {
		spec.Burst = lo.Burst
	}
	s, err := spec.Validate()
	if err != nil {
		return spec, fieldError(err, field)
	}
	return s, nil
}

func (a *applier) deleteOverride(tx *persist.Tx, c *command) (*Error, error) {
	rk := a.planRecordKey(tagOverride, c.pl.key)
	st, err := tx.State(rk)
	if err != nil {
		return nil, err
	}
	if !st.Found {
		return &Error{Code: CodeNotFound, Field: "key", Message: fmt.Sprintf("key %q has no override", c.pl.key)}, nil
	}
	return nil, tx.DeleteState(rk, st)
}

// planName finds the name of key's plan and how: assignment > longest
// prefix rule > default ("" when none).
func (a *applier) planName(tx *persist.Tx, key []byte) (name, source string, err error) {
	cfg := a.f.plans.view()
	var st persist.State
	if tx.GroupKeys(assignmentGroup) > 0 { // none anywhere: key has none (planRecordGroup)
		a.plan.keyBuf = append(append(a.plan.keyBuf[:0], tagAssignment), key...)
		var err error
		if st, err = tx.State(a.plan.keyBuf); err != nil {
			return "", "", err
		}
	}
	switch {
	case st.Found:
		if p, ok := cfg.plans[string(st.Data)]; ok {
			return p.Name, nodeapi.SourceAssignment, nil // the plan's own string: no allocation per check
		}
		return string(st.Data), nodeapi.SourceAssignment, nil
	default:
		if _, p, ok := cfg.rule(key); ok {
			return p, nodeapi.SourcePrefixRule, nil
		} else if cfg.def != "" {
			return cfg.def, nodeapi.SourceDefault, nil
		}
	}
	return "", "", nil
}

// resolvePlan finds key's plan: assignment > longest prefix rule > default.
func (a *applier) resolvePlan(tx *persist.Tx, key []byte) (*Plan, string, *Error) {
	cfg := a.f.plans.view()
	name, source, err := a.planName(tx, key)
	if err != nil {
		return nil, "", &Error{Code: CodeInternal, Field: "key", Message: err.Error()}
	}
	if name == "" {
		return nil, "", &Error{Code: CodeNotFound, Field: "policy", Message: fmt.Sprintf(
			"the check names no policy or limit, and key %q has no plan (no assignment, prefix rule or default plan)", key)}
	}
	p, ok := cfg.plans[name]
	if !ok {
		return nil, "", &Error{Code: CodeNotFound, Field: "policy", Message: fmt.Sprintf("key %q's plan %q (by %s) does not exist", key, name, source)}
	}
	return p, source, nil
}

// decidePlan decides a plan check: every limit of the key's plan (with the
// key's unexpired override) as one atomic group, as check/all does.
func (a *applier) decidePlan(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	switch {
	case len(ck.key) == 0:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "key", Message: "required"}}, nil
	case len(ck.key) > MaxKeyBytes:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "key", Message: fmt.Sprintf("longer than %d bytes", MaxKeyBytes)}}, nil
	case ck.cost < 0:
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "cost", Message: "must not be negative"}}, nil
	}
	p, source, e := a.resolvePlan(tx, ck.key)
	if e != nil {
		if e.Code == CodeInternal {
			return Result{}, fmt.Errorf("%s", e.Message)
		}
		return Result{Err: e}, nil
	}
	var ov Override
	hasOv := false
	var st persist.State
	var rk []byte
	if tx.GroupKeys(overrideGroup) > 0 { // none anywhere: key has none (planRecordGroup)
		rk = append(append(a.plan.keyBuf[:0], tagOverride), ck.key...)
		a.plan.keyBuf = rk
		var err error
		if st, err = tx.State(rk); err != nil {
			return Result{}, err
		}
	}
	if st.Found {
		d := decoder{b: st.Data}
		ov = decodeOverride(&d)
		if d.err != nil {
			return Result{}, fmt.Errorf("override of %q: %w: %v", ck.key, persist.ErrCorrupt, d.err)
		}
		if ov.Expires > 0 && ov.Expires <= now {
			// Expired: ignored, and cleaned now (every replica at the same
			// log position) rather than left to the sweep.
			if err := tx.DeleteState(rk, st); err != nil {
				return Result{}, err
			}
		} else {
			hasOv = true
		}
	}
	n := len(p.Limits)
	lims, usedOv := a.plan.limitsOf(p, &ov, hasOv)
	if cap(a.plan.checks) < n {
		a.plan.checks = make([]checkRef, n)
		for i := range a.plan.checks {
			a.plan.checks[i].kind = limitPlan
		}
	}
	a.plan.checks = a.plan.checks[:n]
	for i := range a.plan.checks {
		// Only the key and cost differ from check to check (decideOp reads
		// checks, never writes them): writing the whole checkRef would pay
		// a write barrier for each of its four slices.
		a.plan.checks[i].key, a.plan.checks[i].cost = ck.key, ck.cost
	}
	if cap(a.plan.decs) < n {
		a.plan.decs = make([]Decision, n)
	}
	pdecs := a.plan.decs[:n]
	clear(pdecs)
	res, err := a.decideOp(tx, a.plan.checks, lims, pdecs, now, true)
	if err != nil || res.Err != nil {
		return res, err
	}
	a.recordPlanTop(p, ck, pdecs, res.Allowed, now) // topkeys.go
	if !res.Allowed && ck.cost > 0 {
		// The group consumed nothing: an allowed limit still has what it
		// had, not what it would have had (decideOp reports the tentative
		// spend). Allowed means the spend fit, so adding it back is exact.
		for i := range pdecs {
			if pdecs[i].Allowed {
				pdecs[i].Remaining = min(pdecs[i].Remaining+ck.cost, algo.MaxLimit)
			}
		}
	}
	pd := a.plan.answer(n)
	pd.Plan, pd.Source, pd.Overridden = p.Name, source, usedOv
	pick := -1
	for i := range pdecs {
		pd.Limits[i] = nodeapi.NamedDecision{Name: p.Limits[i].Name, Decision: pdecs[i].Decision}
		switch {
		case pick < 0:
			pick = i
		case !pdecs[i].Allowed && pdecs[pick].Allowed:
			pick = i
		case pdecs[i].Allowed == pdecs[pick].Allowed && pdecs[i].Allowed && pdecs[i].Remaining < pdecs[pick].Remaining:
			pick = i
		case pdecs[i].Allowed == pdecs[pick].Allowed && !pdecs[i].Allowed && pdecs[i].RetryAfter > pdecs[pick].RetryAfter:
			pick = i // the refusal that lasts longest: retrying earlier is refused again
		}
	}
	pd.Limit = p.Limits[pick].Name
	decs[0] = Decision{Decision: pdecs[pick].Decision, Plan: pd}
	return Result{Allowed: res.Allowed, Decisions: decs[:1]}, nil
}

// Readers (this replica's copy; it may lag the leader).

// Plan returns a plan.
func (f *FSM) Plan(name string) (Plan, bool) {
	p, ok := f.plans.cur.Load().plans[name]
	if !ok {
		return Plan{}, false
	}
	return *p, true
}

// Plans returns every plan sorted by name.
func (f *FSM) Plans() []Plan {
	c := f.plans.cur.Load()
	out := make([]Plan, 0, len(c.plans))
	for _, p := range c.plans {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PrefixRules returns every prefix rule sorted by prefix.
func (f *FSM) PrefixRules() []PrefixRule {
	c := f.plans.cur.Load()
	out := make([]PrefixRule, 0, len(c.rules))
	for p, plan := range c.rules {
		out = append(out, PrefixRule{Prefix: p, Plan: plan})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix < out[j].Prefix })
	return out
}

// DefaultPlan returns the default plan's name ("" when none).
func (f *FSM) DefaultPlan() string { return f.plans.cur.Load().def }

// KeyPlan returns what key resolves to, from the last commit.
func (f *FSM) KeyPlan(key string, now int64) (KeyPlan, error) {
	var kp KeyPlan
	c := f.plans.cur.Load()
	err := f.store.View(func(tx *persist.Tx) error {
		st, err := tx.State(append([]byte{tagAssignment}, key...))
		if err != nil {
			return err
		}
		if st.Found {
			kp.Assigned = string(st.Data)
			kp.Plan, kp.Source = kp.Assigned, nodeapi.SourceAssignment
		}
		st, err = tx.State(append([]byte{tagOverride}, key...))
		if err != nil {
			return err
		}
		if st.Found {
			d := decoder{b: bytes.Clone(st.Data)}
			o := decodeOverride(&d)
			if d.err != nil {
				return fmt.Errorf("override of %q: %w: %v", key, persist.ErrCorrupt, d.err)
			}
			if o.Expires <= 0 || o.Expires > now {
				kp.Override = &o
			}
		}
		return nil
	})
	if kp.Source == "" {
		if _, p, ok := c.rule([]byte(key)); ok {
			kp.Plan, kp.Source = p, nodeapi.SourcePrefixRule
		} else if c.def != "" {
			kp.Plan, kp.Source = c.def, nodeapi.SourceDefault
		}
	}
	return kp, err
}

// planApplier is the plan path's reusable memory (apply goroutine only).
type planApplier struct {
	keyBuf []byte
	specs  []algo.Spec
	checks []checkRef
	lims   []limit
	decs   []Decision // decidePlan's per-limit decisions (not kept past it)
	// tmpl is tmplPlan's limits without an override (limitsOf).
	tmplPlan *Plan
	tmpl     []limit
	idents   map[string][]byte // limit name → its bytes: the storage identity without an allocation per check
	// Slabs the answers' plan decisions are carved from, each element used
	// once (answers keep them): one allocation per many plan checks.
	pdSlab []nodeapi.PlanDecision
	ndSlab []nodeapi.NamedDecision
}

// limitsOf is p's limits as decideOp takes them, with ov's fields in place
// of the plan's where hasOv, and whether ov changed any. Without an override
// the limits are p's template, built once per plan version and reused by
// every check under it (decideOp only reads them; a plan is immutable once
// put, a changed plan is a new *Plan), so a plan check builds nothing.
func (pa *planApplier) limitsOf(p *Plan, ov *Override, hasOv bool) ([]limit, bool) {
	if !hasOv {
		if pa.tmplPlan != p {
			pa.tmpl = pa.tmpl[:0]
			for i := range p.Limits {
				pa.tmpl = append(pa.tmpl, pa.limitOf(p, i, &p.Limits[i].Spec))
			}
			pa.tmplPlan = p
		}
		return pa.tmpl, false
	}
	n := len(p.Limits)
	if cap(pa.specs) < n {
		pa.specs = make([]algo.Spec, n)
	}
	pa.specs = pa.specs[:n]
	pa.lims = pa.lims[:0]
	usedOv := false
	for i := range p.Limits {
		pa.specs[i] = p.Limits[i].Spec
		for _, lo := range ov.Limits {
			if lo.Name == p.Limits[i].Name {
				// An override that no longer fits the plan (the plan
				// changed since) is ignored for that limit: the plan's
				// own limit still applies.
				if s, e := overridden(pa.specs[i], lo); e == nil {
					pa.specs[i], usedOv = s, true
				}
			}
		}
		pa.lims = append(pa.lims, pa.limitOf(p, i, &pa.specs[i]))
	}
	return pa.lims, usedOv
}

// limitOf is p's i-th limit under spec.
func (pa *planApplier) limitOf(p *Plan, i int, spec *algo.Spec) limit {
	pl := &p.Limits[i]
	return limit{spec: spec, tag: tagPlanLimit, ident: pa.ident(pl.Name), name: pl.Name, noCache: true,
		notify: notifyOfLimit(&pl.Options), history: int64(pl.Options.History)} // notify.go, history.go
}

// answer returns a fresh plan decision with n limits from the slabs.
func (pa *planApplier) answer(n int) *nodeapi.PlanDecision {
	if len(pa.pdSlab) == 0 {
		pa.pdSlab = make([]nodeapi.PlanDecision, 64)
	}
	pd := &pa.pdSlab[0]
	pa.pdSlab = pa.pdSlab[1:]
	if len(pa.ndSlab) < n {
		pa.ndSlab = make([]nodeapi.NamedDecision, max(256, n))
	}
	pd.Limits = pa.ndSlab[:n:n]
	pa.ndSlab = pa.ndSlab[n:]
	return pd
}

// ident is name's bytes, kept: a plan check must not allocate per limit
// what a check under a policy does not (limit names are bounded by
// nodeapi.MaxPlans × MaxPlanLimits).
func (pa *planApplier) ident(name string) []byte {
	if b, ok := pa.idents[name]; ok {
		return b
	}
	if pa.idents == nil || len(pa.idents) >= nodeapi.MaxPlans*nodeapi.MaxPlanLimits {
		pa.idents = make(map[string][]byte)
	}
	b := []byte(name)
	pa.idents[name] = b
	return b
}

// appendAlgoDecision writes a decision's five numbers.
func appendAlgoDecision(dst []byte, d *algo.Decision) []byte {
	dst = binary.AppendVarint(dst, d.Limit)
	dst = binary.AppendVarint(dst, d.Remaining)
	dst = binary.AppendVarint(dst, int64(d.ResetAfter))
	dst = binary.AppendVarint(dst, int64(d.RetryAfter))
	return binary.AppendVarint(dst, int64(d.Delay))
}

func (d *decoder) algoDecision() algo.Decision {
	return algo.Decision{Limit: d.varint(), Remaining: d.varint(), ResetAfter: time.Duration(d.varint()),
		RetryAfter: time.Duration(d.varint()), Delay: time.Duration(d.varint())}
}

// appendPlanDecision writes plan ‖ limit ‖ overridden ‖ count ‖
// (name ‖ allowed ‖ decision)*, after a decision flagged decPlan.
func appendPlanDecision(dst []byte, p *nodeapi.PlanDecision) []byte {
	dst = appendString(dst, p.Plan)
	dst = appendString(dst, p.Limit)
	var ov byte
	if p.Overridden {
		ov = 1
	}
	dst = append(dst, ov)
	dst = binary.AppendVarint(dst, p.Adjusted)
	dst = appendString(dst, p.Source)
	dst = appendString(dst, p.Assigned)
	if p.Override == nil {
		dst = append(dst, 0)
	} else {
		dst = appendOverride(append(dst, 1), *p.Override)
	}
	dst = binary.AppendUvarint(dst, uint64(len(p.Limits)))
	for i := range p.Limits {
		l := &p.Limits[i]
		dst = appendString(dst, l.Name)
		var al byte
		if l.Allowed {
			al = 1
		}
		dst = append(dst, al)
		dst = appendAlgoDecision(dst, &l.Decision)
	}
	return dst
}

func (d *decoder) planDecision() *nodeapi.PlanDecision {
	p := &nodeapi.PlanDecision{Plan: string(d.bytes()), Limit: string(d.bytes())}
	switch d.byte() {
	case 0:
	case 1:
		p.Overridden = true
	default:
		d.fail(fmt.Errorf("bad plan decision flag"))
	}
	p.Adjusted = d.varint()
	p.Source, p.Assigned = string(d.bytes()), string(d.bytes())
	switch d.byte() {
	case 0:
	case 1:
		o := decodeOverride(d)
		p.Override = &o
	default:
		d.fail(fmt.Errorf("bad plan decision override flag"))
	}
	n := d.count(7)
	for i := 0; i < n && d.err == nil; i++ {
		name := string(d.bytes())
		al := d.byte()
		if al > 1 {
			d.fail(fmt.Errorf("bad plan limit flag"))
		}
		nd := nodeapi.NamedDecision{Name: name, Decision: d.algoDecision()}
		nd.Allowed = al == 1
		p.Limits = append(p.Limits, nd)
	}
	return p
}

// planOp reports an op that is one plan check, adjustment or plan read:
// applied by applyPlanOp, not resolved as a policy or inline limit (resolve
// refuses these kinds among other checks, since a plan is a group itself).
func planOp(checks []checkRef) bool {
	if len(checks) != 1 {
		return false
	}
	k := checks[0].kind
	return k == limitPlan || k == limitAdjust || k == limitInfo
}

// applyPlanOp applies the op planOp recognised; applyOp records its request id.
func (a *applier) applyPlanOp(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	switch ck.kind {
	case limitAdjust:
		return a.adjustPlan(tx, ck, decs, now)
	case limitInfo:
		return a.planInfo(tx, ck, decs, now)
	}
	return a.decidePlan(tx, ck, decs, now)
}

// adjustPlan applies an adjustment: cost units credited (negative: debited)
// to the current window of the key's plan limit named by the check, where
// algo.Adjust is exact, and answers the limit's decision after it. Its
// request id (applyOp) makes it happen once under retries.
func (a *applier) adjustPlan(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	if len(ck.key) == 0 || len(ck.key) > MaxKeyBytes {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "key", Message: fmt.Sprintf("must be 1 to %d bytes", MaxKeyBytes)}}, nil
	}
	p, source, e := a.resolvePlan(tx, ck.key)
	if e != nil {
		if e.Code == CodeInternal {
			return Result{}, fmt.Errorf("%s", e.Message)
		}
		return Result{Err: e}, nil
	}
	pl, ok := p.Limit(string(ck.policy))
	if !ok {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "limit", Message: fmt.Sprintf("plan %q has no limit %q", p.Name, ck.policy)}}, nil
	}
	spec := pl.Spec
	ovr := false
	rk := append(append(a.plan.keyBuf[:0], tagOverride), ck.key...)
	a.plan.keyBuf = rk
	st, err := tx.State(rk)
	if err != nil {
		return Result{}, err
	}
	if st.Found {
		d := decoder{b: st.Data}
		ov := decodeOverride(&d)
		if d.err != nil {
			return Result{}, fmt.Errorf("override of %q: %w: %v", ck.key, persist.ErrCorrupt, d.err)
		}
		if ov.Expires <= 0 || ov.Expires > now {
			for _, lo := range ov.Limits {
				if lo.Name == pl.Name {
					if s, e := overridden(spec, lo); e == nil {
						spec, ovr = s, true
					}
				}
			}
		}
	}
	lim := limit{spec: &spec, tag: tagPlanLimit, ident: []byte(pl.Name), name: pl.Name, noCache: true, history: int64(pl.Options.History)}
	key := a.storageKey(ck, &lim)
	cur, err := tx.State(key)
	if err != nil {
		return Result{}, err
	}
	applied, next, d, err := algo.Adjust(a.decideBuf[:0], &spec, cur.Data, now, ck.cost)
	if err != nil {
		return Result{Err: fieldError(err, "")}, nil
	}
	t := tentative{key: key, prev: cur, data: next, expiry: now + int64(d.ResetAfter), changed: applied != 0}
	if err := writeState(tx, &t); err != nil {
		return Result{}, err
	}
	if lim.history > 0 {
		if err := a.addUsage(tx, key, &lim, -applied, 0, now); err != nil { // history.go: a credit is use given back
			return Result{}, err
		}
	}
	d.Allowed = true
	decs[0] = Decision{Decision: d, Plan: &nodeapi.PlanDecision{Plan: p.Name, Source: source, Limit: pl.Name, Overridden: ovr, Adjusted: applied,
		Limits: []nodeapi.NamedDecision{{Name: pl.Name, Decision: d}}}}
	return Result{Allowed: true, Decisions: decs[:1]}, nil
}

// keepPlanLimit is keepExpired for a plan limit's state ('n' ‖ name ‖ key).
// Which plan the key has would take a read of its assignment in the middle
// of the sweep, so the state is kept as long as any plan's limit of that
// name would still count it: keeping a state longer than its own limit
// needs changes no decision (a window that has passed reads as fresh, a
// bucket as drained), removing it earlier would reopen the key early.
func (a *applier) keepPlanLimit(key, data []byte, now int64) int64 {
	n, w := binary.Uvarint(key[1:])
	if w <= 0 || uint64(len(key)-1-w) < n {
		return 0
	}
	keep := int64(0)
	for _, spec := range a.f.plans.view().byLimit[string(key[1+w:1+w+int(n)])] {
		d, next, err := algo.Decide(a.keepBuf[:0], spec, data, now, 0)
		if cap(next) > cap(a.keepBuf) {
			a.keepBuf = next[:0]
		}
		if err == nil && d.ResetAfter > 0 {
			keep = max(keep, now+int64(d.ResetAfter))
		}
	}
	return keep
}

// planInfo answers a read of key's plan records (Check.PlanInfo): through
// the log, so a read after a write on any node sees it. It writes nothing
// (an expired override is left to the sweep).
func (a *applier) planInfo(tx *persist.Tx, ck *checkRef, decs []Decision, now int64) (Result, error) {
	if len(ck.key) == 0 || len(ck.key) > MaxKeyBytes {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "key", Message: fmt.Sprintf("must be 1 to %d bytes", MaxKeyBytes)}}, nil
	}
	name, source, err := a.planName(tx, ck.key)
	if err != nil {
		return Result{}, err
	}
	pd := &nodeapi.PlanDecision{Plan: name, Source: source}
	if source == nodeapi.SourceAssignment {
		pd.Assigned = name
	}
	st, err := tx.State(append(append(a.plan.keyBuf[:0], tagOverride), ck.key...))
	if err != nil {
		return Result{}, err
	}
	if st.Found {
		d := decoder{b: st.Data}
		o := decodeOverride(&d)
		if d.err != nil {
			return Result{}, fmt.Errorf("override of %q: %w: %v", ck.key, persist.ErrCorrupt, d.err)
		}
		if o.Expires <= 0 || o.Expires > now {
			o.Limits = append([]LimitOverride(nil), o.Limits...)
			pd.Override = &o
			pd.Overridden = true
		}
	}
	decs[0] = Decision{Decision: algo.Decision{Allowed: true}, Plan: pd}
	return Result{Allowed: true, Decisions: decs[:1]}, nil
}
