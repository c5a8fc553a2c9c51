package algo

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// repeatedMidnightZones fall back across midnight (01:00 → 00:00) at least
// once between 1970 and 2040: time.Date answers the second midnight there.
var repeatedMidnightZones = []string{"Asia/Amman", "Asia/Gaza", "Asia/Hebron", "Asia/Jerusalem",
	"Antarctica/Casey", "Antarctica/Davis", "Antarctica/Vostok"}

// allZones lists every zone of the system tz database, or, where the system
// has none, of the database Go embeds. It fails rather than return nothing.
func allZones(t *testing.T) []string {
	t.Helper()
	root := "/usr/share/zoneinfo"
	var names []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if e.IsDir() {
			// posix/ and right/ repeat the database (right/ with leap seconds).
			if rel == "posix" || rel == "right" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "localtime" || rel == "posixrules" || !e.Type().IsRegular() && e.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		b := make([]byte, 4)
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		if n, _ := f.Read(b); n == 4 && string(b) == "TZif" {
			names = append(names, rel)
		}
		return nil
	})
	if err != nil || len(names) == 0 {
		goroot, gerr := exec.Command("go", "env", "GOROOT").Output()
		if gerr != nil {
			t.Fatalf("no zone list: %s: %v; go env GOROOT: %v", root, err, gerr)
		}
		zipPath := filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip")
		data, zerr := os.ReadFile(zipPath)
		if zerr != nil {
			t.Fatalf("no zone list: %s: %v; %s: %v", root, err, zipPath, zerr)
		}
		z, zerr := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if zerr != nil {
			t.Fatalf("no zone list: %s: %v", zipPath, zerr)
		}
		names = names[:0]
		for _, f := range z.File {
			if !strings.HasSuffix(f.Name, "/") {
				names = append(names, f.Name)
			}
		}
	}
	if len(names) < 300 {
		t.Fatalf("only %d zones found; the tz database has about 600", len(names))
	}
	sort.Strings(names)
	return names
}

// TestCalendarEveryZone checks day, week and month windows in every zone from
// 1970 to 2040: around every change of UTC offset and at a stride between.
// Each window must start at the first instant whose local date is the first
// date of its period (no earlier instant has that date or a later one), end
// where the next period starts, and meet its neighbours exactly.
func TestCalendarEveryZone(t *testing.T) {
	zones := allZones(t)
	if testing.Short() {
		// Every 8th zone, and always those that broke before.
		var some []string
		for i := 0; i < len(zones); i += 8 {
			some = append(some, zones[i])
		}
		zones = append(some, repeatedMidnightZones...)
	}
	from := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	stride := 61 * 24 * time.Hour
	for _, name := range zones {
		if name == "Local" {
			continue
		}
		loc, err := location(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// The offset changes of this zone, found instant → zone only.
		var changes []int64
		for at := from; ; {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(to) {
				break
			}
			changes = append(changes, end.UnixNano())
			at = end
		}
		var samples []int64
		for _, c := range changes {
			for _, d := range []int64{-1, 0, 1, 3600 * sec, -3600 * sec, 86400 * sec, -86400 * sec} {
				samples = append(samples, c+d)
			}
		}
		for at := from; at.Before(to); at = at.Add(stride) {
			samples = append(samples, at.UnixNano())
		}
		zc := zoneChecker{t: t, name: name, loc: loc, changes: changes}
		for _, cal := range []Calendar{CalendarDay, CalendarWeek, CalendarMonth} {
			s := Spec{Algorithm: FixedWindow, Limit: 1, Calendar: cal, Timezone: name}
			for _, at := range samples {
				if at < 0 || !zc.check(&s, at) {
					break
				}
			}
		}
	}
}

type zoneChecker struct {
	t       *testing.T
	name    string
	loc     *time.Location
	changes []int64 // instants where the offset changes, ascending
}

type date struct {
	y int
	m time.Month
	d int
}

func (a date) less(b date) bool {
	return a.y < b.y || a.y == b.y && (a.m < b.m || a.m == b.m && a.d < b.d)
}

func (a date) add(days int) date {
	y, m, d := time.Date(a.y, a.m, a.d+days, 0, 0, 0, 0, time.UTC).Date()
	return date{y, m, d}
}

func (zc *zoneChecker) localDate(ns int64) date {
	y, m, d := time.Unix(0, ns).In(zc.loc).Date()
	return date{y, m, d}
}

// isFirst reports whether at is the earliest instant whose local date is p or
// later. The wall clock rises between offset changes, so the latest local
// date before at is that of at−1 or of the instant before a change in the
// preceding two days.
func (zc *zoneChecker) isFirst(at int64, p date) bool {
	if zc.localDate(at).less(p) || !zc.localDate(at-1).less(p) {
		return false
	}
	i := sort.Search(len(zc.changes), func(i int) bool { return zc.changes[i] >= at })
	for j := i - 1; j >= 0 && zc.changes[j] > at-2*86400*sec; j-- {
		if !zc.localDate(zc.changes[j] - 1).less(p) {
			return false
		}
	}
	return true
}

// check verifies the window holding at; false after reporting a failure.
func (zc *zoneChecker) check(s *Spec, at int64) bool {
	t := zc.t
	start, end, err := s.windowAt(at)
	if err != nil {
		t.Errorf("%s: %v", zc.name, err)
		return false
	}
	show := func(ns int64) string { return time.Unix(0, ns).In(zc.loc).Format("2006-01-02 15:04:05 MST") }
	fail := func(msg string) bool {
		t.Errorf("%s %s window for %s is [%s, %s): %s", zc.name, s.Calendar, show(at), show(start), show(end), msg)
		return false
	}
	if !(start <= at && at < end) {
		return fail("does not hold it")
	}
	// The period: the local date of start, floored to its Monday or 1st.
	p := zc.localDate(start)
	var next date
	switch s.Calendar {
	case CalendarDay:
		next = p.add(1)
	case CalendarWeek:
		wd := (int(time.Date(p.y, p.m, p.d, 0, 0, 0, 0, time.UTC).Weekday()) + 6) % 7
		p = p.add(-wd)
		next = p.add(7)
	case CalendarMonth:
		p.d = 1
		y, m, _ := time.Date(p.y, p.m+1, 1, 0, 0, 0, 0, time.UTC).Date()
		next = date{y, m, 1}
	}
	if !zc.isFirst(start, p) {
		return fail("does not start at the first instant of its period")
	}
	if !zc.isFirst(end, next) {
		return fail("does not end at the first instant of the next period")
	}
	if s2, e2, _ := s.windowAt(end); s2 != end || e2 <= end {
		return fail("the next window starts at " + show(s2))
	}
	if s2, e2, _ := s.windowAt(start - 1); e2 != start || s2 >= start {
		return fail("the previous window ends at " + show(e2))
	}
	return true
}
