package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/limitd/limitd/algo"
)

// Encodings. Every log entry is
//
//	type byte ‖ version byte ‖ payload
//
// with integers as varints (signed: zigzag) and byte strings as
// uvarint length ‖ bytes. The ops and results wire formats (used between
// nodes and inside entries) start with their own version byte. Decoders never
// trust a count: preallocation is capped by the bytes that remain, so hostile
// input cannot make them allocate more than a small multiple of its size.
const (
	cmdVersion     byte = 1
	opsVersion     byte = 1
	resultsVersion byte = 1
	policyVersion  byte = 1
)

// Flags of an op, a check's limit kind, a result and a decision.
const (
	opAll       byte = 1
	opRequestID byte = 2

	limitPolicy byte = 1
	limitSpec   byte = 2

	resAllowed  byte = 1
	resReplayed byte = 2
	resErr      byte = 4

	decAllowed         byte = 1
	decShadowRefused   byte = 2
	decLeasedElsewhere byte = 4    // Decision.LeasedElsewhere
	decPlan            byte = 8    // Decision.Plan follows the decision (plan.go)
	decBanned          byte = 0x40 // Decision.Reason banned (ban.go)
)

var (
	// ErrUnknownCommand: an entry whose type or version this binary does not
	// know. Applying stops rather than skipping it and diverging.
	ErrUnknownCommand = errors.New("unknown command")
	// ErrBadCommand: an entry that does not decode.
	ErrBadCommand = errors.New("malformed command")
	errTruncated  = errors.New("truncated")
)

// EncodeCheck appends a CmdCheck entry: the leader's time now (ns), the
// request-id retention (ns; ≤ 0 means DefaultRetention) and the ops.
func EncodeCheck(dst []byte, now, retention int64, ops []Op) []byte {
	dst = append(dst, CmdCheck, cmdVersion)
	dst = binary.AppendVarint(dst, now)
	dst = binary.AppendVarint(dst, retention)
	return AppendOps(dst, ops)
}

// EncodePutPolicy encodes a CmdPutPolicy entry.
func EncodePutPolicy(p Policy) []byte {
	return appendPolicy([]byte{CmdPutPolicy, cmdVersion}, p)
}

// EncodeDeletePolicy encodes a CmdDeletePolicy entry.
func EncodeDeletePolicy(name string) []byte {
	return appendString([]byte{CmdDeletePolicy, cmdVersion}, name)
}

// EncodeResetKey encodes a CmdResetKey entry for c's key under c's limit
// (policy or inline spec). c.Cost is ignored.
func EncodeResetKey(c Check) []byte {
	c.Cost = 0
	return appendCheck([]byte{CmdResetKey, cmdVersion}, &c)
}

// EncodeExpire encodes a CmdExpire entry: remove up to max expired entries as
// of the leader's time now.
func EncodeExpire(now int64, max int) []byte {
	dst := binary.AppendVarint([]byte{CmdExpire, cmdVersion}, now)
	if max < 0 {
		max = 0
	}
	return binary.AppendUvarint(dst, uint64(max))
}

// EncodeSetNode encodes a CmdSetNode entry recording a node's HTTP address.
func EncodeSetNode(id, httpAddr string) []byte {
	return appendString(appendString([]byte{CmdSetNode, cmdVersion}, id), httpAddr)
}

// EncodeRemoveNode encodes a CmdRemoveNode entry.
func EncodeRemoveNode(id string) []byte {
	return appendString([]byte{CmdRemoveNode, cmdVersion}, id)
}

