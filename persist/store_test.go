package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

func openTemp(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fsm.db")
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func putStates(t *testing.T, s *Store, applied uint64, now int64, keys ...string) {
	t.Helper()
	err := s.Update(func(tx *Tx) error {
		for _, k := range keys {
			prev, err := tx.State([]byte(k))
			if err != nil {
				return err
			}
			if err := tx.PutState([]byte(k), prev, []byte("state:"+k), now+100); err != nil {
				return err
			}
		}
		tx.SetApplied(applied)
		tx.SetLastTime(now)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readState(t *testing.T, s *Store, key string) State {
	t.Helper()
	var st State
	err := s.View(func(tx *Tx) error {
		var err error
		st, err = tx.State([]byte(key))
		st.Data = bytes.Clone(st.Data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestCloseAndReopenKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if !exists(path + ".dirty") {
		t.Fatal("no dirty marker while open")
	}
	putStates(t, s, 7, 1000, "a", "b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(path + ".dirty") {
		t.Fatal("dirty marker left after Close")
	}
	s, err = Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Recovered() {
		t.Fatal("clean reopen reported Recovered")
	}
	if m := s.Meta(); m.AppliedIndex != 7 || m.LastTime != 1000 || m.Keys != 2 {
		t.Fatalf("meta after reopen = %+v", m)
	}
	if st := readState(t, s, "b"); !st.Found || string(st.Data) != "state:b" || st.Expiry != 1100 {
		t.Fatalf("state after reopen = %+v", st)
	}
}

func TestUncleanStopIsSetAside(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, s *Store, path string) string // returns the path to reopen
	}{
		{"marker left by CloseDirty", func(t *testing.T, s *Store, path string) string {
			if err := s.CloseDirty(); err != nil {
				t.Fatal(err)
			}
			return path
		}},
		{"files copied while open", func(t *testing.T, s *Store, path string) string {
			dst := filepath.Join(t.TempDir(), "fsm.db")
			for _, suffix := range []string{"", ".dirty"} {
				b, err := os.ReadFile(path + suffix)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { _ = s.Close() })
			return dst
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fsm.db")
			s, err := Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			putStates(t, s, 9, 1000, "a")
			reopen := tc.crash(t, s, path)

			s2, err := Open(reopen, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if !s2.Recovered() {
				t.Fatal("reopen after unclean stop not Recovered")
			}
			if m := s2.Meta(); m != (Meta{}) {
				t.Fatalf("recovered store not empty: %+v", m)
			}
			if readState(t, s2, "a").Found {
				t.Fatal("recovered store kept state from the untrusted file")
			}
			if !exists(reopen + ".unclean") {
				t.Fatal("untrusted file not kept as .unclean")
			}
		})
	}
}

func TestOpenRefusesBadFile(t *testing.T) {
	// A valid bbolt file without our buckets.
	foreign := func(t *testing.T, path string) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err }); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	// A store of another schema version.
	future := func(t *testing.T, path string) {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		db := s.db
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte{99})
		}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	// A file of the unreleased layout without checksums: its schema
	// record is a bare version, 1.
	unchecksummed := func(t *testing.T, path string) {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte{1})
		}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	// A good store whose meta pages are overwritten.
	smashed := func(t *testing.T, path string) {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		putStates(t, s, 1, 1, "a")
		s.Close()
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xAB}, 8192), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string)
		error string
	}{
		{"garbage", func(t *testing.T, path string) {
			os.WriteFile(path, bytes.Repeat([]byte("not a database "), 2000), 0o600)
		}, "invalid database"},
		{"too small", func(t *testing.T, path string) { os.WriteFile(path, []byte("x"), 0o600) }, "open fsm database"},
		{"meta pages smashed", smashed, "open fsm database"},
		{"foreign bbolt file", foreign, "not a limitd state machine file"},
		{"future schema", future, "schema version 99"},
		{"schema without checksums", unchecksummed, "schema version 1 without a checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fsm.db")
			tc.make(t, path)
			before, _ := os.ReadFile(path)
			// Twice: a refused file must stay refused, not be set aside as
			// unclean on the second attempt.
			for i := 0; i < 2; i++ {
				s, err := Open(path, Options{})
				if err == nil {
					s.Close()
					t.Fatalf("attempt %d: Open accepted a bad file", i)
				}
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("attempt %d: error %q should name %s and say %q", i, err, path, tc.error)
				}
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Fatal("Open modified the refused file")
			}
			if exists(path+".dirty") || exists(path+".unclean") {
				t.Fatal("refused open left a marker or moved the file")
			}
		})
	}
}

