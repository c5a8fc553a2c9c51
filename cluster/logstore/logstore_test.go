package logstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestLogStoreKind(t *testing.T) {
	cases := []struct {
		name    string
		files   []string // created in the data dir first
		want    string   // Config.LogStore
		kind    string
		errWith string
	}{
		{name: "new dir, default", kind: WAL},
		{name: "new dir, boltdb", want: BoltDB, kind: BoltDB},
		{name: "existing boltdb, default", files: []string{boltFileName}, kind: BoltDB},
		{name: "existing wal, default", files: []string{walDirName + "/"}, kind: WAL},
		{name: "existing boltdb, wal asked", files: []string{boltFileName}, want: WAL, errWith: "created with --log-store=boltdb"},
		{name: "existing wal, boltdb asked", files: []string{walDirName + "/"}, want: BoltDB, errWith: "created with --log-store=wal"},
		{name: "both", files: []string{boltFileName, walDirName + "/"}, errWith: "holds both"},
		{name: "unknown", want: "rocksdb", errWith: `log store "rocksdb"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(dir, f)
				var err error
				if strings.HasSuffix(f, "/") {
					err = os.Mkdir(p, 0o755)
				} else {
					err = os.WriteFile(p, nil, 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			kind, err := Kind(dir, tc.want)
			if tc.errWith != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWith) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errWith)
				}
				return
			}
			if err != nil || kind != tc.kind {
				t.Fatalf("kind %q err %v, want %q", kind, err, tc.kind)
			}
		})
	}
}

// Both stores keep entries and stable values across a close and reopen in
// the same process (raft-wal's own Close leaves its meta database locked).
func TestLogStoresReopen(t *testing.T) {
	for _, kind := range []string{WAL, BoltDB} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			s, _, err := Open(dir, kind, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("a")}, {Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("b")}}
			if err := s.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, _, err = Open(dir, kind, testLogger())
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer s.Close()
			var got raft.Log
			last, _ := s.LastIndex()
			if err := s.GetLog(2, &got); err != nil || string(got.Data) != "b" || last != 2 {
				t.Fatalf("after reopen: last %d, entry 2 %q, err %v", last, got.Data, err)
			}
			if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
				t.Fatalf("stable value after reopen: %d, %v", term, err)
			}
		})
	}
}

// A log that ends before the state machine's applied index lost entries.
func TestCheckLogCoversState(t *testing.T) {
	logs := raft.NewInmemStore()
	if err := logs.StoreLogs([]*raft.Log{{Index: 1, Term: 1}, {Index: 2, Term: 1}}); err != nil {
		t.Fatal(err)
	}
	snaps := raft.NewInmemSnapshotStore()
	if err := CoversState(2, logs, snaps); err != nil {
		t.Fatalf("applied 2 with log to 2: %v", err)
	}
	if err := CoversState(3, logs, snaps); err == nil || !strings.Contains(err.Error(), "log entries were lost") {
		t.Fatalf("applied 3 with log to 2: %v", err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 5, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.Close()
	if err := CoversState(5, logs, snaps); err != nil {
		t.Fatalf("applied 5 with a snapshot at 5: %v", err)
	}
}

func testLogger() hclog.Logger { return hclog.NewNullLogger() }
