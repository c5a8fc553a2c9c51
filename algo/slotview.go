package algo

// HeldSlot is one slot held on a concurrency key: its id, when it was
// acquired and when its hold ends (Unix ns).
type HeldSlot struct {
	ID            string
	Acquired, End int64
}

// HeldSlotsAt returns the slots held at now with their hold's end, in
// acquisition order, at most max of them (max <= 0: all), and how many
// were held in all. Read-only: the state is not rewritten, so a read
// answers exactly what the next check at now would see held.
func HeldSlotsAt(s *Spec, state []byte, now int64, max int) ([]HeldSlot, int, error) {
	st, te, err := concurrencyState(s, state, now)
	if err != nil {
		return nil, 0, err
	}
	st.prune(s, te)
	n := len(st.held)
	if max > 0 && n > max {
		n = max
	}
	out := make([]HeldSlot, n)
	for i := range out {
		h := st.held[i]
		out[i] = HeldSlot{ID: string(h.id), Acquired: h.acquired, End: h.end}
	}
	return out, len(st.held), nil
}
