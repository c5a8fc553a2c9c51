//go:build unix

package daemon

import "syscall"

// restrictUmask makes every file and directory the process creates from now
// on private to its user (see privateDataDir).
func restrictUmask() { syscall.Umask(0o077) }
