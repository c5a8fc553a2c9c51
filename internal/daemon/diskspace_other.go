//go:build !linux

package daemon

// diskSpace is unknown here (freeBytes): the free-disk guard is off (the
// key budgets still hold).
func diskSpace(dir string) (free, total uint64, ok bool) {
	free, ok = freeBytes(dir)
	return free, 0, false
}
