// Package nohup ignores SIGHUP as early as a Go program can: in a package
// initialiser that runs before those of the program's heavier dependencies.
//
// SIGHUP asks petstore to reread its keys, but until the program registers
// for it, its default action ends the process (status 129), and systemd
// does not restart a service that a reload ended. main's first line comes
// only after every imported package is initialised (prometheus, SQLite,
// pgx, protobuf...), several milliseconds after exec. Go initialises the
// packages one at a time, each time the first, by import path, of those
// whose imports are all initialised (the language specification, "Package
// initialization", since Go 1.21). This package imports only os/signal and
// syscall, which are initialised within the first millisecond, and its path
// sorts before every package still waiting then except the runtime's and the
// standard library's few that sort after "petstore/", so it runs as soon as
// os/signal is ready: measured in docs/operations.md ("Reload").
//
// It is a package of its own because main's own initialisers run last. The
// program takes SIGHUP over later with signal.Notify, which undoes the
// ignoring.
package nohup

import (
	"os/signal"
	"syscall"
)

func init() {
	signal.Ignore(syscall.SIGHUP)
}
