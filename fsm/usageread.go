package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// The read side of usage history (history.go): one key's windows, and the
// export of one closed window for billing. Both read one read transaction
// of the file, at one applied index and its leader time, and propose
// nothing, like the usage inventory (inventory.go).

type (
	UsageQuery      = nodeapi.UsageQuery
	UsageWindow     = nodeapi.UsageWindow
	KeyUsageHistory = nodeapi.KeyUsageHistory
	ExportQuery     = nodeapi.ExportQuery
	ExportRow       = nodeapi.ExportRow
	ExportHeader    = nodeapi.ExportHeader
)

// KeyUsage answers a key's usage of a policy, or of a limit of the key's
// plan at the read's index. Errors: *Error not_found naming policy, key or
// limit; invalid_argument naming limit; anything else is storage.
func (f *FSM) KeyUsage(q UsageQuery) (KeyUsageHistory, error) {
	out := KeyUsageHistory{Key: q.Key, Policy: q.Policy}
	if q.Max <= 0 {
		q.Max = nodeapi.MaxUsageWindows
	}
	err := f.store.View(func(tx *persist.Tx) error {
		m := tx.Meta()
		out.AppliedIndex = m.AppliedIndex
		l := lister{q: KeysQuery{Policy: q.Policy}, now: m.LastTime, tx: tx}
		var history time.Duration
		if q.Policy != "" {
			if err := l.resolve(); err != nil {
				return err
			}
			enc, _ := tx.Policy(q.Policy)
			d := decoder{b: enc}
			p, _ := decodePolicy(&d)
			history = p.Options.History
		} else {
			name, pl, e := l.keyPlanLimit([]byte(q.Key), q.Limit)
			if e != nil {
				return e
			}
			out.Plan, out.Limit, history = name, pl.Name, pl.Options.History
		}
		out.History = history
		key := []byte(q.Key)
		var ws []UsageWindow
		keep := func(w UsageWindow) {
			if w.Start >= q.From && (q.To <= 0 || w.Start < q.To) {
				ws = append(ws, w)
			}
		}
		// The closed windows' rows, oldest first (be64 start), then the
		// record, the latest window.
		prefix := append(append([]byte{tagUsageWindow}, l.base...), key...)
		if err := tx.ScanStates(prefix, nil, func(k []byte, st persist.State) (bool, error) {
			rest := k[len(prefix):]
			if len(rest) != 8 {
				return true, nil // a longer key's row
			}
			r, err := decodeUsageRec(st.Data)
			if err != nil {
				return false, fmt.Errorf("usage window of %q: %w: %v", q.Key, persist.ErrCorrupt, err)
			}
			if st.Expiry > l.now {
				keep(UsageWindow{Start: r.start, End: r.end, Used: r.used, Refused: r.refused})
			}
			return true, nil
		}); err != nil {
			return err
		}
		cs, ce, err := l.spec.WindowAt(l.now)
		if err != nil {
			return fmt.Errorf("limit of %q: %w: %v", q.Key, persist.ErrCorrupt, err)
		}
		cur := UsageWindow{Start: cs, End: ce, Current: true}
		rk := append(append([]byte{tagUsage}, l.base...), key...)
		st, err := tx.State(rk)
		if err != nil {
			return err
		}
		fromRec := false
		if st.Found && st.Expiry > l.now {
			r, err := decodeUsageRec(st.Data)
			if err != nil {
				return fmt.Errorf("usage record of %q: %w: %v", q.Key, persist.ErrCorrupt, err)
			}
			w := UsageWindow{Start: r.start, End: r.end, Used: r.used, Refused: r.refused}
			if r.start == cs {
				cur.Refused, fromRec = r.refused, history > 0
				cur.Used = r.used
			} else if history > 0 {
				keep(w)
			}
		}
		if !fromRec {
			// No use recorded (no history option): the current window's
			// use is the key's state, as the listing reads it.
			if l.plan != nil {
				l.q.Plan = out.Plan
			}
			ss, err := tx.State(append(append([]byte(nil), l.base...), key...))
			if err != nil {
				return err
			}
			if ss.Found {
				u, ok, err := l.usage(key, ss.Data)
				if err != nil {
					return err
				}
				if ok {
					cur.Used = u.Used
				}
			}
		}
		keep(cur)
		if len(ws) > q.Max {
			ws = ws[len(ws)-q.Max:]
		}
		out.Windows = ws
		return nil
	})
	return out, err
}

