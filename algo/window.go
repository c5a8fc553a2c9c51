package algo

// WindowAt is the window [start, end) holding t ≥ 0 for s: a multiple of
// Window since the epoch, or the local calendar day, week or month. It is
// the window a fixed_window state counts in, and for any other algorithm
// the epoch-aligned period of its Window: what counts per window (refusals,
// closed windows' usage, fsm/history.go) is then the same on every replica.
func (s *Spec) WindowAt(t int64) (start, end int64, err error) {
	if s.Calendar == CalendarNone && s.Window <= 0 {
		return 0, MaxTime, nil // no period: one window
	}
	return s.windowAt(t)
}
