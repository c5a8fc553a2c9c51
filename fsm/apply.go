package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/overlimit"
	"github.com/limitd/limitd/persist"
)

// applier holds the apply path's reusable memory and the changes to the
// in-memory policy and node maps that wait for the transaction to commit.
// Only the goroutine applying entries touches it.
type applier struct {
	f   *FSM
	cmd command

	keepBuf   []byte // keepExpired's decision buffer
	banKeyBuf []byte // ban.go

	// Staged by entries of the current transaction: a nil *Policy or a
	// deleted node records a removal. Later entries of the same
	// transaction see them; publish makes them visible after commit.
	pendingPolicies map[string]*Policy
	pendingNodes    map[string]nodeChange

	specs map[string]*specEntry // inline spec encodings seen recently

	keyBuf, decideBuf, resBuf []byte
	lims                      []limit
	tent                      []tentative
	seen                      []bool // per check of an op: its key was decided earlier in the op

	leaseKeyBuf, leaseBuf []byte       // lease.go
	plan                  planApplier  // plan.go
	leaseEntries          []leaseEntry // lease.go: the record being worked on

	budget budgetCounters // budget.go

	index uint64      // the Raft index of the entry being applied (slot ids)
	slot  slotApplier // slots.go

	markKeyBuf         []byte         // notify.go
	emitted, emittedAt uint64         // outbox.go: events of the entry at index emittedAt
	costs              costApplier    // reserve.go
	hist               historyApplier // history.go

	// hashslot.go: the ownership table checks are decided against (nil:
	// every slot owned), staged while an entry changes it.
	hs         *hashSlotTable
	hsStaged   bool
	hsKeyBuf   []byte
	hsRefusals hashSlotRefusals
}

type nodeChange struct {
	addr    string
	deleted bool
}

// specEntry is a decoded inline spec and its canonical encoding (the
// identity of the limit in storage keys), or why it is invalid.
type specEntry struct {
	spec   algo.Spec
	canon  []byte
	canonS string // canon as a string: the over-limit cache's identity
	err    *Error
}

// maxSpecCache bounds the inline-spec cache; it is cleared when full.
const maxSpecCache = 1024

// limit is a check's resolved limit.
type limit struct {
	spec   *algo.Spec
	shadow bool
	policy bool   // ident is a policy name, else a canonical spec encoding
	ident  []byte // valid for the entry
	// name is the over-limit cache's identity of the limit: the policy's
	// name or the inline spec's canonical encoding, kept as a string with
	// the policy or spec entry so that observing allocates nothing.
	name string
	// noCache: the policy has local_refusals off; its decisions are not
	// observed by the over-limit cache.
	noCache bool
	// maxKeys: the policy's key budget (0: none; budget.go).
	maxKeys int64
	// tag, when set, is the storage key's first byte in place of 'p' or 's'
	// (a plan limit's state, plan.go).
	tag byte
	// onExceed is the policy's ban option, nil without one (ban.go).
	onExceed *OnExceed
	// notify is the limit's alert thresholds, nil without any (notify.go).
	notify *[MaxNotify]uint16
	// history is the limit's history option in ns (0: none; history.go).
	history int64
}

// tentative is a key's state while an op is being decided: the stored state,
// then what each check of the op made of it.
type tentative struct {
	key     []byte
	prev    persist.State
	data    []byte
	expiry  int64
	changed bool
	owned   bool // data is this op's copy (tx.Alloc): writable in place
}

func (a *applier) init(f *FSM) {
	a.f = f
	a.pendingPolicies = make(map[string]*Policy)
	a.pendingNodes = make(map[string]nodeChange)
	a.specs = make(map[string]*specEntry)
}

