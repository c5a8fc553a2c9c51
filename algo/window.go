package algo

// WindowAt returns the window [start, end) holding t ≥ 0 under s: a
// multiple of Window since the epoch, or the local calendar day, week or
// month. For fixed_window it is exactly the window the algorithm counts
// in; for the other algorithms it is the period of the limit's length
// that alerts are counted in (one event per threshold and window).
func (s *Spec) WindowAt(t int64) (start, end int64, err error) {
	if s.Calendar == CalendarNone && s.Window <= 0 {
		return 0, 0, &FieldError{Field: "window", Message: "must be positive"}
	}
	return s.windowAt(t)
}
