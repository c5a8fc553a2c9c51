package persist

import (
	"errors"
	"slices"
	"testing"
)

func scanKeys(t *testing.T, s *Store, prefix, after string, max int) (keys []string, applied uint64) {
	t.Helper()
	var a []byte
	if after != "" {
		a = []byte(after)
	}
	err := s.View(func(tx *Tx) error {
		applied = tx.Meta().AppliedIndex
		return tx.ScanStates([]byte(prefix), a, func(k []byte, st State) (bool, error) {
			if string(st.Data) != "state:"+string(k) {
				t.Errorf("key %q: data %q", k, st.Data)
			}
			keys = append(keys, string(k))
			return len(keys) < max, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, applied
}

func TestScanStatesOrderPrefixAfter(t *testing.T) {
	s, _ := openTemp(t, Options{})
	putStates(t, s, 7, 1000, "b:2", "a:1", "b:1", "b:10", "c:1", "b")
	cases := []struct {
		prefix, after string
		max           int
		want          []string
	}{
		{"", "", 100, []string{"a:1", "b", "b:1", "b:10", "b:2", "c:1"}},
		{"b:", "", 100, []string{"b:1", "b:10", "b:2"}},
		{"b:", "b:1", 100, []string{"b:10", "b:2"}},        // strictly after
		{"b:", "b:0", 100, []string{"b:1", "b:10", "b:2"}}, // an absent cursor key
		{"b:", "a", 100, []string{"b:1", "b:10", "b:2"}},   // before the prefix
		{"b:", "c", 100, nil},                              // past the prefix
		{"b:", "b:2", 100, nil},
		{"", "", 2, []string{"a:1", "b"}},
		{"z", "", 100, nil},
	}
	for _, c := range cases {
		got, applied := scanKeys(t, s, c.prefix, c.after, c.max)
		if !slices.Equal(got, c.want) || applied != 7 {
			t.Errorf("prefix %q after %q max %d: %q at %d, want %q at 7", c.prefix, c.after, c.max, got, applied, c.want)
		}
	}
}

func TestScanStatesPagesWithoutSkipOrRepeat(t *testing.T) {
	s, _ := openTemp(t, Options{CommitEvery: 4, NoSync: true, Background: true})
	var all []string
	for i := range 50 {
		all = append(all, string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	putStates(t, s, 1, 1000, all...)
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	after := ""
	for n := uint64(2); ; n++ {
		page, _ := scanKeys(t, s, "", after, 7)
		if len(page) == 0 {
			break
		}
		seen = append(seen, page...)
		after = page[len(page)-1]
		putStates(t, s, n, 1000, "new"+after) // writes between pages
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(all)
	var old []string
	for _, k := range seen {
		if len(k) == 2 {
			old = append(old, k)
		}
	}
	if !slices.Equal(old, all) {
		t.Fatalf("pages returned %q, want every key once: %q", old, all)
	}
}

func TestScanStatesRefusesTheWriter(t *testing.T) {
	s, _ := openTemp(t, Options{})
	err := s.Update(func(tx *Tx) error {
		return tx.ScanStates(nil, nil, func([]byte, State) (bool, error) { return true, nil })
	})
	if !errors.Is(err, errWriterScan) {
		t.Fatalf("ScanStates in Update: %v, want errWriterScan", err)
	}
}