// keyPlanLimit resolves key's plan at the transaction and its limit called
// name (empty: the plan's one limit), setting the lister's base and spec.
func (l *lister) keyPlanLimit(key []byte, name string) (string, *PlanLimit, *Error) {
	c := emptyPlanConfig()
	if err := l.tx.ForEachPolicy(func(n string, enc []byte) error {
		_, err := c.loadEntry(n, enc)
		return err
	}); err != nil {
		return "", nil, &Error{Code: CodeInternal, Message: err.Error()}
	}
	c.index()
	plan := ""
	st, err := l.tx.State(append([]byte{tagAssignment}, key...))
	switch {
	case err != nil:
		return "", nil, &Error{Code: CodeInternal, Message: err.Error()}
	case st.Found:
		plan = string(st.Data)
	default:
		if _, p, ok := c.rule(key); ok {
			plan = p
		} else {
			plan = c.def
		}
	}
	p, ok := c.plans[plan]
	if !ok {
		return "", nil, &Error{Code: CodeNotFound, Field: "key", Message: fmt.Sprintf("key %q has no plan (no policy named either)", key)}
	}
	var pl *PlanLimit
	switch {
	case name != "":
		if pl, ok = p.Limit(name); !ok {
			return "", nil, &Error{Code: CodeNotFound, Field: "limit", Message: fmt.Sprintf("plan %q has no limit %q (it has %s)", p.Name, name, limitNames(p))}
		}
	case len(p.Limits) == 1:
		pl = &p.Limits[0]
	default:
		return "", nil, &Error{Code: CodeInvalidArgument, Field: "limit", Message: fmt.Sprintf("required: key %q's plan %q has several limits (%s)", key, p.Name, limitNames(p))}
	}
	recs, err := l.tx.StateReader()
	if err != nil {
		return "", nil, &Error{Code: CodeInternal, Message: err.Error()}
	}
	l.plan, l.limit, l.spec, l.recs = c, pl.Name, pl.Spec, recs
	l.base = appendLimitPrefix(nil, tagPlanLimit, pl.Name)
	return p.Name, pl, nil
}

// ExportUsage streams every key's usage in the closed window holding
// q.Window of a policy or plan limit with a history option: header once,
// then row per key that used or was refused anything in it. Memory is one
// row; time is the limit's usage rows. A plan's keys are those whose plan
// is the plan at the read's index. Errors as ListKeys's, and
// invalid_argument naming window (not closed) or history (none kept).
func (f *FSM) ExportUsage(q ExportQuery, header func(ExportHeader) error, row func(ExportRow) error) error {
	return f.store.View(func(tx *persist.Tx) error {
		m := tx.Meta()
		l := lister{q: KeysQuery{Policy: q.Policy, Plan: q.Plan, PlanLimit: q.PlanLimit}, now: m.LastTime, tx: tx}
		if err := l.resolve(); err != nil {
			return err
		}
		var history time.Duration
		if q.Policy != "" {
			enc, _ := tx.Policy(q.Policy)
			d := decoder{b: enc}
			p, _ := decodePolicy(&d)
			history = p.Options.History
		} else if pl, ok := l.plan.plans[q.Plan].Limit(l.limit); ok {
			history = pl.Options.History
		}
		field := "policy"
		if q.Plan != "" {
			field = "plan_limit"
		}
		if history <= 0 {
			return &Error{Code: CodeInvalidArgument, Field: field, Message: "the limit keeps no history (set \"history\" on it)"}
		}
		start, end, err := l.spec.WindowAt(max(q.Window, 0))
		if err != nil {
			return fmt.Errorf("limit: %w: %v", persist.ErrCorrupt, err)
		}
		if end > l.now {
			return &Error{Code: CodeInvalidArgument, Field: "window", Message: fmt.Sprintf("the window %s to %s is not closed yet (the node's applied time is %s)", fmtTime(start), fmtTime(end), fmtTime(l.now))}
		}
		if err := header(ExportHeader{Start: start, End: end, AppliedIndex: m.AppliedIndex}); err != nil {
			return err
		}
		emit := func(key []byte, r usageRec) error {
			if l.plan != nil {
				if _, mine, err := l.planSpec(key); err != nil || !mine {
					return err
				}
			}
			return row(ExportRow{Key: string(key), Used: r.used, Refused: r.refused})
		}
		be := binary.BigEndian.AppendUint64(nil, uint64(start))
		wp := append([]byte{tagUsageWindow}, l.base...)
		if err := tx.ScanStates(wp, nil, func(k []byte, st persist.State) (bool, error) {
			rest := k[len(wp):]
			if len(rest) < 8 || !bytes.Equal(rest[len(rest)-8:], be) {
				return true, nil
			}
			r, err := decodeUsageRec(st.Data)
			if err != nil {
				return false, fmt.Errorf("usage window of %q: %w: %v", rest[:len(rest)-8], persist.ErrCorrupt, err)
			}
			return true, emit(rest[:len(rest)-8], r)
		}); err != nil {
			return err
		}
		up := append([]byte{tagUsage}, l.base...)
		return tx.ScanStates(up, nil, func(k []byte, st persist.State) (bool, error) {
			r, err := decodeUsageRec(st.Data)
			if err != nil {
				return false, fmt.Errorf("usage record of %q: %w: %v", k[len(up):], persist.ErrCorrupt, err)
			}
			if r.start != start {
				return true, nil
			}
			return true, emit(k[len(up):], r)
		})
	})
}

func fmtTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }
