package algo

import (
	"fmt"
	"time"
)

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

// MaxHistoryWindows bounds history / window for ValidateHistory: a key
// keeps at most this many closed windows of one limit.
const MaxHistoryWindows = 1000

// ValidateHistory checks a limit's history option (how long a closed
// window's usage is kept after its end) against its spec: fixed_window and
// calendar windows only (a closed window is what history keeps), and at
// most MaxHistoryWindows windows (a calendar month counts 28 days, a week
// 7). Errors are *FieldError for "history".
func ValidateHistory(s Spec, history time.Duration) error {
	if history <= 0 || history > MaxWindow {
		return &FieldError{Field: "history", Message: "must be a positive duration of at most " + FormatWindow(MaxWindow)}
	}
	if s.Algorithm != FixedWindow {
		return &FieldError{Field: "history", Message: "only for fixed_window and calendar windows (a closed window is what history keeps), not " + s.Algorithm.String()}
	}
	w := s.Window
	switch s.Calendar {
	case CalendarDay:
		w = day
	case CalendarWeek:
		w = 7 * day
	case CalendarMonth:
		w = 28 * day
	}
	if w <= 0 || history/w > MaxHistoryWindows {
		return &FieldError{Field: "history", Message: fmt.Sprintf("keeps at most %d windows: at most %s for a window of %s", MaxHistoryWindows, FormatWindow(w*MaxHistoryWindows), FormatWindow(w))}
	}
	return nil
}
