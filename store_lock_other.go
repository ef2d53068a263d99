//go:build !unix

package main

import "os"

// lockFile takes no lock outside Unix, where flock(2) is not: every
// process is let serve, as before the lock, and one process per file is
// the operator's to keep.
func lockFile(*os.File) (bool, error) { return true, nil }

// unlockFile has no lock to drop outside Unix.
func unlockFile(*os.File) {}

// processRuns reports, outside Unix, that any process may run: a lease is
// then only taken over once it lapsed.
func processRuns(int) bool { return true }
