package daemon

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// The data directory holds every key name clients sent, the policies, the
// Raft log (with the admin commands in it) and the node's incarnation: it is
// private to the user limitd runs as. The invariant: after start, the
// directory and everything below it is 0700 (directories) or 0600 (files),
// and whatever this process creates later is too, whichever library creates
// it (raft-wal makes its segments 0644 and its directory 0755; the umask
// below is the only lever that reaches them).
const (
	privateDirMode  fs.FileMode = 0o700
	privateFileMode fs.FileMode = 0o600
)

// privateDataDir sets the process umask to 0077, creates dir 0700 if it is
// missing, and tightens what a wider mode left readable by others (an older
// limitd, a copy, a mkdir by hand), logging each change. Called before
// anything is written to the directory.
func privateDataDir(dir string, logger *slog.Logger) error {
	restrictUmask()
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // not ours to change; what it points to may be shared
		}
		want := privateFileMode
		if d.IsDir() {
			want = privateDirMode
		} else if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&^want == 0 {
			return nil
		}
		if err := os.Chmod(path, fi.Mode().Perm()&want); err != nil {
			return fmt.Errorf("data directory: tighten %s: %w", path, err)
		}
		if path == dir {
			logger.Info("data directory was readable by others: tightened", "path", path, "was", fi.Mode().Perm().String(), "now", (fi.Mode().Perm() & want).String())
		} else {
			logger.Info("data file was readable by others: tightened", "path", path, "was", fi.Mode().Perm().String())
		}
		return nil
	})
}
