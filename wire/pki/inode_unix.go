//go:build unix

package pki

import (
	"os"
	"syscall"
)

// inode identifies a file across renames: a credential replaced by a
// rename into place may keep its size and modification time.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