// apply applies one command entry. A returned error is fatal.
func (a *applier) apply(tx *persist.Tx, data []byte) (interface{}, error) {
	c := &a.cmd
	if err := decodeCommand(c, data); err != nil {
		return nil, err
	}
	if a.hs != nil && a.hs.notOwned > 0 && c.typ != CmdCheck { // hashslot.go: per-key writes of slots not owned
		if r, done, err := a.applyOwned(tx, c); done || err != nil {
			return r, err
		}
	}
	return commands[c.typ].apply(a, tx, c) // decodeCommand checked the type
}

// errResponse keeps a nil *Error from becoming a non-nil error interface.
func errResponse(e *Error) interface{} {
	if e == nil {
		return nil
	}
	return error(e)
}

// clamp makes time monotonic across leaders: an entry stamped earlier than
// one already applied is decided at the later time, so a new leader whose
// clock is behind cannot reopen windows.
func clamp(tx *persist.Tx, now int64) int64 {
	if last := tx.Meta().LastTime; now < last {
		now = last
	}
	tx.SetLastTime(now)
	return now
}

// publish makes the committed policy and node changes visible.
func (a *applier) publish() {
	a.f.domains.publish()
	a.f.plans.publish()
	a.f.lists.publish()
	a.f.bans.publish()
	a.f.outbox.publish()
	a.f.webhooks.publish()
	a.publishHashSlots()
	a.budget.episodes.publish()
	a.f.top.flush() // topkeys.go: the batch's plan counts
	if len(a.pendingPolicies) == 0 && len(a.pendingNodes) == 0 {
		return
	}
	f := a.f
	f.mu.Lock()
	for name, p := range a.pendingPolicies {
		if p == nil {
			delete(f.policies, name)
		} else {
			f.policies[name] = p
		}
	}
	for id, c := range a.pendingNodes {
		if c.deleted {
			delete(f.nodes, id)
		} else {
			f.nodes[id] = c.addr
		}
	}
	f.mu.Unlock()
	a.discard()
}

// discard drops changes of a transaction that did not commit.
func (a *applier) discard() {
	a.f.domains.discard()
	a.f.plans.discard()
	a.f.lists.discard()
	a.f.bans.discard()
	a.f.outbox.discard()
	a.f.webhooks.discard()
	a.discardHashSlots()
	a.budget.episodes.discard()
	a.f.top.drop()
	clear(a.pendingPolicies)
	clear(a.pendingNodes)
}

func (a *applier) lookupPolicy(name []byte) (*Policy, bool) {
	if p, ok := a.pendingPolicies[string(name)]; ok {
		return p, p != nil
	}
	p, ok := a.f.policies[string(name)]
	return p, ok
}

func (a *applier) putPolicy(tx *persist.Tx, p Policy) (*Error, error) {
	if p.Name == "" || len(p.Name) > MaxPolicyName || reservedPolicyName(p.Name) {
		return &Error{Code: CodeInvalidArgument, Field: "name", Message: fmt.Sprintf("must be 1 to %d bytes", MaxPolicyName)}, nil
	}
	spec, err := p.Spec.Validate()
	if err != nil {
		return fieldError(err, ""), nil
	}
	p.Spec = spec
	a.resBuf = appendPolicy(a.resBuf[:0], p)
	if err := tx.PutPolicy(p.Name, a.resBuf); err != nil {
		return nil, err
	}
	a.pendingPolicies[p.Name] = &p
	a.forgetLimit(p.Name)
	return nil, nil
}

func (a *applier) deletePolicy(tx *persist.Tx, name string) (*Error, error) {
	if _, ok := a.lookupPolicy([]byte(name)); !ok {
		return notFound(name), nil
	}
	if _, err := tx.DeletePolicy(name); err != nil {
		return nil, err
	}
	// Keys stored under the policy are left to expire: deleting them here
	// would be unbounded work in one entry.
	a.pendingPolicies[name] = nil
	a.forgetLimit(name)
	a.f.top.forget(name) // topkeys.go
	return nil, nil
}

