package main

import (
	"testing"
	"unsafe"
)

// TestGrowStackMakesRoom holds growStack to what it is for: once it has
// run on a fresh goroutine, a call that takes almost as much stack finds
// the room there, and the stack is not moved again. Were growStack's frame
// left out (by a compiler that saw it unused), the call would have to grow
// the stack, which starts at the average size the runtime saw, a few KiB,
// and growing moves it.
func TestGrowStackMakesRoom(t *testing.T) {
	t.Parallel()
	for range 20 {
		moved := make(chan bool)
		go func() {
			growStack()
			before := stackAddress()
			takeStack()
			moved <- stackAddress() != before
		}()
		if <-moved {
			t.Fatalf("a call taking %d bytes of stack after growStack moved the goroutine's stack: growStack made no room", len(stackTaker{}))
		}
	}
}

// stackTaker is a frame of almost growStackFrame bytes.
type stackTaker [growStackFrame - 1<<10]byte

// takeStack takes a frame of len(stackTaker{}) bytes.
//
//go:noinline
func takeStack() {
	var frame stackTaker
	touchFrame(frame[:])
}

// stackAddress returns where its own frame is on the calling goroutine's
// stack, which moves when the runtime copies the stack to grow it.
//
//go:noinline
func stackAddress() uintptr {
	var here byte
	return uintptr(unsafe.Pointer(&here))
}