// AppendOps appends the wire form of ops (no time: followers forward ops to
// the leader, which stamps them).
func AppendOps(dst []byte, ops []Op) []byte {
	dst = append(dst, opsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for i := range ops {
		op := &ops[i]
		var flags byte
		if op.All {
			flags |= opAll
		}
		if op.RequestID != "" {
			flags |= opRequestID
		}
		dst = append(dst, flags)
		if op.RequestID != "" {
			dst = appendString(dst, op.RequestID)
		}
		dst = binary.AppendUvarint(dst, uint64(len(op.Checks)))
		for j := range op.Checks {
			dst = appendCheck(dst, &op.Checks[j])
		}
	}
	return dst
}

// appendCheck writes kind ‖ key ‖ limit ‖ cost. Both or neither limit may be
// encoded; the state machine answers such a check with invalid_argument.
func appendCheck(dst []byte, c *Check) []byte {
	var kind byte
	if c.ByPlan {
		kind |= limitPlan
	}
	if c.PlanInfo {
		dst = append(dst, limitInfo)
		dst = appendString(dst, c.Key)
		return binary.AppendVarint(dst, 0)
	}
	if c.Adjust {
		kind = limitAdjust // alone: Policy carries the plan limit's name
		dst = append(dst, kind)
		dst = appendString(dst, c.Key)
		dst = appendString(dst, c.Policy)
		return binary.AppendVarint(dst, c.Cost)
	}
	if c.Policy != "" {
		kind |= limitPolicy
	}
	if c.Spec != nil {
		kind |= limitSpec
	}
	kind |= slotKind(c)  // slots.go
	kind |= costsKind(c) // reserve.go
	dst = append(dst, kind)
	dst = appendString(dst, c.Key)
	if c.Policy != "" {
		dst = appendString(dst, c.Policy)
	}
	if c.Spec != nil {
		// Length-prefixed so the state machine can use the bytes as the
		// limit's identity without decoding them.
		n := len(dst)
		dst = append(dst, 0)
		dst = algo.AppendSpec(dst, *c.Spec)
		dst = insertLength(dst, n)
	}
	if kind&(limitRelease|limitRenew) != 0 {
		dst = appendString(dst, c.Slot)
	}
	if kind&limitCosts != 0 {
		dst = appendCosts(dst, c) // reserve.go
	}
	return binary.AppendVarint(dst, c.Cost)
}

// insertLength replaces the placeholder byte at dst[at] with the uvarint
// length of dst[at+1:].
func insertLength(dst []byte, at int) []byte {
	body := len(dst) - at - 1
	var lb [binary.MaxVarintLen64]byte
	ln := binary.PutUvarint(lb[:], uint64(body))
	if ln == 1 {
		dst[at] = lb[0]
		return dst
	}
	dst = append(dst, lb[1:ln]...) // grow
	copy(dst[at+ln:], dst[at+1:at+1+body])
	copy(dst[at:], lb[:ln])
	return dst
}

// DecodeOps decodes AppendOps output. Inline specs are decoded and validated.
func DecodeOps(b []byte) ([]Op, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != opsVersion {
		return nil, fmt.Errorf("decode ops: unknown version %d", v)
	}
	refs, checks := d.ops(nil, nil)
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode ops: %w", d.err)
	}
	ops := make([]Op, len(refs))
	all := make([]Check, len(checks))
	for i, r := range refs {
		op := Op{All: r.all, RequestID: string(r.requestID), Checks: all[r.first : r.first+r.n : r.first+r.n]}
		for j := range op.Checks {
			c := &checks[r.first+j]
			oc := &op.Checks[j]
			oc.Key, oc.Cost, oc.ByPlan, oc.PlanInfo = string(c.key), c.cost, c.kind == limitPlan, c.kind == limitInfo
			if c.kind == limitAdjust {
				oc.Adjust, oc.Policy = true, string(c.policy)
				continue
			}
			if c.kind&limitPolicy != 0 {
				oc.Policy = string(c.policy)
			}
			oc.SlotOp, oc.Slot = slotOpOf(c) // slots.go
			c.costs.setCheck(oc)             // reserve.go
			if c.kind&limitSpec != 0 {
				s, err := decodeSpec(c.spec)
				if err != nil {
					return nil, fmt.Errorf("decode ops: op %d check %d: %w", i, j, err)
				}
				oc.Spec = &s
			}
		}
		ops[i] = op
	}
	return ops, nil
}

