package main

import "net/http"

// Stacks: over HTTP/2, net/http serves every request on a goroutine of its
// own, started for it. The runtime starts a goroutine's stack at the
// average size of the stacks it scanned last (a few KiB: most goroutines
// of a server wait on a connection, with little on their stacks), which
// the chain of middleware, the mux and a handler outgrow. The runtime then
// grows the stack by copying it whole and adjusting every frame on it, at a
// cost that follows how many frames there are: grown where it overflowed,
// in the mux, some twenty frames deep, it was 5.7 % of the CPU of a get over
// HTTP/2 (docs/performance-round-three.md). Over HTTP/1.1 a connection's
// goroutine serves request after request on the stack it grew once.

// growStackFrame is how much room growStack makes: what the chain and a
// cached read use beyond a goroutine's first stack, with room to spare.
// The stack doubles until it fits, so a fresh one grows to 8 KiB or 16 KiB,
// the sizes the runtime keeps ready in each P's cache.
const growStackFrame = 6 << 10

// growHTTP2Stacks grows the stack of each HTTP/2 request's goroutine once,
// before the request goes down the chain, while only a few frames are on it.
func growHTTP2Stacks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			growStack()
		}
		next.ServeHTTP(w, r)
	})
}

// growStack takes a frame of growStackFrame bytes, which makes the runtime
// grow the calling goroutine's stack now, if it lacks the room, rather than
// deeper down. CockroachDB's growstack package does the same for the same
// reason.
//
//go:noinline
func growStack() {
	var frame [growStackFrame]byte
	touchFrame(frame[:]) // a frame that is used cannot be left out
}

// touchFrame writes to b, so that growStack's frame is kept.
//
//go:noinline
func touchFrame(b []byte) { b[0] = 1 }