func (a *applier) resetKey(tx *persist.Tx, ck *checkRef) (*Error, error) {
	if a.hs != nil { // hashslot.go
		if e := a.refuseHashSlots(unsafe.Slice(ck, 1)); e != nil {
			return e, nil
		}
	}
	var lim limit
	if e := a.resolve(ck, &lim); e != nil {
		return e, nil
	}
	key := a.storageKey(ck, &lim)
	st, err := tx.State(key)
	if err != nil {
		return nil, err
	}
	if err := tx.DeleteState(key, st); err != nil {
		return nil, err
	}
	if err := a.holdLeased(tx, ck, &lim, key); err != nil { // lease.go
		return nil, err
	}
	if c := a.f.opts.OverLimit; c != nil {
		// A reset can shorten a cached refusal: drop it before anything
		// later in the log is applied.
		c.Forget(overlimit.LimitID{Policy: lim.policy, Ident: lim.name}, ck.key)
	}
	return nil, nil
}

// forgetLimit drops the over-limit cache's entries of a policy whose spec
// changed or that was deleted, at apply time: later entries of the same
// batch decide under the new spec, and their observations must survive.
func (a *applier) forgetLimit(name string) {
	if c := a.f.opts.OverLimit; c != nil {
		c.ForgetLimit(overlimit.LimitID{Policy: true, Ident: name})
	}
}

func notFound(policy string) *Error {
	return &Error{Code: CodeNotFound, Field: "policy", Message: fmt.Sprintf("policy %q does not exist", policy)}
}

// fieldError turns a validation error into an invalid_argument *Error with
// the field path under prefix ("limit" for inline limits).
func fieldError(err error, prefix string) *Error {
	var fe *algo.FieldError
	if errors.As(err, &fe) {
		field := fe.Field
		if prefix != "" {
			field = prefix + "." + field
		}
		return &Error{Code: CodeInvalidArgument, Field: field, Message: fe.Message}
	}
	if prefix == "" {
		prefix = "spec"
	}
	return &Error{Code: CodeInvalidArgument, Field: prefix, Message: err.Error()}
}

// resolve finds a check's limit, or the *Error that answers the op.
func (a *applier) resolve(ck *checkRef, lim *limit) *Error {
	switch {
	case len(ck.key) == 0:
		return &Error{Code: CodeInvalidArgument, Field: "key", Message: "required"}
	case len(ck.key) > MaxKeyBytes:
		return &Error{Code: CodeInvalidArgument, Field: "key", Message: fmt.Sprintf("longer than %d bytes", MaxKeyBytes)}
	case ck.cost < 0:
		return &Error{Code: CodeInvalidArgument, Field: "cost", Message: "must not be negative"}
	case ck.kind == limitPolicy:
		p, ok := a.lookupPolicy(ck.policy)
		if !ok {
			return notFound(string(ck.policy))
		}
		*lim = limit{spec: &p.Spec, shadow: p.Shadow, policy: true, ident: ck.policy, name: p.Name, noCache: p.NoLocalRefusals || notCacheable(&p.Spec), maxKeys: p.MaxKeys, onExceed: onExceedOf(p), notify: notifyOf(p), history: int64(p.Options.History)}
		return nil
	case ck.kind == limitSpec:
		se := a.specs[string(ck.spec)]
		if se == nil {
			se = newSpecEntry(ck.spec)
			if len(a.specs) >= maxSpecCache {
				clear(a.specs)
			}
			a.specs[string(ck.spec)] = se
		}
		if se.err != nil {
			return se.err
		}
		*lim = limit{spec: &se.spec, ident: se.canon, name: se.canonS, noCache: notCacheable(&se.spec)}
		return nil
	case ck.kind == limitPlan || ck.kind == limitAdjust || ck.kind == limitInfo:
		return &Error{Code: CodeInvalidArgument, Field: "policy", Message: "a check under the key's plan (no policy, no limit) must be alone in its request"}
	default:
		return &Error{Code: CodeInvalidArgument, Field: "limit", Message: "a check needs exactly one of policy or limit"}
	}
}

