package main

import (
	"io"
	"os"
	"sync"
	"time"
)

// The log's lines, the access line of every request first, are buffered
// on their way to a file or a pipe (the process's standard error, read by
// journald), as nginx's access_log buffer= and flush= do: a write(2) per
// line cost 1.7 µs of CPU (BenchmarkLogLines), a tenth of a cached get's
// over HTTP/1.1, where the buffer's copy costs 0.1. The buffer is written
// out every logFlushEvery, when it is full, at every reload (SIGHUP) and at
// the stop (SIGTERM, Ctrl-C): a clean stop loses no line, and a SIGKILL
// loses the lines of at most the last logFlushEvery (and at most
// logBufferSize bytes of them). A writer in memory (a test's) makes no
// system call, and gets every line as it is written.

// logFlushEvery is how long a line may wait in the buffer.
const logFlushEvery = 20 * time.Millisecond

// logBufferSize is the buffer's size; a line that does not fit writes the
// buffer out first.
const logBufferSize = 64 << 10

// lineBuffer buffers whole lines (each Write is one record of the log) on
// their way to w.
type lineBuffer struct {
	w    io.Writer
	stop chan struct{}
	done chan struct{}

	mu  sync.Mutex
	buf []byte
}

// bufferLines returns w buffered when it is a file or a pipe, with what
// writes the buffer out (flush) and what stops it for good, writing it out
// (close); w itself, with flush and close doing nothing, otherwise.
func bufferLines(w io.Writer) (out io.Writer, flush, close func()) {
	if _, ok := w.(*os.File); !ok {
		return w, func() {}, func() {}
	}
	b := &lineBuffer{w: w, stop: make(chan struct{}), done: make(chan struct{}), buf: make([]byte, 0, logBufferSize)}
	go b.flushEvery(logFlushEvery)
	return b, b.flush, b.close
}

// Write adds p, one record, to the buffer, writing the buffer out first
// when p does not fit (and p itself, when larger than the buffer).
func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > cap(b.buf) {
		b.flushLocked()
		if len(p) > cap(b.buf) {
			return b.w.Write(p)
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// flush writes the buffer out.
func (b *lineBuffer) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

// flushLocked writes the buffer out; b.mu is held. An error of the log's
// writer is nobody's to report: the log is where errors go.
func (b *lineBuffer) flushLocked() {
	if len(b.buf) > 0 {
		b.w.Write(b.buf)
		b.buf = b.buf[:0]
	}
}

// flushEvery writes the buffer out every d until close.
func (b *lineBuffer) flushEvery(d time.Duration) {
	defer close(b.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.flush()
		case <-b.stop:
			return
		}
	}
}

// close stops the timer and writes the buffer out; later lines are written
// through at once.
func (b *lineBuffer) close() {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	b.buf = b.buf[:0:0] // every later Write goes straight through
}
