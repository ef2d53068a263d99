package main

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Every connection holds a file descriptor and some memory (about 20 KiB
// idle). Without a bound, idle keep-alive connections, which need no key,
// could take every descriptor the process may open: the listener then fails
// to accept ("too many open files") and a legitimate client waits until an
// idler leaves. So the open connections are capped below the process's file
// limit, and when the cap is reached, the connection that has waited longest
// without a request in progress (idle between requests, or still sending its
// first one) is closed to make room: a fresh client is always accepted, at
// the expense of the longest idler. A connection whose request is being
// served is never closed; while every connection has one, a new client
// waits in the listen queue until one ends.

// connReserve is how many file descriptors the default cap leaves to the
// rest of the process: the database and its journal, the log, the listener,
// the key and secret files, /proc for the metrics.
const connReserve = 64

// defaultMaxConnsCeiling bounds the default cap on machines whose file limit
// is large: 4,096 idle connections take about 80 MiB.
const defaultMaxConnsCeiling = 4096

// defaultMaxConns is the cap on open connections when none is set: what the
// file limit leaves after connReserve, at most defaultMaxConnsCeiling, or
// defaultMaxConnsCeiling when the limit is unknown.
func defaultMaxConns(fileLimit uint64) int {
	if fileLimit == 0 {
		return defaultMaxConnsCeiling
	}
	if fileLimit <= 2*connReserve {
		return max(1, int(fileLimit/2))
	}
	return int(min(fileLimit-connReserve, defaultMaxConnsCeiling))
}

// connLimiter keeps the number of open connections at or under max. Its
// listener admits each connection it accepts only once there is room for
// it; the server's ConnState hook tells it which connections may be closed
// to make room (those without a request in progress) and which have ended.
type connLimiter struct {
	max int

	mu      sync.Mutex
	room    *sync.Cond
	open    int                        // admitted and not ended
	conns   map[net.Conn]*list.Element // every open connection, in order
	order   *list.List                 // of *openConn, the one that has waited longest since its last request first
	closing bool                       // the listener is closed

	shed atomic.Uint64 // connections closed to make room
}

// openConn is an open connection as the limiter sees it.
type openConn struct {
	conn net.Conn
	busy bool // a request is in progress: never shed
}

// newConnLimiter returns a limiter of max open connections.
func newConnLimiter(max int) *connLimiter {
	cl := &connLimiter{max: max, conns: map[net.Conn]*list.Element{}, order: list.New()}
	cl.room = sync.NewCond(&cl.mu)
	return cl
}

// listener wraps ln so that it never holds more than max connections.
func (cl *connLimiter) listener(ln net.Listener) net.Listener {
	return &cappedListener{Listener: ln, cl: cl}
}

// cappedListener is a listener under a connLimiter.
type cappedListener struct {
	net.Listener
	cl *connLimiter
}

// Accept accepts the next connection and admits it, closing the longest
// idler first if the cap is reached. While the cap holds, the process has
// one connection more open for that moment: the reserve of file
// descriptors covers it.
func (l *cappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !l.cl.admit() {
		c.Close()
		return nil, net.ErrClosed
	}
	return c, nil
}

// Close closes the listener and wakes an Accept waiting for room.
func (l *cappedListener) Close() error {
	l.cl.mu.Lock()
	l.cl.closing = true
	l.cl.room.Broadcast()
	l.cl.mu.Unlock()
	return l.Listener.Close()
}

// admit counts one more open connection, making room first: it closes the
// longest idler, or waits for a connection to end or become idle. It returns
// false once the listener is closed.
func (cl *connLimiter) admit() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for cl.open >= cl.max && !cl.closing {
		victim := cl.longestIdle()
		if victim == nil {
			cl.room.Wait()
			continue
		}
		cl.forget(victim)
		// The server's goroutine for it, waiting for a request, fails its
		// read and ends; its StateClosed finds it forgotten already.
		victim.Close()
		cl.shed.Add(1)
	}
	if cl.closing {
		return false
	}
	cl.open++
	return true
}

// longestIdle is the connection without a request in progress that has
// waited longest since its last one (or since it was opened), nil when
// every one is busy. The busy ones are skipped where they stand: a
// connection moves to the back when it becomes idle, not on each change, so
// that a request costs no allocation here. The caller holds mu.
func (cl *connLimiter) longestIdle() net.Conn {
	for e := cl.order.Front(); e != nil; e = e.Next() {
		if oc := e.Value.(*openConn); !oc.busy {
			return oc.conn
		}
	}
	return nil
}

// forget removes c from the open connections. The caller holds mu.
func (cl *connLimiter) forget(c net.Conn) {
	if e, ok := cl.conns[c]; ok {
		cl.order.Remove(e)
		delete(cl.conns, c)
		cl.open--
	}
}

// connState is the http.Server's ConnState hook.
func (cl *connLimiter) connState(c net.Conn, state http.ConnState) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch state {
	case http.StateNew:
		cl.conns[c] = cl.order.PushBack(&openConn{conn: c})
		cl.room.Signal()
	case http.StateIdle:
		// Its request is answered: it may be shed, after those that
		// have waited longer.
		if e, ok := cl.conns[c]; ok {
			e.Value.(*openConn).busy = false
			cl.order.MoveToBack(e)
			cl.room.Signal()
		}
	case http.StateActive:
		if e, ok := cl.conns[c]; ok {
			e.Value.(*openConn).busy = true
		}
	case http.StateHijacked, http.StateClosed:
		cl.forget(c)
		cl.room.Signal()
	}
}

// openConns is how many connections are open now.
func (cl *connLimiter) openConns() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.conns)
}