func newSpecEntry(enc []byte) *specEntry {
	s, err := decodeSpec(enc)
	if err != nil {
		return &specEntry{err: fieldError(err, "limit")}
	}
	canon := algo.AppendSpec(nil, s)
	return &specEntry{spec: s, canon: canon, canonS: string(canon)}
}

// storageKey is the limit identity followed by the key:
// 'p' ‖ uvarint(len(name)) ‖ name ‖ key, or 's' ‖ uvarint(len(spec)) ‖ spec ‖ key.
// It lives in a.keyBuf until the next call.
func (a *applier) storageKey(ck *checkRef, lim *limit) []byte {
	b := a.keyBuf[:0]
	if lim.tag != 0 {
		b = append(b, lim.tag)
	} else if lim.policy {
		b = append(b, 'p')
	} else {
		b = append(b, 's')
	}
	b = binary.AppendUvarint(b, uint64(len(lim.ident)))
	b = append(b, lim.ident...)
	b = append(b, ck.key...)
	a.keyBuf = b
	return b
}

// check applies a CmdCheck entry: its ops in order, each seeing the writes of
// the ones before, then a small bounded expiry sweep so a busy node keeps up
// without extra entries.
func (a *applier) check(tx *persist.Tx, c *command) ([]Result, error) {
	now := clamp(tx, c.now)
	retention := c.retention
	if retention <= 0 {
		retention = int64(DefaultRetention)
	}
	results := make([]Result, len(c.ops))
	decisions := make([]Decision, len(c.checks))
	for i := range c.ops {
		op := &c.ops[i]
		a.slot.op = i // slots.go
		end := op.first + op.n
		res, err := a.applyOp(tx, op, c.checks[op.first:end], decisions[op.first:end:end], now, retention)
		if err != nil {
			return nil, err
		}
		results[i] = res
	}
	if _, err := a.expire(tx, now, 2*len(c.ops)+16); err != nil { // reserve.go
		return nil, err
	}
	return results, nil
}