func TestSecondOpenIsLockedOut(t *testing.T) {
	s, path := openTemp(t, Options{})
	putStates(t, s, 1, 1, "a")
	_, err := Open(path, Options{})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v, want an in-use error", err)
	}
	// The live store is untouched: not set aside, marker still there.
	if exists(path+".unclean") || !exists(path+".dirty") || !readState(t, s, "a").Found {
		t.Fatal("second Open disturbed the open store")
	}
}

func TestUpdateErrorRollsBack(t *testing.T) {
	s, _ := openTemp(t, Options{})
	putStates(t, s, 1, 10, "a")
	d0, _ := s.Digest()
	boom := errors.New("boom")
	err := s.Update(func(tx *Tx) error {
		prev, _ := tx.State([]byte("b"))
		if err := tx.PutState([]byte("b"), prev, []byte("x"), 50); err != nil {
			return err
		}
		if err := tx.PutPolicy("p", []byte("enc")); err != nil {
			return err
		}
		tx.SetApplied(99)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v", err)
	}
	d1, _ := s.Digest()
	if d0 != d1 || s.Meta().AppliedIndex != 1 || s.Meta().Keys != 1 {
		t.Fatalf("failed Update changed the store: meta %+v", s.Meta())
	}
	// The next transaction starts from the committed meta, not the rolled-back one.
	putStates(t, s, 2, 20, "c")
	if m := s.Meta(); m.Keys != 2 || m.AppliedIndex != 2 {
		t.Fatalf("meta after rollback and commit = %+v", m)
	}
}

func TestMaxSizeFailsCommitWithoutPartialState(t *testing.T) {
	s, _ := openTemp(t, Options{MaxSize: 1 << 20})
	putStates(t, s, 1, 10, "a")
	d0, _ := s.Digest()
	big := bytes.Repeat([]byte("x"), 4<<20)
	err := s.Update(func(tx *Tx) error {
		prev, _ := tx.State([]byte("small"))
		if err := tx.PutState([]byte("small"), prev, []byte("s"), 20); err != nil {
			return err
		}
		prev, _ = tx.State([]byte("big"))
		if err := tx.PutState([]byte("big"), prev, big, 20); err != nil {
			return err
		}
		tx.SetApplied(2)
		return nil
	})
	if !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Update over MaxSize = %v", err)
	}
	d1, _ := s.Digest()
	if d0 != d1 || s.Meta().AppliedIndex != 1 || readState(t, s, "small").Found {
		t.Fatal("failed commit left partial state")
	}
}

