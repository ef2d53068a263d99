package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSIGHUPWhileThePackagesInitialiseIsIgnored sends SIGHUP to the built
// binary while its dependencies' package initialisers run, before main's
// first line: a reload sent just after the service is started must not end
// it (status 129). The process traces its initialisers to a pipe of one page
// (GODEBUG=inittrace=1), which the test reads line by line: once it has read
// the line of the first package of another module initialised after
// os/signal (the earliest point a program can ignore a signal), it sends the
// signal, and the process, blocked when the pipe is full, is at most a page
// ahead of what was read, so still before main. No timing is involved.
func TestSIGHUPWhileThePackagesInitialiseIsIgnored(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, os.Getpagesize()); err != nil {
		w.Close()
		t.Fatal(err)
	}
	pipeSize, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	const bufferSize = 16 // bufio's least: the test reads little ahead of the lines it parsed
	trace := bufio.NewReaderSize(r, bufferSize)
	signalReady := false
	var marker string
	for marker == "" {
		line, err := trace.ReadString('\n')
		if err != nil {
			t.Fatalf("the trace ended before a package of another module was initialised after os/signal: %v", err)
		}
		pkg, ok := strings.CutPrefix(line, "init ")
		if !ok {
			continue
		}
		pkg, _, _ = strings.Cut(pkg, " ")
		first, _, _ := strings.Cut(pkg, "/")
		switch {
		case pkg == "os/signal":
			signalReady = true
		case signalReady && strings.Contains(first, "."):
			marker = pkg
		}
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: %v", err)
	}
	rest, err := io.ReadAll(trace)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGHUP sent once %s was initialised, before main: the process ended with %v, want exit status 0", marker, err)
	}
	// The process may have run ahead of the test by what the pipe and the
	// reader's buffer hold: main's initialiser must come later than that, or
	// the signal could have come after it and the test would prove nothing.
	if mainAt := bytes.Index(rest, []byte("init main @")); mainAt < pipeSize+bufferSize {
		t.Fatalf("main's initialiser is traced %d bytes after %s's (-1: not at all), want more than %d: the test cannot tell that the SIGHUP came before main", mainAt, marker, pipeSize+bufferSize)
	}
}

// TestALockIsDroppedWhileACopyOfItsDescriptorLives: a service that stops
// drops the lock on its SQLite file even while another descriptor of the
// lock file lives on, as a child process forked by another goroutine holds
// a copy of each until it execs: a restart in the same process right after
// is not refused (a test that restarts run in place was refused so once, in
// CI's run, while the other tests started processes).
func TestALockIsDroppedWhileACopyOfItsDescriptorLives(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "pets.db")
	lock, err := lockDatabase(db)
	if err != nil {
		t.Fatal(err)
	}
	forked, err := unix.Dup(int(lock.f.Fd())) // the copy a forked child holds
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(forked)
	lock.release()
	again, err := lockDatabase(db)
	if err != nil {
		t.Fatalf("the lock of a stopped service: %v", err)
	}
	again.release()
}
