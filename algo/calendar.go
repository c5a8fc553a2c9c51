package algo

import (
	"fmt"
	"sync"
	"time"

	// Embedded zone database: a node without system tzdata still knows every
	// zone. (time.LoadLocation prefers the system database when present, so
	// nodes should run the same OS tzdata release; see docs/CLUSTER.md, "Time".)
	_ "time/tzdata"
)

// locations caches *time.Location by name: Decide runs for every request and
// LoadLocation parses a zone file each time. Only successes are cached, so
// garbage names cannot grow the cache.
var locations sync.Map // string → *time.Location

func location(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	// "Local" depends on the node's configuration: replicas would disagree.
	if name == "Local" {
		return nil, fmt.Errorf("%q is not allowed (it differs between nodes); use an IANA name such as Europe/Paris", name)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as Europe/Paris)", name)
	}
	locations.Store(name, l)
	return l, nil
}

// windowAt returns the fixed window [start, end) holding t ≥ 0: a multiple
// of Window since the epoch, or the local calendar day, week (from Monday) or
// month.
func (s *Spec) windowAt(t int64) (start, end int64, err error) {
	if s.Calendar == CalendarNone {
		w := int64(s.Window)
		start = t - t%w
		return start, start + w, nil
	}
	loc, err := location(s.Timezone)
	if err != nil {
		return 0, 0, fmt.Errorf("algo: %w", err)
	}
	y, m, d := time.Unix(0, t).In(loc).Date()
	// periodStart(k) is the start of the k-th period after the one holding the
	// local date y-m-d. Periods tile: the end of one is the start of the next.
	periodStart := func(k int) int64 {
		switch s.Calendar {
		case CalendarDay:
			return dayStart(y, m, d+k, loc)
		case CalendarWeek:
			wd := (int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday()) + 6) % 7 // Monday = 0
			return dayStart(y, m, d-wd+7*k, loc)
		default:
			return dayStart(y, m+time.Month(k), 1, loc)
		}
	}
	// Guards against a period of length zero (a day a zone skipped).
	k := 0
	start, end = periodStart(0), periodStart(1)
	for t >= end {
		k++
		start, end = end, periodStart(k+1)
	}
	for t < start {
		k--
		start, end = periodStart(k), start
	}
	return start, end, nil
}

// dayStart returns the first instant of the local date y-m-d (normalized as
// time.Date does): the earliest instant whose local date is y-m-d or later.
// That is local midnight, except
//   - where a jump forward skips midnight: the instant of the jump (time.Date
//     may answer with the offset after the jump, an instant that still belongs
//     to the day before);
//   - where a jump back repeats midnight (Asia/Amman 2021-10-29, 01:00 → 00:00):
//     the first of the two midnights (time.Date answers the second, which
//     would count the day's first hour in the day before);
//   - where the zone skipped the whole date (Pacific/Apia 2011-12-30): the
//     start of the next date that exists, so that date's period is empty.
//
// Local dates are not monotonic in time where a jump back crosses midnight,
// so the answer is the minimum over the offset periods near the date: in a
// period [s, e) with offset o, the wall clock t+o reaches midnight w first at
// max(s, w−o).
func dayStart(y int, m time.Month, d int, loc *time.Location) int64 {
	w := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // midnight as wall-clock seconds
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	_, off := t.Zone()
	// Fast path: t is that midnight and its offset has held for longer than
	// any offset can shift a wall clock, so no earlier instant reaches w.
	if s, _ := t.ZoneBounds(); t.Unix()+int64(off) == w && (s.IsZero() || s.Unix() <= t.Unix()-maxZoneShift) {
		return t.UnixNano()
	}
	// Walk the offset periods forward from well before midnight anywhere; the
	// first period whose wall clock reaches w holds the earliest instant.
	a := time.Unix(w-maxZoneShift, 0).In(loc)
	for {
		_, o := a.Zone()
		_, e := a.ZoneBounds()
		c := max(a.Unix(), w-int64(o))
		if e.IsZero() || c < e.Unix() {
			return c * int64(time.Second)
		}
		a = e
	}
}

// maxZoneShift (seconds) exceeds the largest UTC offset in the tz database
// (about ±15 h, including local mean times) plus one jump.
const maxZoneShift = 2 * 24 * 3600
