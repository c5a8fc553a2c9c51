package algo

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Zones with DST at 02:00 (New York), 02:00/03:00 (Paris), half-hour DST
// (Lord Howe), DST at midnight so that some days have no 00:00 (Santiago),
// a +05:45 offset (Kathmandu), and a zone that skipped a whole day
// (Apia, 2011-12-30).
var testZones = []string{"", "America/New_York", "Europe/Paris", "Australia/Lord_Howe",
	"America/Santiago", "Asia/Kathmandu", "Pacific/Apia"}

func TestCalendarWindowsTile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := Spec{
			Algorithm: FixedWindow,
			Limit:     1,
			Calendar:  rapid.SampledFrom([]Calendar{CalendarDay, CalendarWeek, CalendarMonth}).Draw(t, "calendar"),
			Timezone:  rapid.SampledFrom(testZones).Draw(t, "zone"),
		}
		loc, err := location(s.Timezone)
		if err != nil {
			t.Fatal(err)
		}
		// 1970 to 2100, or within two hours of a change of UTC offset, where
		// days are 23 or 25 hours long or begin after a skipped midnight.
		at := rapid.Int64Range(0, 4_102_444_800*sec).Draw(t, "t")
		if rapid.Bool().Draw(t, "near offset change") {
			_, change := time.Unix(0, at).In(loc).ZoneBounds()
			if !change.IsZero() {
				at = max(0, change.UnixNano()+rapid.Int64Range(-2*3600*sec, 2*3600*sec).Draw(t, "offset"))
			}
		}
		start, end, err := s.windowAt(at)
		if err != nil {
			t.Fatal(err)
		}
		if !(start <= at && at < end) {
			t.Fatalf("window [%d, %d) does not hold %d", start, end, at)
		}
		// Windows tile: the neighbours meet this one exactly.
		if s2, e2, _ := s.windowAt(start); s2 != start || e2 != end {
			t.Fatalf("window at its own start is [%d, %d), want [%d, %d)", s2, e2, start, end)
		}
		if s2, _, _ := s.windowAt(end); s2 != end {
			t.Fatalf("next window starts at %d, want %d", s2, end)
		}
		if start > 0 {
			if _, e2, _ := s.windowAt(start - 1); e2 != start {
				t.Fatalf("previous window ends at %d, want %d", e2, start)
			}
		}
		// The window starts at the first instant of a local day...
		local := func(ns int64) time.Time { return time.Unix(0, ns).In(loc) }
		first, before := local(start), local(start-1)
		if first.YearDay() == before.YearDay() && first.Year() == before.Year() {
			t.Fatalf("window starts at %v, not at the start of a local day (1 ns before is %v)", first, before)
		}
		// ...which is the local day, Monday or first of the month holding t.
		tl := local(at)
		days := int(tl.Sub(first).Hours() / 24)
		switch s.Calendar {
		case CalendarDay:
			if first.YearDay() != tl.YearDay() {
				t.Fatalf("day window for %v starts on %v", tl, first)
			}
		case CalendarWeek:
			if first.Weekday() != time.Monday || days > 7 {
				t.Fatalf("week window for %v starts on %v", tl, first)
			}
		case CalendarMonth:
			if first.Day() != 1 || first.Month() != tl.Month() {
				t.Fatalf("month window for %v starts on %v", tl, first)
			}
		}
	})
}

func TestCalendarDST(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	paris, _ := time.LoadLocation("Europe/Paris")
	santiago, _ := time.LoadLocation("America/Santiago")
	tests := []struct {
		name       string
		cal        Calendar
		zone       string
		at         time.Time
		start, end time.Time
	}{
		{"23-hour day", CalendarDay, "America/New_York", time.Date(2024, 3, 10, 12, 0, 0, 0, ny),
			time.Date(2024, 3, 10, 0, 0, 0, 0, ny), time.Date(2024, 3, 11, 0, 0, 0, 0, ny)},
		{"25-hour day", CalendarDay, "America/New_York", time.Date(2024, 11, 3, 1, 30, 0, 0, ny),
			time.Date(2024, 11, 3, 0, 0, 0, 0, ny), time.Date(2024, 11, 4, 0, 0, 0, 0, ny)},
		{"week starts Monday", CalendarWeek, "Europe/Paris", time.Date(2024, 3, 31, 23, 59, 0, 0, paris),
			time.Date(2024, 3, 25, 0, 0, 0, 0, paris), time.Date(2024, 4, 1, 0, 0, 0, 0, paris)},
		{"month across DST", CalendarMonth, "Europe/Paris", time.Date(2024, 3, 15, 0, 0, 0, 0, paris),
			time.Date(2024, 3, 1, 0, 0, 0, 0, paris), time.Date(2024, 4, 1, 0, 0, 0, 0, paris)},
		{"month in UTC", CalendarMonth, "", time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC),
			time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)},
		// 2024-09-08 00:00 does not exist in Santiago: the day starts at 01:00 -03.
		{"day without midnight", CalendarDay, "America/Santiago", time.Date(2024, 9, 8, 12, 0, 0, 0, santiago),
			time.Date(2024, 9, 8, 4, 0, 0, 0, time.UTC), time.Date(2024, 9, 9, 0, 0, 0, 0, santiago)},
		// Amman fell back from 01:00 (+03) to 00:00 (+02) on 2021-10-29: the
		// day starts at the first midnight, 21:00 UTC, and its first hour
		// (00:30 +03 here) is not counted in the day before.
		{"repeated midnight", CalendarDay, "Asia/Amman", time.Date(2021, 10, 28, 21, 30, 0, 0, time.UTC),
			time.Date(2021, 10, 28, 21, 0, 0, 0, time.UTC), time.Date(2021, 10, 29, 22, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSpec(t, Config{Algorithm: "fixed_window", Limit: 2, Calendar: tt.cal.String(), Timezone: tt.zone})
			now := tt.at.UnixNano()
			start, end, err := s.windowAt(now)
			if err != nil {
				t.Fatal(err)
			}
			if start != tt.start.UnixNano() || end != tt.end.UnixNano() {
				t.Fatalf("window [%v, %v), want [%v, %v)", time.Unix(0, start), time.Unix(0, end), tt.start, tt.end)
			}
			// Through Decide: the quota resets exactly at the local boundary.
			runSteps(t, s, []step{
				{now, 2, Decision{Allowed: true, ResetAfter: time.Duration(end - now)}},
				{end - 1, 1, Decision{RetryAfter: 1, ResetAfter: 1}},
				{end, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: time.Duration(mustEnd(t, s, end) - end)}},
			})
		})
	}
}

func mustEnd(t *testing.T, s Spec, at int64) int64 {
	_, end, err := s.windowAt(at)
	if err != nil {
		t.Fatal(err)
	}
	return end
}
