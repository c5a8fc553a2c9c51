package fsm

import (
	"fmt"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/persist"
)

// The read side of work in flight on a key: the concurrency slots it holds
// (slots.go: in the key's state) and its open reservations (reserve.go: 'R'
// records beside the state key). One read transaction at one applied index
// and its leader time, proposing nothing, like KeyUsage; the slots and
// reservations whose hold ended by that time are not listed, as apply would
// decide them ended at it (whether or not the sweep removed them yet).

// Inflight answers a key's held slots and open reservations under a policy
// or a limit of the key's plan. Errors: *Error not_found naming policy, key
// or limit, invalid_argument naming limit; a damaged record is
// persist.ErrCorrupt (refused, never served); anything else is storage.
func (f *FSM) Inflight(q nodeapi.InflightQuery) (nodeapi.Inflight, error) {
	out := nodeapi.Inflight{Key: q.Key, Policy: q.Policy}
	if q.Max <= 0 || q.Max > nodeapi.MaxInflightItems {
		q.Max = nodeapi.MaxInflightItems
	}
	err := f.store.View(func(tx *persist.Tx) error {
		m := tx.Meta()
		out.AppliedIndex, out.Now = m.AppliedIndex, m.LastTime
		l := lister{q: KeysQuery{Policy: q.Policy}, now: m.LastTime, tx: tx}
		if q.Policy != "" {
			if err := l.resolve(); err != nil {
				return err
			}
		} else {
			name, pl, e := l.keyPlanLimit([]byte(q.Key), q.Limit)
			if e != nil {
				return e
			}
			out.Plan, out.Limit = name, pl.Name
		}
		stateKey := append(append([]byte(nil), l.base...), q.Key...)
		out.Concurrency = l.spec.Algorithm == algo.Concurrency
		if out.Concurrency {
			st, err := tx.State(stateKey)
			if err != nil {
				return err
			}
			held, n, err := algo.HeldSlotsAt(&l.spec, st.Data, l.now, q.Max)
			if err != nil {
				return fmt.Errorf("slots of %q: %w: %v", q.Key, persist.ErrCorrupt, err)
			}
			out.SlotsHeld = n
			out.Slots = make([]nodeapi.InflightSlot, len(held))
			for i, h := range held {
				out.Slots[i] = nodeapi.InflightSlot{Slot: h.ID, Acquired: h.Acquired, Expires: h.End}
			}
		}
		prefix := reservationKey(nil, stateKey, nil)
		return tx.ScanStates(prefix, nil, func(k []byte, st persist.State) (bool, error) {
			r, err := decodeReservation(st.Data)
			if err != nil {
				return false, fmt.Errorf("reservation %q of %q: %w: %v", k[len(prefix):], q.Key, persist.ErrCorrupt, err)
			}
			if r.settled >= 0 || st.Expiry <= l.now {
				return true, nil // settled, or its hold ended: nothing open
			}
			if len(out.Reservations) == q.Max {
				out.MoreReservations = true
				return false, nil
			}
			out.Reservations = append(out.Reservations, nodeapi.InflightReservation{
				Reservation: string(k[len(prefix):]), Cost: r.estimate, Expires: st.Expiry})
			return true, nil
		})
	})
	return out, err
}
