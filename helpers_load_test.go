package main

import (
	"sync"
	"testing"
)

// Test helpers: load from many goroutines until a test says stop.

// untilStopped is the tests' one load loop: it calls do(worker, i) from
// workers goroutines, i counting each worker's own calls from 0, round and
// round until stop is closed or do returns false (a worker that met the
// end it expected, such as a killed server), and returns once every worker
// has finished its last call. do reports failures with t.Errorf, never
// t.Fatal: it runs outside the test's goroutine.
func untilStopped(workers int, stop <-chan struct{}, do func(worker, i int) bool) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !do(w, i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// keepSending runs untilStopped in the background until the returned stop
// is called (at the latest when the test ends); stop waits for the workers'
// last calls, so what they did is all done once it returns.
func keepSending(t testing.TB, workers int, do func(worker, i int) bool) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		untilStopped(workers, quit, do)
		close(done)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// keepReading sends GETs of each path to each server, one worker per pair,
// round and round, until the returned stop is called (at the latest when
// the test ends): the readers that keep caches filling while a test writes.
func keepReading(t *testing.T, servers []*testServer, paths ...string) (stop func()) {
	t.Helper()
	return keepSending(t, len(servers)*len(paths), func(w, _ int) bool {
		servers[w/len(paths)].do(t, "GET", paths[w%len(paths)], "", nil)
		return true
	})
}