// decodeSpec decodes and validates a whole AppendSpec encoding.
func decodeSpec(b []byte) (algo.Spec, error) {
	s, n, err := algo.DecodeSpec(b)
	if err != nil {
		return algo.Spec{}, err
	}
	if n != len(b) {
		return algo.Spec{}, fmt.Errorf("spec: %d trailing bytes", len(b)-n)
	}
	return s.Validate()
}

// AppendResults appends the wire form of rs.
func AppendResults(dst []byte, rs []Result) []byte {
	dst = append(dst, resultsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for i := range rs {
		dst = appendResult(dst, &rs[i])
	}
	return dst
}

func appendResult(dst []byte, r *Result) []byte {
	var flags byte
	if r.Allowed {
		flags |= resAllowed
	}
	if r.Replayed {
		flags |= resReplayed
	}
	if r.Err != nil {
		flags |= resErr
	}
	dst = append(dst, flags)
	if r.Err != nil {
		dst = appendString(dst, string(r.Err.Code))
		dst = appendString(dst, r.Err.Field)
		dst = appendString(dst, r.Err.Message)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Decisions)))
	for i := range r.Decisions {
		dd := &r.Decisions[i]
		var f byte
		if dd.Allowed {
			f |= decAllowed
		}
		if dd.ShadowRefused {
			f |= decShadowRefused
		}
		if dd.LeasedElsewhere {
			f |= decLeasedElsewhere
		}
		if dd.Plan != nil {
			f |= decPlan
		}
		if dd.Reason == ReasonBanned {
			f |= decBanned
		}
		if dd.Slot != "" {
			f |= decSlot
		}
		if hasCostDecision(dd) {
			f |= decCosts // reserve.go
		}
		dst = append(dst, f)
		dst = appendAlgoDecision(dst, &dd.Decision)
		if dd.Plan != nil {
			dst = appendPlanDecision(dst, dd.Plan) // plan.go
		}
		if dd.Slot != "" {
			dst = appendString(dst, dd.Slot)
			dst = binary.AppendVarint(dst, int64(dd.SlotHold))
		}
		if f&decCosts != 0 {
			dst = appendCostDecision(dst, dd) // reserve.go
		}
	}
	return dst
}

// DecodeResults decodes AppendResults output.
func DecodeResults(b []byte) ([]Result, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != resultsVersion {
		return nil, fmt.Errorf("decode results: unknown version %d", v)
	}
	n := d.count(minResult)
	rs := make([]Result, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		rs = append(rs, d.result())
	}
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return nil, fmt.Errorf("decode results: %w", d.err)
	}
	return rs, nil
}

// Policy flag bits. A binary older than a bit refuses entries that set it
// (unknown flags stop the node), so a bit may be set only once every node
// knows it.
const (
	policyShadow          byte = 1
	policyNoLocalRefusals byte = 2  // Policy.NoLocalRefusals
	policyLease           byte = 4  // Policy.Lease: uvarint(share) uvarint(max_ttl) after the spec
	policyLeaseNoStrict   byte = 8  // Policy.Lease.NoStrict ("strict": false); only with policyLease
	policyMaxKeys         byte = 16 // Policy.MaxKeys: uvarint after the spec and lease
	// Policy.OnExceed: uvarint(ban) uvarint(steps) uvarint(step)… uvarint(forget_after)
	// after the spec, lease and max keys (ban.go).
	policyOnExceed byte = 0x80
	// Policy.Options: a limit options block after everything else (limitopts.go).
	policyOptions byte = 0x40
)

