//go:build unix

package main

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock(2) on f without waiting, and reports
// whether it holds it now; false when another open file holds it. The
// kernel releases it when the last descriptor of f closes, at the latest
// when the process ends, however it ends.
func lockFile(f *os.File) (bool, error) {
	conn, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lockErr error
	if err := conn.Control(func(fd uintptr) { lockErr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) }); err != nil {
		return false, err
	}
	if errors.Is(lockErr, unix.EWOULDBLOCK) {
		return false, nil
	}
	return lockErr == nil, lockErr
}

// unlockFile drops the flock(2) on f. Closing f alone would not while
// another descriptor of the same open file lives on: a child process that
// this process forks holds a copy of every descriptor until it execs, so a
// lock dropped only by the close could outlive a stop for that moment, and
// refuse a restart in the same process that follows at once.
func unlockFile(f *os.File) {
	if conn, err := f.SyscallConn(); err == nil {
		conn.Control(func(fd uintptr) { unix.Flock(int(fd), unix.LOCK_UN) })
	}
}

// processRuns reports whether a process of id pid runs on this machine (or
// may: one that runs under another user answers EPERM).
func processRuns(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
