package persist

import (
	"fmt"
	"testing"
)

func update(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func put(tx *Tx, key string, expiry int64) error {
	prev, err := tx.State([]byte(key))
	if err != nil {
		return err
	}
	return tx.PutState([]byte(key), prev, []byte("v"), expiry)
}

func expire(t *testing.T, s *Store, now int64, max int) int {
	t.Helper()
	var n int
	update(t, s, func(tx *Tx) error {
		var err error
		n, err = tx.Expire(now, max)
		return err
	})
	return n
}

func TestExpireRemovesOnlyDueEntries(t *testing.T) {
	s, _ := openTemp(t, Options{})
	update(t, s, func(tx *Tx) error {
		for i, exp := range []int64{10, 20, 30} {
			if err := put(tx, fmt.Sprintf("k%d", i), exp); err != nil {
				return err
			}
		}
		return tx.PutRequest([]byte("r1"), Request{}, []byte("res"), 15)
	})
	if next, ok := s.NextExpiry(); !ok || next != 10 {
		t.Fatalf("NextExpiry = %d %v, want 10", next, ok)
	}
	for _, tc := range []struct {
		now          int64
		wantRemoved  int
		wantKeys     uint64
		wantRequests uint64
		wantNext     int64
	}{
		{now: 9, wantRemoved: 0, wantKeys: 3, wantRequests: 1, wantNext: 10},
		{now: 10, wantRemoved: 1, wantKeys: 2, wantRequests: 1, wantNext: 15}, // expiry == now is due
		{now: 25, wantRemoved: 2, wantKeys: 1, wantRequests: 0, wantNext: 30},
	} {
		if got := expire(t, s, tc.now, 100); got != tc.wantRemoved {
			t.Fatalf("now %d: removed %d, want %d", tc.now, got, tc.wantRemoved)
		}
		m := s.Meta()
		next, _ := s.NextExpiry()
		if m.Keys != tc.wantKeys || m.RequestIDs != tc.wantRequests || next != tc.wantNext {
			t.Fatalf("now %d: keys %d requests %d next %d", tc.now, m.Keys, m.RequestIDs, next)
		}
	}
	if readState(t, s, "k2").Expiry != 30 {
		t.Fatal("the entry not yet due was lost")
	}
}

func TestExpireIsBounded(t *testing.T) {
	s, _ := openTemp(t, Options{})
	update(t, s, func(tx *Tx) error {
		for i := 0; i < 25; i++ {
			if err := put(tx, fmt.Sprintf("k%02d", i), int64(i)); err != nil {
				return err
			}
		}
		return nil
	})
	for _, want := range []int{10, 10, 5, 0} {
		if got := expire(t, s, 1000, 10); got != want {
			t.Fatalf("removed %d, want %d", got, want)
		}
	}
	if _, ok := s.NextExpiry(); ok || s.Meta().Keys != 0 {
		t.Fatalf("after draining: keys %d", s.Meta().Keys)
	}
}

func TestExpiryIndexFollowsTheKey(t *testing.T) {
	// A key whose expiry moves later keeps its early index entry (a lower
	// bound); Expire at that time re-files it instead of deleting an active
	// key. A key whose expiry moves earlier is re-filed at once.
	s, _ := openTemp(t, Options{})
	update(t, s, func(tx *Tx) error { return put(tx, "later", 100) })
	update(t, s, func(tx *Tx) error { return put(tx, "later", 300) })
	if next, _ := s.NextExpiry(); next != 100 {
		t.Fatalf("NextExpiry = %d, want the lower bound 100", next)
	}
	if got := expire(t, s, 150, 10); got != 0 {
		t.Fatalf("an active key was removed (%d)", got)
	}
	if st := readState(t, s, "later"); !st.Found || st.Expiry != 300 {
		t.Fatalf("state after re-filing = %+v", st)
	}
	if next, _ := s.NextExpiry(); next != 300 {
		t.Fatalf("NextExpiry after re-filing = %d, want 300", next)
	}

	update(t, s, func(tx *Tx) error { return put(tx, "sooner", 500) })
	update(t, s, func(tx *Tx) error { return put(tx, "sooner", 200) })
	if next, _ := s.NextExpiry(); next != 200 {
		t.Fatalf("NextExpiry = %d, want 200 after the expiry moved earlier", next)
	}
	if got := expire(t, s, 299, 10); got != 1 || readState(t, s, "sooner").Found {
		t.Fatal("the key whose expiry moved earlier was not removed on time")
	}
	if got := expire(t, s, 300, 10); got != 1 || s.Meta().Keys != 0 {
		t.Fatal("the re-filed key was not removed at its expiry")
	}
	// No orphan index entries remain.
	if _, ok := s.NextExpiry(); ok {
		t.Fatal("index entries left behind")
	}
}

func TestDeleteStateAndRequestRewrite(t *testing.T) {
	s, _ := openTemp(t, Options{})
	update(t, s, func(tx *Tx) error {
		if err := put(tx, "a", 100); err != nil {
			return err
		}
		return tx.PutRequest([]byte("r"), Request{}, []byte("one"), 50)
	})
	update(t, s, func(tx *Tx) error {
		st, err := tx.State([]byte("a"))
		if err != nil {
			return err
		}
		if err := tx.DeleteState([]byte("a"), st); err != nil {
			return err
		}
		prev, err := tx.Request([]byte("r"))
		if err != nil {
			return err
		}
		return tx.PutRequest([]byte("r"), prev, []byte("two"), 80)
	})
	m := s.Meta()
	if m.Keys != 0 || m.RequestIDs != 1 {
		t.Fatalf("meta = %+v", m)
	}
	if next, _ := s.NextExpiry(); next != 80 {
		t.Fatalf("NextExpiry = %d: the deleted state or the old request entry is still indexed", next)
	}
	var got string
	if err := s.View(func(tx *Tx) error {
		r, err := tx.Request([]byte("r"))
		got = string(r.Result)
		return err
	}); err != nil || got != "two" {
		t.Fatalf("request = %q, %v", got, err)
	}
}