// appendPolicy writes version ‖ name ‖ flags ‖ spec [‖ lease]. It is both the payload
// of CmdPutPolicy and the value stored in the policies bucket.
func appendPolicy(dst []byte, p Policy) []byte {
	dst = append(dst, policyVersion)
	dst = appendString(dst, p.Name)
	var flags byte
	if p.Shadow {
		flags |= policyShadow
	}
	if p.NoLocalRefusals {
		// Set only when off, so every policy written before the flag
		// existed, and every default one, encodes as before.
		flags |= policyNoLocalRefusals
	}
	if p.Lease.Enabled() {
		// Set only with a lease option, so policies without one encode
		// as before.
		flags |= policyLease
		if p.Lease.NoStrict {
			// Set only when off, so a lease option with the default
			// strict encodes as before the field existed.
			flags |= policyLeaseNoStrict
		}
	}
	if p.MaxKeys > 0 {
		flags |= policyMaxKeys // set only with a budget: other policies encode as before
	}
	if p.OnExceed.Ban > 0 {
		flags |= policyOnExceed // set only with the option: older policies encode as before
	}
	if !p.Options.IsZero() {
		flags |= policyOptions // set only with an option: older policies encode as before
	}
	dst = append(dst, flags)
	dst = algo.AppendSpec(dst, p.Spec)
	if p.Lease.Enabled() {
		dst = binary.AppendUvarint(dst, uint64(p.Lease.Share))
		dst = binary.AppendUvarint(dst, uint64(p.Lease.MaxTTL))
	}
	if p.MaxKeys > 0 {
		dst = binary.AppendUvarint(dst, uint64(p.MaxKeys))
	}
	if p.OnExceed.Ban > 0 {
		dst = appendOnExceed(dst, &p.OnExceed)
	}
	dst = appendLimitOptions(dst, &p.Options)
	return dst
}

// decodePolicy reads appendPolicy output, which must end the input. A spec
// that is well formed but invalid (algo reports a *FieldError) is returned as
// invalid rather than failing the decoder: it is a deterministic answer for
// the command, not a reason to stop the node.
func decodePolicy(d *decoder) (p Policy, invalid error) {
	if v := d.byte(); d.err == nil && v != policyVersion {
		d.fail(fmt.Errorf("unknown policy version %d", v))
		return Policy{}, nil
	}
	p.Name = string(d.bytes())
	flags := d.byte()
	if d.err != nil {
		return Policy{}, nil
	}
	if flags&^(policyShadow|policyNoLocalRefusals|policyLease|policyLeaseNoStrict|policyMaxKeys|policyOnExceed|policyOptions) != 0 {
		d.fail(fmt.Errorf("unknown policy flags %#x", flags))
		return Policy{}, nil
	}
	if flags&(policyLease|policyLeaseNoStrict) == policyLeaseNoStrict {
		d.fail(fmt.Errorf("policy flags %#x: strict off without a lease option", flags))
		return Policy{}, nil
	}
	p.Shadow = flags&policyShadow != 0
	p.NoLocalRefusals = flags&policyNoLocalRefusals != 0
	s, n, err := algo.DecodeSpec(d.b[d.off:])
	if err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			d.off = len(d.b)
			return p, err
		}
		d.fail(fmt.Errorf("policy %q: %w", p.Name, err))
		return Policy{}, nil
	}
	d.off += n
	p.Spec = s
	var share, ttl uint64
	if flags&policyLease != 0 {
		share, ttl = d.uvarint(), d.uvarint()
	}
	if flags&policyMaxKeys != 0 {
		// Read before the lease is judged: an invalid lease is an answer,
		// and the entry must still decode to its end.
		p.MaxKeys = clampCount(d.uvarint())
	}
	// Read everything before judging anything: an invalid option is an
	// answer, and the bytes after it must not be left to fail the entry.
	var invalidOnExceed error
	if flags&policyOnExceed != 0 {
		p.OnExceed, invalidOnExceed = decodeOnExceed(d)
	}
	var invalidOptions error
	if flags&policyOptions != 0 {
		p.Options, invalidOptions = decodeLimitOptions(d)
	}
	if d.err != nil {
		return Policy{}, nil
	}
	if flags&policyLease != 0 {
		if share > uint64(algo.LeaseShareScale) || ttl > uint64(algo.MaxLeaseTTL) {
			// Well formed but invalid: an answer, not a reason to stop.
			return p, &algo.FieldError{Field: "lease", Message: fmt.Sprintf("share %d or max_ttl %d out of range", share, ttl)}
		}
		p.Lease = algo.Lease{Share: int64(share), MaxTTL: time.Duration(ttl), NoStrict: flags&policyLeaseNoStrict != 0}
		if err := algo.ValidateLease(s, p.Lease); err != nil {
			return p, err
		}
		if p.Shadow {
			return p, &algo.FieldError{Field: "lease", Message: "not with shadow (a shadow policy allows every check)"}
		}
	}
	if invalidOnExceed != nil {
		return p, invalidOnExceed
	}
	return p, limitOptionsFit(&p.Spec, &p.Options, invalidOptions) // history.go
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// command is a decoded log entry. The state machine reuses one, so its
// slices (and the byte slices inside, which alias the entry) are valid only
// while that entry is applied.
type command struct {
	typ            byte
	now, retention int64      // CmdCheck, CmdExpire (now)
	bounds         Bounds     // CmdCheck: the leader's (budget.go)
	ops            []opRef    // CmdCheck
	checks         []checkRef // CmdCheck; CmdResetKey uses checks[0]
	policy         Policy     // CmdPutPolicy
	policyErr      error      // CmdPutPolicy: the spec is well formed but invalid
	name, addr     string     // CmdDeletePolicy, CmdSetNode, CmdRemoveNode
	max            int        // CmdExpire
	domain         []byte     // CmdPutDomain (aliases the entry)
	holder         []byte     // CmdGrantLease, CmdReturnLease (aliases the entry)
	leases         []leaseRef // CmdGrantLease, CmdReturnLease
	pl             planCmd    // the plan commands (plan.go)
	alert          alertCmd   // the alert commands (outbox.go, webhooks.go)

	hs hashSlotCmd // the hash slot commands (hashslot.go)

	d decoder // decodeCommand's, kept here so it does not escape per entry
}

