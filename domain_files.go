package main

import (
	"fmt"
	"os"
)

// The domain's small shared pieces, files: what the secret, the generated
// key and the backups need to make a write durable.

// syncPath fsyncs a file or directory.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
