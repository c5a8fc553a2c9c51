//go:build !unix

package persist

import (
	"fmt"
	"os"
)

// lockFile only creates the file where flock is unavailable; bbolt's own file
// lock still keeps a second process out of the database itself.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	return f, nil
}

func unlockFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}