// opRef is an op whose checks are checks[first : first+n] of its command.
type opRef struct {
	all       bool
	requestID []byte
	first, n  int
}

// checkRef is a check whose byte fields alias the entry.
type checkRef struct {
	kind   byte
	key    []byte
	policy []byte
	spec   []byte // AppendSpec encoding
	slot   []byte // limitRelease, limitRenew (slots.go)
	cost   int64
	// costs: the fields kind bit limitCosts carried; the bit itself is
	// cleared on decode, so that a reserve or overdraft check resolves like
	// any other (reserve.go).
	costs costRef
}

// decodeCommand decodes one log entry into c, reusing c's slices. Errors wrap
// ErrUnknownCommand or ErrBadCommand.
func decodeCommand(c *command, b []byte) error {
	if len(b) < 2 {
		return fmt.Errorf("%w: %d bytes", ErrBadCommand, len(b))
	}
	c.typ = b[0]
	ct := commands[c.typ]
	if ct == nil {
		return fmt.Errorf("%w: type %d", ErrUnknownCommand, c.typ)
	}
	if b[1] != cmdVersion {
		return fmt.Errorf("%w: type %d version %d", ErrUnknownCommand, c.typ, b[1])
	}
	// The decoder lives in c: a local passed to the table's function
	// would escape through the indirect call and cost an allocation.
	c.d = decoder{b: b, off: 2}
	d := &c.d
	ct.decode(c, d)
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return fmt.Errorf("%w: type %d: %v", ErrBadCommand, c.typ, d.err)
	}
	return nil
}

// decoder reads the encodings; after the first error every read returns a
// zero value and the error sticks.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(errTruncated)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.off += n
	return v
}

// bytes reads a length-prefixed string, aliasing the input.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(errTruncated)
		return nil
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v
}

// count reads a count of items each at least minSize bytes long, and fails
// if the remaining input cannot hold them.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64((len(d.b)-d.off)/minSize) {
		d.fail(fmt.Errorf("count %d exceeds the remaining %d bytes", n, len(d.b)-d.off))
		return 0
	}
	return int(n)
}

