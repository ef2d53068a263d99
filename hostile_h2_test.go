package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The hostile tests of hostile_test.go and hostile_linux_test.go over
// HTTP/2, in the run over HTTPS (PETSTORE_TEST_TLS): each test of those
// files sends its attack in HTTP/2's form when testTLS is set, through the
// functions here, and holds the service to the same rule.

// keyHeader is the test key, as an HTTP/2 request carries it.
var keyHeader = map[string]string{"authorization": "Bearer " + testKey}

// bodyNeverEndsOverHTTP2 is TestABodyThatNeverEndsIsCutOffAt1MiB over
// HTTP/2: a create whose body, announced with no length, never ends, sent
// as fast as the server's windows let it. The service answers 413 once it
// has read 1 MiB, and then ends the stream (a reset, or the connection's
// end) or lets its window run dry: it takes no more than 1 MiB and the
// windows it had opened.
func bodyNeverEndsOverHTTP2(t *testing.T, rs *runningService) {
	c := dialH2(t, rs.URL, &net.Dialer{}, 1<<20)
	id, err := c.open("POST", "/v1/pets", map[string]string{"authorization": "Bearer " + testKey, "content-type": "application/json"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	go func() {
		chunk := []byte(`{"name":"` + strings.Repeat("x", 16<<10-9))
		for sent.Load() < 1<<30 {
			if err := c.data(id, chunk, false); err != nil {
				return // the stream or the connection ended
			}
			sent.Add(int64(len(chunk)))
			chunk = []byte(strings.Repeat("x", 16<<10))
		}
	}()
	a, err := c.answer(id, 10*time.Second)
	if err != nil {
		t.Fatalf("no answer to an endless body: %v", err)
	}
	wantError(t, a.response, http.StatusRequestEntityTooLarge, codePayloadTooLarge, "1 MiB")
	// What follows the answer on the stream: its reset, the connection's
	// end, or nothing for 10 s, while the client waits for a window.
	end, err := c.answer(id, 10*time.Second)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() && !c.blocked() {
		t.Fatalf("the server still takes the endless body 10 s after answering (%d bytes sent)", sent.Load())
	}
	const most = maxBodyBytes + 2<<20 // the body and the windows of its stream and its connection
	if n := sent.Load(); n > most {
		t.Errorf("the server took %d bytes of the body, more than %d", n, most)
	}
	t.Logf("the stream ended with %v (reset %v) after %d bytes", err, end.reset, sent.Load())
}

// headersTrickledOverHTTP2 is TestHeadersSentOneByteASecondAreDropped over
// HTTP/2: the preface and settings sent, then a request's HEADERS frame one
// byte a second, answering nothing the server sends (a ping among it). No
// stream opens, so no per-stream bound applies: the service pings a
// connection that sent no whole frame for the header timeout and closes it
// when the ping is not answered within as long again. The same request sent
// whole is served.
func headersTrickledOverHTTP2(t *testing.T, rs *runningService) {
	slow := dialH2(t, rs.URL, &net.Dialer{}, 65535)
	go slow.trickle("GET", "/v1/pets", keyHeader, time.Second)
	// A safety limit only: the trickle takes more than a minute.
	if !slow.closedByServer(3 * time.Minute) {
		t.Fatal("the server kept the trickling connection open for 3 minutes")
	}
	whole := dialH2(t, rs.URL, &net.Dialer{}, 65535)
	id, err := whole.open("GET", "/v1/pets", keyHeader, true)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := whole.answer(id, time.Minute); err != nil || a.Status != http.StatusOK {
		t.Errorf("the same request sent whole: %v, status %d, want 200", err, a.Status)
	}
}

// openIdleH2 opens n HTTP/2 connections to the service at url, each
// having made one request with the test key and read its answer: idle
// connections, as a client leaves them (which answers the server's pings).
// dialers dial at once.
func openIdleH2(t *testing.T, url string, n, dialers int) []*http2.ClientConn {
	t.Helper()
	conns := make([]*http2.ClientConn, n)
	tr := &http2.Transport{}
	errs := make(chan error, dialers)
	var wg sync.WaitGroup
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n; i += dialers {
				conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
				if err == nil {
					conns[i], err = tr.NewClientConn(conn)
				}
				if err == nil {
					err = requestOn(t, conns[i], url)
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	t.Cleanup(func() {
		for _, cc := range conns {
			if cc != nil {
				cc.Close()
			}
		}
	})
	for err := range errs {
		t.Fatal(err)
	}
	return conns
}

// requestOn lists a pet on the connection cc with the test key, and
// fails unless the answer is 200.
func requestOn(t *testing.T, cc *http2.ClientConn, url string) error {
	res, err := cc.RoundTrip(newRequest(t, url, "GET", "/v1/pets?limit=1", "", nil))
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return nil
}

// idleConnectionsOverHTTP2 is TestFiveThousandIdleKeepAliveConnections
// over HTTP/2, with 1,000 connections (each costs a full TLS handshake with
// an RSA key, at both ends in this process): the service answers at once
// with them all idle, and keeps them usable.
func idleConnectionsOverHTTP2(t *testing.T, rs *runningService) {
	const conns = 1000
	idle := openIdleH2(t, rs.URL, conns, 32)
	start := time.Now()
	rex := doRequest(t, rs.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, nil)
	if rex.Status != http.StatusCreated {
		t.Fatalf("create with %d idle connections: status %d, body %s", conns, rex.Status, rex.Body)
	}
	if res := doRequest(t, rs.URL, "GET", "/v1/pets", "", nil); res.Status != http.StatusOK {
		t.Fatalf("list with %d idle connections: status %d", conns, res.Status)
	}
	t.Logf("create and list with %d idle HTTP/2 connections open took %v", conns, time.Since(start))
	for _, i := range []int{0, conns / 2, conns - 1} {
		if err := requestOn(t, idle[i], rs.URL); err != nil {
			t.Fatalf("idle connection %d reused: %v", i, err)
		}
	}
}

// hangUpHalfwayOverHTTP2 sends half of a create's body on a stream and
// closes the connection: the service, which reads the frames before the
// connection's end, logs the request as the client's leaving (499), never
// as a bad request or an error of its own.
func hangUpHalfwayOverHTTP2(t *testing.T, url string) {
	c := dialH2(t, url, &net.Dialer{}, 65535)
	id, err := c.open("POST", "/v1/pets", map[string]string{"authorization": "Bearer " + testKey, "content-type": "application/json", "content-length": "100"}, false)
	if err == nil {
		err = c.data(id, []byte(`{"name":"Half`), false)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.conn.Close()
}

// makeRoomOverHTTP2 is the idle connections' part of
// TestIdleConnectionsMakeRoomForAFreshClient over HTTP/2: n connections
// that have made one request each, and a way to count, afterwards, those
// the service closed.
func makeRoomOverHTTP2(t *testing.T, url string, n int) (closedCount func() int) {
	idle := openIdleH2(t, url, n, 1)
	return func() int {
		closed := 0
		for i, cc := range idle {
			switch err := requestOn(t, cc, url); {
			case err == nil:
			case !cc.State().Closed && !cc.State().Closing:
				t.Errorf("idle connection %d: %v", i, err)
			default:
				closed++
			}
		}
		return closed
	}
}

// TestAShortBodyOverHTTP2IsABadRequest: an HTTP/2 create whose body ends
// (END_STREAM) before its Content-Length is a client still waiting for an
// answer: 400 invalid_body, as at every release before, never the silence
// of a client gone (an empty 200). Over HTTP/1.1 such a
// body cannot end before its length without the connection's end.
func TestAShortBodyOverHTTP2IsABadRequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(newTestServer(t).Handler)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := dialH2(t, srv.URL, &net.Dialer{}, 65535)
	id, err := c.open("POST", "/v1/pets", map[string]string{"authorization": "Bearer " + testKey, "content-type": "application/json", "content-length": "40"}, false)
	if err == nil {
		err = c.data(id, []byte(`{"name":"Short","categoryId":1}`), true)
	}
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.answer(id, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, a.response, http.StatusBadRequest, codeInvalidBody, "could not be read completely")
}
