//go:build unix

package main

import "syscall"

// fileLimit is how many files the process may open (RLIMIT_NOFILE), 0 when
// it cannot tell. Go raises the soft limit to the hard one at start-up, so
// this is the limit the process really has.
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur)
}
