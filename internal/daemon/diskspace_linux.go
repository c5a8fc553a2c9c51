package daemon

import "syscall"

// diskSpace is the space available to this process in dir's file system
// (freeBytes) and the file system's size.
func diskSpace(dir string) (free, total uint64, ok bool) {
	free, ok = freeBytes(dir)
	var st syscall.Statfs_t
	if !ok || syscall.Statfs(dir, &st) != nil {
		return 0, 0, false
	}
	return free, st.Blocks * uint64(st.Bsize), true
}
