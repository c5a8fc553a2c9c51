package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The data directory is private after a start: the directory and every
// directory below it 0700, every file 0600 (raft-wal made its directory 0755
// and its segments 0644), and a data directory left wider by an older
// version or by hand is tightened, with a log line saying so.
func TestProcessDataDirIsPrivate(t *testing.T) {
	p := newProc(t, "priv", "")
	if err := os.Chmod(p.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(p.DataDir, "left-by-an-older-version")
	if err := os.WriteFile(old, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start()
	p.waitReady()
	p.check(`{"key":"k","limit":{"algorithm":"fixed_window","limit":5,"window":"1h"}}`)
	if err := p.term(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	n := 0
	err := filepath.WalkDir(p.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else if !d.Type().IsRegular() {
			return nil
		}
		n++
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("only %d entries under the data directory: the node wrote less than expected", n)
	}
	if !strings.Contains(p.Logs(), "data directory was readable by others") {
		t.Errorf("no log line about tightening the data directory; logs:\n%s", p.Logs())
	}
}
