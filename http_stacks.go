package main

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// Goroutines that keep their stacks. Over HTTP/1.1 net/http serves a
// connection's requests one after another on one goroutine, whose stack,
// grown once by the first request through the middleware, the handler and
// SQLite (C translated to Go, with deep frames), serves every later one.
// Over HTTP/2 it starts a new goroutine for every request, with a stack of
// a few KiB that grows, by copying, through the same calls each time: 4.5 µs
// a request of the 7.8 that the whole chain took on a fresh goroutine, 3.0
// on one that had served before (BenchmarkChainOnAFreshGoroutine, one CPU). So the
// requests of HTTP/2 are handed to a goroutine of a pool, idle ones reused
// and grown already, while net/http's goroutine waits for it: two channel
// operations instead of the growth.

// maxIdleStackers bounds the goroutines kept idle between requests: more
// than the requests in flight at once on a busy server is wasted memory (a
// grown stack is tens of KiB). One idle for stackerIdleLife ends, so that
// a quiet server (or one stopped) keeps none.
const (
	maxIdleStackers = 256
	stackerIdleLife = time.Minute
)

// stackPool is the pool of goroutines that serve HTTP/2's requests.
type stackPool struct {
	next http.Handler
	mu   sync.Mutex
	idle []*stacker // the last one idle is taken first: its stack is the warmest
}

// stacker is one goroutine of the pool, and the request it serves.
type stacker struct {
	pool *stackPool
	w    http.ResponseWriter
	r    *http.Request
	// panicked is what the handler panicked with (nil when it did not):
	// raised again on net/http's goroutine, which knows what to do with
	// http.ErrAbortHandler and the rest.
	panicked any
	start    chan struct{}
	done     chan struct{}
}

// keepStacks serves next's HTTP/2 requests on goroutines that keep their
// grown stacks; HTTP/1.1's, whose connection goroutine keeps its own, are
// served where they come.
func keepStacks(next http.Handler) http.Handler {
	p := &stackPool{next: next}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			next.ServeHTTP(w, r)
			return
		}
		s := p.get()
		s.w, s.r = w, r
		s.start <- struct{}{}
		<-s.done
		panicked := s.panicked
		s.w, s.r, s.panicked = nil, nil, nil
		p.put(s)
		if panicked != nil {
			panic(panicked)
		}
	})
}

// get takes an idle goroutine of the pool, or starts one.
func (p *stackPool) get() *stacker {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return s
	}
	p.mu.Unlock()
	s := &stacker{pool: p, start: make(chan struct{}), done: make(chan struct{})}
	go s.serve()
	return s
}

// put gives s back to the pool, or ends its goroutine when enough are
// idle already.
func (p *stackPool) put(s *stacker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) < maxIdleStackers {
		p.idle = append(p.idle, s)
		return
	}
	close(s.start)
}

// leave takes s out of the idle ones, and reports whether it was there (a
// request taking it meanwhile keeps it).
func (p *stackPool) leave(s *stacker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.idle, s)
	if i < 0 {
		return false
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	return true
}

// serve serves the requests it is given until its pool lets it go, or it
// has been idle for stackerIdleLife.
func (s *stacker) serve() {
	idle := time.NewTimer(stackerIdleLife)
	defer idle.Stop()
	for {
		select {
		case _, ok := <-s.start:
			if !ok {
				return
			}
			s.serveOne()
			idle.Reset(stackerIdleLife)
			s.done <- struct{}{}
		case <-idle.C:
			if s.pool.leave(s) {
				return
			}
			idle.Reset(stackerIdleLife) // taken meanwhile: its request is coming
		}
	}
}

// serveOne serves one request, catching its panic for net/http's goroutine.
func (s *stacker) serveOne() {
	defer func() { s.panicked = recover() }()
	s.pool.next.ServeHTTP(s.w, s.r)
}