func TestManyValuesSurviveArenaReuse(t *testing.T) {
	s, _ := openTemp(t, Options{NoSync: true})
	// Several transactions, each larger than one arena chunk, with values
	// of mixed sizes including ones that bypass the arena.
	for round := 0; round < 3; round++ {
		err := s.Update(func(tx *Tx) error {
			for i := 0; i < 3000; i++ {
				k := []byte(fmt.Sprintf("k%d-%d", round, i))
				v := bytes.Repeat([]byte{byte(i)}, i%50+(i%500/499)*20000)
				prev, err := tx.State(k)
				if err != nil {
					return err
				}
				if err := tx.PutState(k, prev, v, int64(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err := s.View(func(tx *Tx) error {
		for round := 0; round < 3; round++ {
			for i := 0; i < 3000; i++ {
				st, err := tx.State([]byte(fmt.Sprintf("k%d-%d", round, i)))
				if err != nil {
					return err
				}
				want := bytes.Repeat([]byte{byte(i)}, i%50+(i%500/499)*20000)
				if !st.Found || !bytes.Equal(st.Data, want) || st.Expiry != int64(i) {
					return fmt.Errorf("k%d-%d: got %d bytes expiry %d", round, i, len(st.Data), st.Expiry)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Meta().Keys != 9000 {
		t.Fatalf("Keys = %d", s.Meta().Keys)
	}
}

// With CommitEvery, Updates share one bbolt transaction: readers of the file
// see them only once it commits, the published meta at once; a failure rolls
// back every Update since the last commit; Snapshot and Close commit first.
func TestSharedCommit(t *testing.T) {
	s, path := openTemp(t, Options{NoSync: true, CommitEvery: 3})
	putStates(t, s, 1, 10, "a")
	putStates(t, s, 2, 20, "b")
	if m := s.Meta(); m.AppliedIndex != 2 || m.Keys != 2 || s.Pending() != 2 {
		t.Fatalf("meta %+v pending %d, want applied 2, 2 keys, 2 pending", m, s.Pending())
	}
	if readState(t, s, "a").Found {
		t.Fatal("an uncommitted Update is visible to readers of the file")
	}
	putStates(t, s, 3, 30, "c") // the third commits
	if s.Pending() != 0 || !readState(t, s, "a").Found || !readState(t, s, "c").Found {
		t.Fatalf("the CommitEvery-th Update did not commit (pending %d)", s.Pending())
	}

	putStates(t, s, 4, 40, "d")
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 0 || !readState(t, s, "d").Found {
		t.Fatal("Commit did not commit")
	}

	putStates(t, s, 5, 50, "e")
	boom := errors.New("boom")
	if err := s.Update(func(tx *Tx) error { tx.SetApplied(6); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update = %v", err)
	}
	if m := s.Meta(); m.AppliedIndex != 4 || m.Keys != 4 || s.Pending() != 0 {
		t.Fatalf("after a failed Update: meta %+v pending %d, want the last commit (applied 4, 4 keys)", m, s.Pending())
	}
	if err := s.Commit(); err != nil || readState(t, s, "e").Found {
		t.Fatalf("the Update before the failed one survived its rollback (commit: %v)", err)
	}

	putStates(t, s, 5, 50, "f")
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if sn.Meta().AppliedIndex != 5 {
		t.Fatalf("snapshot at applied %d, want 5: it must commit pending Updates first", sn.Meta().AppliedIndex)
	}
	sn.Release()

	putStates(t, s, 6, 60, "g")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path, Options{NoSync: true, CommitEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Recovered() || s2.Meta().AppliedIndex != 6 || !readState(t, s2, "g").Found {
		t.Fatalf("after Close with a pending Update: recovered %v meta %+v", s2.Recovered(), s2.Meta())
	}
}

// TestDigestCoversMeta: two stores with the same data that differ only in
// LastTime (which changes later decisions) digest differently; a different
// applied index alone does not change the digest.
func TestDigestCoversMeta(t *testing.T) {
	digestOf := func(applied uint64, now int64) (string, string) {
		s, _ := openTemp(t, Options{NoSync: true})
		putStates(t, s, applied, 1000, "a", "b")
		update(t, s, func(tx *Tx) error { tx.SetLastTime(now); return nil })
		d, err := s.Digest()
		if err != nil {
			t.Fatal(err)
		}
		dd, err := s.DataDigest()
		if err != nil {
			t.Fatal(err)
		}
		return d, dd
	}
	base, baseData := digestOf(5, 2000)
	if d, dd := digestOf(5, 2001); d == base || dd != baseData {
		t.Fatal("stores that differ only in LastTime: the digest must differ, the data digest not")
	}
	if d, _ := digestOf(9, 2000); d != base {
		t.Fatal("the applied index changed the digest")
	}
}
