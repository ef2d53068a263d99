package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpState reads the TCP state of conn's socket from the kernel (TCP_INFO),
// without reading from it.
func tcpState(t *testing.T, conn net.Conn) uint8 {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var infoErr error
	if err := raw.Control(func(fd uintptr) {
		info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || infoErr != nil {
		t.Fatalf("TCP_INFO: %v %v", err, infoErr)
	}
	return info.State
}

// tcpEstablished is the TCP_ESTABLISHED state of Linux's TCP_INFO.
const tcpEstablished = 1

// smallSendBufferListener accepts TCP connections whose send buffer is
// 4 KiB, so that a client that stops reading fills the sockets' buffers
// soon.
type smallSendBufferListener struct{ net.Listener }

// Accept accepts a connection and sets its send buffer.
func (l smallSendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		err = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// smallWindowDialer dials with a receive buffer of 4 KiB, so that a client
// that stops reading fills the sockets' buffers soon.
var smallWindowDialer = net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var err error
	c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<10) })
	return err
}}

func TestAClientThatStopsReadingDoesNotHoldTheServer(t *testing.T) {
	t.Parallel()
	// 100 pets with long names make every list page about 14 KB.
	seed := make([]map[string]any, 100)
	for i := range seed {
		seed[i] = map[string]any{"name": fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 96)), "categoryId": 1}
	}
	seedFile := filepath.Join(t.TempDir(), "seed.json")
	b, _ := json.Marshal(seed)
	if err := os.WriteFile(seedFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	const maxConns = 4
	rs := startHostileTarget(t, "-seed", seedFile, "-write-timeout", "1s", "-max-conns", strconv.Itoa(maxConns))
	if testTLS {
		stallOverHTTP2(t, rs, maxConns)
		return
	}

	// A client with a 4 KiB receive window pipelines far more requests than
	// the socket buffers can hold the answers of, and reads none of them.
	conn, err := smallWindowDialer.DialContext(t.Context(), "tcp", strings.TrimPrefix(rs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const pipelined = 2000
	req := "GET /v1/pets?limit=100 HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer " + testKey + "\r\n\r\n"
	go io.WriteString(conn, strings.Repeat(req, pipelined))
	start := time.Now()

	// Meanwhile the service serves everyone else.
	for range 20 {
		if res := doRequest(t, rs.URL, "GET", "/v1/pets?limit=5", "", nil); res.Status != http.StatusOK {
			t.Fatalf("another client got status %d while one client stalls", res.Status)
		}
	}
	// The server gives up on the stalled connection once a write has waited
	// for the 1 s write timeout, and closes its end. The client sees that in
	// its socket's state, read from the kernel without reading the socket
	// (reading would end the stall). If the server held the connection,
	// the state would stay ESTABLISHED and this would fail after 10 s.
	eventually(t, "the server closes the connection of a client that stopped reading", func() bool {
		return tcpState(t, conn) != tcpEstablished
	})
	t.Logf("the server closed the stalled connection %v after the requests were sent", time.Since(start).Round(time.Millisecond))
}

// stallOverHTTP2 is TestAClientThatStopsReadingDoesNotHoldTheServer over
// HTTP/2, where Go's server clears the connection's write deadline and
// only the per-stream write timeout would act: queued behind a write that
// never ends, it never did, and a connection whose client stopped reading
// stayed open, busy, for ever. maxConns such connections, each with 100
// requests for the API document (22 MB of answers, more than any socket
// buffer) and a 4 KiB receive window, and no key: the service must close
// each once a write has waited the write timeout, so that their slots under
// the connection cap come back and a fresh client is served.
func stallOverHTTP2(t *testing.T, rs *runningService, maxConns int) {
	stalled := make([]*rawH2, maxConns)
	for i := range stalled {
		stalled[i] = dialH2(t, rs.URL, &smallWindowDialer, 1<<31-1)
		for range 100 {
			if _, err := stalled[i].open("GET", "/v1/openapi.json", nil, true); err != nil {
				t.Fatal(err)
			}
		}
		stalled[i].answering(t, 10*time.Second)
	}
	start := time.Now()
	// Fresh clients, each on a connection of its own: every slot under
	// the cap is held by a stalled connection until the service lets go
	// of one. Before the fix, each of these waited for ever.
	for i := range 5 {
		client := &http.Client{Timeout: 10 * time.Second, Transport: testTransport()}
		res, err := client.Do(newRequest(t, rs.URL, "GET", "/v1/pets?limit=5", "", nil))
		if err != nil {
			t.Fatalf("fresh client %d, with %d connections stalled (the cap): %v", i, maxConns, err)
		}
		if got := readResponse(t, res); got.Status != http.StatusOK {
			t.Fatalf("fresh client %d: status %d", i, got.Status)
		}
		client.CloseIdleConnections()
	}
	t.Logf("fresh clients served %v after %d connections stalled", time.Since(start).Round(time.Millisecond), maxConns)
	// Each stalled connection was closed by the service: reading on finds
	// its end, not 22 MB of answers and then a connection left open.
	for i, c := range stalled {
		if !c.closedByServer(10 * time.Second) {
			t.Errorf("stalled connection %d is still open", i)
		}
	}
	eventually(t, "the stalled connections are no longer counted open", func() bool {
		return metricValue(t, doRequest(t, rs.URL, "GET", "/metrics", "", nil).Body, "petstore_connections_open", map[string]string{}) <= 1
	})
}

// TestAStreamWhoseClientStopsReadingIsClosed: an event stream whose client
// stops reading is closed once a frame has waited the write timeout (30 s,
// 300 ms here), so a stalled reader holds neither a buffer nor a
// connection, and no longer counts as an open stream.
func TestAStreamWhoseClientStopsReadingIsClosed(t *testing.T) {
	t.Parallel()
	if testTLS {
		streamStalledOverHTTP2(t)
		return
	}
	ts := newTestServer(t, withFeed(feedConfig{heartbeat: time.Hour, retention: time.Hour, maxStreams: 10, writeTimeout: 300 * time.Millisecond}))
	// The stalled client gets a listener of its own on the same handler,
	// so that the states of its one connection, as the server sees them,
	// are known: closed (the server let go of it) or idle (the server
	// ended the answer and would keep the connection for the next one).
	// Its server's end sends from a buffer of 4 KiB (Linux's own grows to
	// megabytes), so that the sockets fill after a hundred events or so,
	// not ten thousand.
	var state atomic.Value
	stalled := httptest.NewUnstartedServer(ts.Handler)
	stalled.Listener = smallSendBufferListener{stalled.Listener}
	stalled.Config.ConnState = func(_ net.Conn, s http.ConnState) { state.Store(s) }
	stalled.Start()
	t.Cleanup(func() {
		ts.Feed.stop() // a stream still open ends only when the feed stops
		stalled.Close()
	})

	// A client with a 4 KiB receive window opens a stream and reads
	// nothing, not even the answer's headers.
	conn, err := smallWindowDialer.DialContext(t.Context(), "tcp", strings.TrimPrefix(stalled.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /v1/events HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer "+testKey+"\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream opens", func() bool { return ts.Feed.openStreams() == 1 })

	// Events of about 250 bytes each, until the stream ends: the sockets'
	// buffers hold a hundred or so, and then a frame waits for the client.
	// A stream that never gave up would fail the test at 5,000 (about
	// 1.2 MB, far past the buffers of 4 KiB at both ends).
	name := strings.Repeat("x", 100)
	created := 0
	for ts.Feed.openStreams() == 1 {
		if created >= 5000 {
			t.Fatalf("the stream of a client that reads nothing is still open after %d events", created)
		}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { ts.createPet(t, name, 1, "") })
		}
		wg.Wait()
		created += 50
	}
	// The server closes its end of the connection: it does not keep it
	// for another request, since the answer was cut short. (What the
	// kernel still holds for the client, and when the client sees the
	// end, is the kernel's: a peer that stopped reading for long is only
	// probed again after a back-off of seconds.)
	if !waitUntil(10*time.Second, 20*time.Millisecond, func() bool { return state.Load() == http.StateClosed }) {
		t.Fatalf("the stalled stream's connection is %v after 10s, not closed; the server's log, but for access lines:\n%s", state.Load(), notAccessLines(ts.Log.String()))
	}
	if other := notAccessLines(ts.Log.String()); other != "" {
		t.Errorf("the server logged more than requests; did the stream end for another reason?\n%s", other)
	}
	t.Logf("the stream ended after %d events", created)
}

// streamStalledOverHTTP2 is TestAStreamWhoseClientStopsReadingIsClosed
// over HTTP/2: a key's one stream (its cap, -events-max-streams 1) on a
// connection whose client stops reading, and then asks for more than the
// sockets hold. The service closes the connection once a write has waited
// the write timeout, which ends the stream and gives its slot back: the key
// opens a stream again. Before the fix, the stream's reset waited behind
// the stuck write and the slot stayed taken, every new stream 429, for
// ever.
func streamStalledOverHTTP2(t *testing.T) {
	rs := startHostileTarget(t, "-write-timeout", "1s", "-events-max-streams", "1")
	stalled := dialH2(t, rs.URL, &smallWindowDialer, 1<<31-1)
	auth := map[string]string{"authorization": "Bearer " + testKey, "accept": "text/event-stream"}
	if _, err := stalled.open("GET", "/v1/events", auth, true); err != nil {
		t.Fatal(err)
	}
	stalled.answering(t, 10*time.Second)
	for range 100 {
		if _, err := stalled.open("GET", "/v1/openapi.json", nil, true); err != nil {
			t.Fatal(err)
		}
	}
	// The key's next stream: refused (429) while the stalled one holds
	// the slot, opened once it is given back.
	opens := func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req := newRequest(t, rs.URL, "GET", "/v1/events", "", map[string]string{"Accept": "text/event-stream"}).WithContext(ctx)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("a second stream: %v", err)
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}
	eventually(t, "the key opens a stream once its stalled one is closed", opens)
	if !stalled.closedByServer(10 * time.Second) {
		t.Error("the stalled connection is still open")
	}
}

// notAccessLines returns the lines of log that are not access lines.
func notAccessLines(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `"msg":"request"`) {
			b.WriteString(line)
		}
	}
	return b.String()
}
