//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkPrivateFile refuses a file that a user other than this service's
// user and root could change, as OpenSSH's StrictModes does for
// authorized_keys: f (opened from path) must not be owned by another user
// nor have a bit of writable set in its mode, and no directory above it may
// be owned by another user or be writable by its group or other users,
// unless it has the sticky bit and belongs to root or to this user (as /tmp
// does: others may add files there, but cannot rename or remove ours). The
// directories are those of the path with its symbolic links resolved, where
// the file really is. The error says which file or directory is at fault,
// and how to fix it.
func checkPrivateFile(path string, f *os.File, writable os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read: %v", err)
	}
	me := os.Geteuid()
	if uid, ok := ownerOf(fi); ok && uid != 0 && uid != me {
		return fmt.Errorf("is owned by user id %d, neither root nor the user this service runs as (%d) (chown it)", uid, me)
	}
	if perm := fi.Mode().Perm(); perm&writable != 0 {
		return fmt.Errorf("can be written by its group or by other users (mode %04o) (chmod go-w %s)", perm, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("cannot resolve its path: %v", err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return fmt.Errorf("cannot resolve its path: %v", err)
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("cannot check its directory %s: %v", dir, err)
		}
		uid, _ := ownerOf(di)
		if uid != 0 && uid != me {
			return fmt.Errorf("is in the directory %s, owned by user id %d, neither root nor the user this service runs as (%d), who can replace the file", dir, uid, me)
		}
		if perm := di.Mode(); perm.Perm()&0o022 != 0 && perm&os.ModeSticky == 0 {
			return fmt.Errorf("is in the directory %s, which its group or other users can write (mode %04o), so they can replace the file (chmod go-w %s)", dir, perm.Perm(), dir)
		}
		if parent := filepath.Dir(dir); parent == dir {
			return nil
		}
	}
}

// ownerOf returns the user id that owns the file described by fi.
func ownerOf(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
