//go:build unix

package main

import (
	"os"
	"syscall"
)

// inodeOf is the inode of the file fi describes: a certificate replaced by
// a rename (as certbot and deploy scripts do) has a new one, whatever its
// size and time.
func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
