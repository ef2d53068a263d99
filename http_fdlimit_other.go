//go:build !unix

package main

// fileLimit is how many files the process may open; 0: this system does
// not say.
func fileLimit() uint64 { return 0 }
