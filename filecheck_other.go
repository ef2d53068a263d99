//go:build !unix

package main

import (
	"fmt"
	"os"
)

// checkPrivateFile refuses a file whose mode lets others write it. Outside
// Unix, file ownership and modes do not say who may change a file, so this
// is the only check.
func checkPrivateFile(path string, f *os.File, writable os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cannot read: %v", err)
	}
	if perm := fi.Mode().Perm(); perm&writable != 0 {
		return fmt.Errorf("can be written by its group or by other users (mode %04o)", perm)
	}
	return nil
}
