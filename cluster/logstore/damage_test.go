package logstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// 64 damaged bytes in the middle of a raft-wal segment: opening the log
// names the segment file, the entry and the recovery step.
func TestDamagedWALNamesFileIndexAndRecovery(t *testing.T) {
	dir := t.TempDir()
	raw, path, err := Open(dir, WAL, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	s := &Guarded{Store: raw, Failed: func(err error) { t.Errorf("store failed: %v", err) }}
	var logs []*raft.Log
	for i := uint64(1); i <= 200; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 100)})
	}
	for i := 0; i < len(logs); i += 10 { // one commit frame per batch, as Raft appends
		if err := s.StoreLogs(logs[i : i+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkEnd(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(path, "*.wal"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	f, err := os.OpenFile(segs[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Entries take ~120 bytes each: offset 12,000 is around entry 100.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), 12000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	reopened, _, err := Open(dir, WAL, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	// raft-wal drops every frame after the damaged one, without an error.
	if last, _ := reopened.LastIndex(); last >= 200 {
		t.Fatalf("damage not reproduced: last index %d", last)
	}
	err = errors.Join(CheckEnd(reopened, path), CheckReadable(reopened, path))
	t.Logf("error: %v", err)
	if err == nil {
		t.Fatal("a damaged log opened without complaint")
	}
	for _, want := range []string{filepath.Base(segs[0]), "entry ", "--join", "Replacing a broken node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A leader replacing entries this node already applied means its history
// diverged: the store refuses and reports it once; replacing entries above
// the applied index (uncommitted ones) and dropping the whole log for a
// snapshot are normal.
func TestSuffixBelowAppliedIsDivergedHistory(t *testing.T) {
	raw := raft.NewInmemStore()
	var diverged []error
	g := &Guarded{Store: struct {
		*raft.InmemStore
		nopCloser
	}{raw, nopCloser{}}, Failed: func(err error) { t.Errorf("store failed: %v", err) },
		Applied: func() uint64 { return 50 }, Diverged: func(err error) { diverged = append(diverged, err) }}
	var logs []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1})
	}
	if err := g.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteRange(1, 10); err != nil { // compaction
		t.Fatal(err)
	}
	if err := g.DeleteRange(60, 100); err != nil || len(diverged) != 0 {
		t.Fatalf("replacing uncommitted entries 60..100: %v %v", err, diverged)
	}
	if end, _ := g.GetUint64(keyLogEnd); end != 59 {
		t.Errorf("log end after truncation to 59: %d", end)
	}
	err := g.DeleteRange(40, 59)
	if err == nil || len(diverged) != 1 || !strings.Contains(err.Error(), "history diverged") || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("replacing applied entries 40..59: %v, reported %v", err, diverged)
	}
	if last, _ := raw.LastIndex(); last != 59 {
		t.Errorf("applied entries were deleted: last index %d", last)
	}
	if err := g.DeleteRange(11, 59); err != nil || len(diverged) != 1 {
		t.Fatalf("dropping the whole log for a snapshot: %v %v", err, diverged)
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