// Minimum encoded sizes: an op is flags ‖ count; a check is kind ‖ key
// length ‖ cost; a result is flags ‖ count; a decision is flags and 5 varints.
const (
	minOp       = 2
	minCheck    = 3
	minResult   = 2
	minDecision = 6
)

// ops reads the ops after the version byte, appending to ops and checks.
func (d *decoder) ops(ops []opRef, checks []checkRef) ([]opRef, []checkRef) {
	n := d.count(minOp)
	for i := 0; i < n && d.err == nil; i++ {
		flags := d.byte()
		if flags&^(opAll|opRequestID) != 0 {
			d.fail(fmt.Errorf("unknown op flags %#x", flags))
			break
		}
		op := opRef{all: flags&opAll != 0, first: len(checks)}
		if flags&opRequestID != 0 {
			op.requestID = d.bytes()
		}
		op.n = d.count(minCheck)
		for j := 0; j < op.n && d.err == nil; j++ {
			checks = append(checks, d.check())
		}
		ops = append(ops, op)
	}
	return ops, checks
}

func (d *decoder) check() checkRef {
	c := checkRef{kind: d.byte()}
	if c.kind == limitAdjust {
		c.key = d.bytes()
		c.policy = d.bytes()
		c.cost = d.varint()
		return c
	}
	if c.kind&^(limitPolicy|limitSpec|limitRelease|limitRenew|limitCosts) != 0 && c.kind != limitPlan && c.kind != limitInfo ||
		c.kind&limitRelease != 0 && c.kind&limitRenew != 0 {
		d.fail(fmt.Errorf("unknown limit kind %#x", c.kind))
		return checkRef{}
	}
	c.key = d.bytes()
	if c.kind&limitPolicy != 0 {
		c.policy = d.bytes()
	}
	if c.kind&limitSpec != 0 {
		c.spec = d.bytes()
	}
	if c.kind&(limitRelease|limitRenew) != 0 {
		c.slot = d.bytes()
	}
	if c.kind&limitCosts != 0 {
		c.kind &^= limitCosts
		c.costs = d.costs() // reserve.go
	}
	c.cost = d.varint()
	return c
}

func (d *decoder) result() Result {
	flags := d.byte()
	if flags&^(resAllowed|resReplayed|resErr) != 0 {
		d.fail(fmt.Errorf("unknown result flags %#x", flags))
		return Result{}
	}
	r := Result{Allowed: flags&resAllowed != 0, Replayed: flags&resReplayed != 0}
	if flags&resErr != 0 {
		r.Err = &Error{Code: Code(d.bytes()), Field: string(d.bytes()), Message: string(d.bytes())}
	}
	n := d.count(minDecision)
	if n > 0 {
		r.Decisions = make([]Decision, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		f := d.byte()
		if f&^(decAllowed|decShadowRefused|decLeasedElsewhere|decPlan|decBanned|decSlot|decCosts) != 0 {
			d.fail(fmt.Errorf("unknown decision flags %#x", f))
			break
		}
		dd := &r.Decisions[i]
		dd.Allowed = f&decAllowed != 0
		dd.ShadowRefused = f&decShadowRefused != 0
		dd.LeasedElsewhere = f&decLeasedElsewhere != 0
		if f&decBanned != 0 {
			dd.Reason = ReasonBanned
		}
		dd.Limit = d.varint()
		dd.Remaining = d.varint()
		dd.ResetAfter = time.Duration(d.varint())
		dd.RetryAfter = time.Duration(d.varint())
		dd.Delay = time.Duration(d.varint())
		if f&decPlan != 0 {
			dd.Plan = d.planDecision() // plan.go
		}
		if f&decSlot != 0 {
			dd.Slot = string(d.bytes())
			dd.SlotHold = time.Duration(d.varint())
		}
		if f&decCosts != 0 {
			d.costDecision(dd) // reserve.go
		}
	}
	if d.err != nil {
		return Result{}
	}
	return r
}