func (a *applier) applyOp(tx *persist.Tx, op *opRef, checks []checkRef, decs []Decision, now, retention int64) (Result, error) {
	if a.hs != nil { // hashslot.go: a key of a slot not owned here is refused before anything is read
		if e := a.refuseHashSlots(checks); e != nil {
			return Result{Err: e}, nil
		}
	}
	var prevReq persist.Request
	if len(op.requestID) > 0 {
		if len(op.requestID) > MaxRequestIDBytes {
			return Result{Err: &Error{Code: CodeInvalidArgument, Field: "request_id", Message: fmt.Sprintf("longer than %d bytes", MaxRequestIDBytes)}}, nil
		}
		r, err := tx.Request(op.requestID)
		if err != nil {
			return Result{}, err
		}
		if r.Found && r.Expiry > now {
			fp, res, err := decodeRequestRecord(r.Result)
			if err != nil {
				return Result{}, fmt.Errorf("request %q: %w: stored result: %v", op.requestID, persist.ErrCorrupt, err)
			}
			if e := requestConflict(fp, fingerprintOf(op, checks), checks); e != nil {
				return Result{Err: e}, nil // nothing consumed; the first request's record stays
			}
			res.Replayed = true
			return res, nil
		}
		prevReq = r // absent, or expired but not yet swept: overwritten
		if !r.Found {
			if e, err := a.refuseNewRequestID(tx, &a.cmd.bounds, now); e != nil || err != nil {
				return Result{Err: e}, err // nothing consumed, nothing remembered
			}
		}
	}
	if len(checks) == 0 {
		return Result{Err: &Error{Code: CodeInvalidArgument, Field: "checks", Message: "at least one check is required"}}, nil
	}
	var res Result
	var err error
	a.slot.requestID = op.requestID // slots.go
	isCost, e := costOp(checks)     // reserve.go
	if e != nil {
		return Result{Err: e}, nil
	}
	if isSlot, e := slotOp(checks); e != nil {
		return Result{Err: e}, nil
	} else if isCost {
		res, err = a.applyCostOp(tx, op, checks, decs, now) // reserve.go
	} else if isSlot {
		res, err = a.applySlotOp(tx, &checks[0], decs, now) // slots.go
	} else if planOp(checks) {
		res, err = a.applyPlanOp(tx, &checks[0], decs, now) // plan.go
	} else {
		a.lims = a.lims[:0]
		for j := range checks {
			a.lims = append(a.lims, limit{})
			if e := a.resolve(&checks[j], &a.lims[j]); e != nil {
				return Result{Err: e}, nil // nothing consumed, nothing remembered
			}
		}
		res, err = a.decideOp(tx, checks, a.lims, decs, now, op.all)
		a.countAcquired(&res) // slots.go
	}
	if err != nil || res.Err != nil || len(op.requestID) == 0 {
		return res, err
	}
	if a.spent(checks, &res, now) { // reserve.go: refundable
		a.resBuf = appendSpentRecord(a.resBuf[:0], fingerprintOf(op, checks), &res, &a.costs.spent)
	} else {
		a.resBuf = appendRequestRecord(a.resBuf[:0], fingerprintOf(op, checks), &res)
	}
	if err := tx.PutRequest(op.requestID, prevReq, a.resBuf, now+retention); err != nil {
		return Result{}, err
	}
	if a.hs != nil { // hashslot.go: the id moves with its slot
		if err := a.indexRequest(tx, op.requestID, checks, now+retention); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// decideOp decides every check of an op against tentative state, so a key
// that appears twice sees its own earlier check, then stores the outcome: for
// an All op only if every check allowed, otherwise each check's new state.
// Shadow policies that refuse report allowed and consume nothing.
//
// A decision that consumes nothing stores nothing: a peek, and a refusal
// under an algorithm whose refusals do not change state (all but
// count_refused), leave the stored state as it was, even where algo
// re-encoded it (a bucket drained to now). Under the same spec that is the
// same state; across a policy's spec change it keeps a replica that answered
// refusals from its over-limit cache identical to one that did not (see
// overlimit/DESIGN.md), and it spares a refused check under attack a write.
func (a *applier) decideOp(tx *persist.Tx, checks []checkRef, lims []limit, decs []Decision, now int64, all bool) (Result, error) {
	multi := len(checks) > 1
	a.tent = a.tent[:0]
	a.seen = a.seen[:0]
	allowed := true
	for j := range checks {
		ck, lim := &checks[j], &lims[j]
		key := a.storageKey(ck, lim)
		if lim.onExceed != nil && !lim.shadow { // ban.go: a banned key is refused, counted nowhere
			d, banned, err := a.banned(tx, lim, key, now)
			if err != nil {
				return Result{}, err
			}
			if banned {
				a.seen = append(a.seen, false)
				decs[j], allowed = d, false
				continue
			}
		}
		ti := -1
		if multi {
			for k := range a.tent {
				if bytes.Equal(a.tent[k].key, key) {
					ti = k
					break
				}
			}
		}
		a.seen = append(a.seen, ti >= 0)
		if ti < 0 {
			st, err := tx.State(key)
			if err != nil {
				return Result{}, err
			}
			if multi {
				key = append(tx.Alloc(len(key))[:0], key...)
			}
			a.tent = append(a.tent, tentative{key: key, prev: st, data: st.Data, expiry: st.Expiry})
			ti = len(a.tent) - 1
		}
		t := &a.tent[ti]
		// On state this op already wrote (its own copy in the transaction's
		// memory), decide in place: no copy of a sliding log per repeat of
		// the key. Not for shadow or count_refused limits, whose refusals
		// must leave the state as it was, which in place cannot promise.
		conc := lim.spec.Algorithm == algo.Concurrency
		inPlace := t.owned && !lim.shadow && !lim.spec.CountRefused && !conc
		var d algo.Decision
		var next []byte
		var err error
		var slot slotGrant
		if conc {
			d, slot, next, err = a.acquire(lim.spec, t.data, now, ck.cost, j) // slots.go
		} else if inPlace {
			d, next, err = algo.DecideInPlace(lim.spec, t.data, now, ck.cost)
		} else {
			d, next, err = algo.Decide(a.decideBuf[:0], lim.spec, t.data, now, ck.cost)
		}
		if err != nil {
			// Deterministic (a state algo cannot read): answer the op,
			// change nothing.
			return Result{Err: decideError(err)}, nil
		}
		if !inPlace && cap(next) > cap(a.decideBuf) {
			a.decideBuf = next[:0]
		}
		dec := Decision{Decision: d}
		dec.Slot, dec.SlotHold = slot.id, slot.hold // set only when algo allowed the acquire: it is stored below
		switch {
		case inPlace:
			// t.data is gone: keep next, which after a refusal or a peek
			// means the same state re-encoded (the key is written anyway:
			// an earlier check of this op changed it).
			t.data = next
			if d.Allowed && ck.cost > 0 {
				t.expiry = now + int64(d.ResetAfter)
			}
		case lim.shadow && !d.Allowed:
			dec.Allowed, dec.ShadowRefused = true, true
		case ck.cost == 0 || !d.Allowed && !lim.spec.CountRefused:
			// Consumes nothing: store nothing (see above).
		default:
			if multi && next != nil {
				next = append(tx.Alloc(len(next))[:0], next...) // decideBuf is reused
				t.owned = true
			}
			t.data, t.expiry, t.changed = next, now+int64(d.ResetAfter), true
		}
		if !d.Allowed && ck.cost > 0 && lim.policy && !lim.shadow {
			if err := a.leasedRefusal(tx, ck, lim, key, now, &dec); err != nil { // lease.go
				return Result{}, err
			}
		}
		if !d.Allowed && ck.cost > 0 && lim.onExceed != nil && !lim.shadow {
			if err := a.offence(tx, lim, ck, key, now, &dec); err != nil { // ban.go
				return Result{}, err
			}
		}
		allowed = allowed && dec.Allowed
		decs[j] = dec
	}
	res := Result{Allowed: allowed, Decisions: decs}
	if all && !allowed {
		dropSlots(decs) // slots.go: nothing was acquired
	}
	if !all || allowed {
		// The key budget (budget.go): an op that would create keys past
		// the leader's bounds is refused before anything of it is written.
		created, inlineCreated := 0, 0
		for k := range a.tent {
			if t := &a.tent[k]; t.changed && !t.prev.Found && t.data != nil {
				created++
				if inlineKeyGroup(t.key) != nil {
					inlineCreated++
				}
			}
		}
		if e, err := a.refuseNewKeys(tx, created, &a.cmd.bounds, now); e != nil || err != nil {
			return Result{Err: e}, err
		}
		if e, err := a.refuseInlineKeys(tx, inlineCreated, &a.cmd.bounds, now); e != nil || err != nil {
			return Result{Err: e}, err
		}
		if created > 0 {
			if e, err := a.refusePolicyKeys(tx, checks, lims, now); e != nil || err != nil {
				return Result{Err: e}, err
			}
		}
		for k := range a.tent {
			if err := writeState(tx, &a.tent[k]); err != nil {
				return Result{}, err
			}
		}
		if err := a.notify(tx, checks, lims, decs, now); err != nil { // notify.go
			return Result{}, err
		}
	}
	if err := a.recordUsage(tx, checks, lims, decs, now, !all || allowed); err != nil { // history.go
		return Result{}, err
	}
	if c := a.f.opts.OverLimit; c != nil {
		a.observe(c, checks, lims, decs, now, all && !allowed)
	}
	return res, nil
}

// observe tells the over-limit cache about an op's decisions, after its
// states are written. In a refused All op, a check whose key an earlier check
// of the op had decided was decided on consumption the op then discarded:
// its refusal is not a fact about the stored state (Uncommitted).
func (a *applier) observe(c *overlimit.Cache, checks []checkRef, lims []limit, decs []Decision, now int64, discarded bool) {
	for j := range checks {
		lim := &lims[j]
		if lim.noCache || decs[j].Reason == ReasonBanned {
			continue // a ban's end is not the limit's: the cache would answer without the reason
		}
		d := decs[j].Decision
		if decs[j].ShadowRefused {
			d.Allowed = false // algo's decision, before shadow mode
		}
		c.Observe(overlimit.Observation{
			ID:          overlimit.LimitID{Policy: lim.policy, Ident: lim.name},
			Key:         checks[j].key,
			Spec:        lim.spec,
			Shadow:      lim.shadow,
			Cost:        checks[j].cost,
			Now:         now,
			Decision:    d,
			Uncommitted: discarded && a.seen[j],
		})
	}
}

func writeState(tx *persist.Tx, t *tentative) error {
	switch {
	case !t.changed:
		return nil
	case t.data == nil: // equivalent to a fresh key
		return tx.DeleteState(t.key, t.prev)
	case t.prev.Found && t.expiry == t.prev.Expiry && bytes.Equal(t.data, t.prev.Data):
		return nil // a refusal or peek that changed nothing
	default:
		return tx.PutState(t.key, t.prev, t.data, t.expiry)
	}
}

func decideError(err error) *Error {
	var fe *algo.FieldError
	if errors.As(err, &fe) {
		if fe.Field == "cost" || fe.Field == "slot" { // the check's, not the limit's (slots.go)
			return fieldError(err, "")
		}
		return fieldError(err, "limit")
	}
	return &Error{Code: CodeInternal, Field: "state", Message: err.Error()}
}

// keepExpired is the expiry sweep's KeepFunc. A key state's stored expiry was
// computed under the policy as it was when the state was last written; a
// policy whose window has grown since (or whose algorithm changed) may still
// count what the state holds after that time, and removing the state then
// would reopen the key early. So before a policy key's state is removed, it
// is decided afresh as a peek under the policy now in force: a state that is
// not back to empty lives until that decision's ResetAfter. Inline limits
// need no such check (their spec is part of the storage key), nor do keys of
// deleted policies (nothing counts them any more).
func (a *applier) keepExpired(key, data []byte, now int64) int64 {
	if len(key) > 0 && key[0] == banKeyPrefix {
		a.banSwept(key) // its expiry is exact: offences forgotten
		return 0
	}
	if len(key) > 0 && key[0] == outboxKeyPrefix {
		a.outboxSwept(key) // outbox.go: undelivered past its age, dropped
		return 0
	}
	if len(key) > 0 && key[0] == tagPlanLimit {
		return a.keepPlanLimit(key, data, now) // plan.go
	}
	if len(key) > 0 && key[0] == reservationKeyPrefix {
		return a.reservationSwept(key, data) // reserve.go
	}
	if len(key) < 2 || key[0] != 'p' {
		return 0
	}
	n, w := binary.Uvarint(key[1:])
	if w <= 0 || uint64(len(key)-1-w) < n {
		return 0
	}
	p, ok := a.lookupPolicy(key[1+w : 1+w+int(n)])
	if !ok {
		return 0
	}
	d, next, err := algo.Decide(a.keepBuf[:0], &p.Spec, data, now, 0)
	if cap(next) > cap(a.keepBuf) {
		a.keepBuf = next[:0]
	}
	if err != nil || d.ResetAfter <= 0 {
		return 0
	}
	return now + int64(d.ResetAfter)
}
