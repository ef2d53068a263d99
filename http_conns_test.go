package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
)

// pipeListener is a listener whose connections are the server ends of
// net.Pipe pairs, handed to it by a test.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { close(l.closed); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

func TestConnLimiterShedsTheLongestIdleAndNeverABusyConnection(t *testing.T) {
	t.Parallel()
	pl := &pipeListener{conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	cl := newConnLimiter(3)
	ln := cl.listener(pl)
	// accept accepts a new connection, as http.Server does, and returns its
	// server end (which the limiter sees) and its client end.
	type conn struct{ server, client net.Conn }
	accepted := make(chan conn, 1)
	accept := func() {
		server, client := net.Pipe()
		pl.conns <- server
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("Accept: %v", err)
			return
		}
		cl.connState(c, http.StateNew)
		accepted <- conn{c, client}
	}
	serve := func(c conn, states ...http.ConnState) {
		for _, s := range states {
			cl.connState(c.server, s)
		}
	}
	// isClosed reports whether the server end of c was closed, as its
	// client sees it.
	isClosed := func(c conn) bool {
		_, err := c.client.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}

	go accept()
	a := <-accepted
	serve(a, http.StateActive) // a request in progress
	go accept()
	b := <-accepted
	serve(b, http.StateActive, http.StateIdle)
	go accept()
	c := <-accepted
	serve(c, http.StateActive, http.StateIdle)
	if n := cl.openConns(); n != 3 {
		t.Fatalf("%d connections open, want 3", n)
	}

	// The cap is reached: the next connection takes the place of the one
	// idle the longest, b.
	go accept()
	d := <-accepted
	if !isClosed(b) {
		t.Errorf("the connection idle the longest was not closed")
	}
	if n, shed := cl.openConns(), cl.shed.Load(); n != 3 || shed != 1 {
		t.Errorf("%d connections open and %d shed, want 3 and 1", n, shed)
	}

	// Every connection busy: a new one waits until one becomes idle, and
	// takes its place.
	serve(c, http.StateActive)
	serve(d, http.StateActive)
	go accept()
	select {
	case e := <-accepted:
		t.Fatalf("a connection was accepted while every open one was busy: %v", e.server)
	default:
	}
	serve(c, http.StateIdle)
	<-accepted
	if !isClosed(c) {
		t.Errorf("the connection that became idle was not closed for the waiting one")
	}
	// a, busy all along, is still open: its client hears what the server
	// writes.
	go a.server.Write([]byte("x"))
	if _, err := a.client.Read(make([]byte, 1)); err != nil {
		t.Errorf("the busy connection was closed: %v", err)
	}

	// A connection that ends frees its place.
	serve(d, http.StateClosed)
	go accept()
	<-accepted
	if n := cl.openConns(); n != 3 {
		t.Errorf("%d connections open, want 3", n)
	}

	// Closing the listener ends an Accept waiting for room.
	done := make(chan error, 1)
	go func() { _, err := ln.Accept(); done <- err }()
	ln.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
}
