package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Test helpers: an HTTP/2 client written frame by frame, for the tests
// that send what a hostile client sends over HTTP/2 (streams it never
// reads, bodies it announces and never sends), which no well-behaved
// client such as http.Transport can be made to do.

// rawH2 is one HTTP/2 connection over TLS, its frames written and read by
// the test.
type rawH2 struct {
	conn net.Conn

	mu   sync.Mutex // guards what writes: the framer's writer, enc, next
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32 // the next stream's id

	flow h2Flow // what the server lets the client send
}

// h2Flow is HTTP/2's flow control as the client keeps it: the server's
// windows, which data waits for, and the streams the server reset. The
// frames that change it come to answer, so data waits only while answer
// reads (or sends no more than the first windows hold).
type h2Flow struct {
	mu      sync.Mutex
	changed *sync.Cond
	conn    int64 // the connection's window
	initial int64 // each stream's first window (SETTINGS_INITIAL_WINDOW_SIZE)
	granted map[uint32]int64
	sent    map[uint32]int64
	reset   map[uint32]bool
	ended   bool // the connection is gone
	waiting bool // data waits for a window
}

// dialH2 opens an HTTP/2 connection to the service at url (https), with
// dialer (whose Control may shrink the socket's buffers), trusting any
// certificate. It sends the preface and its settings, which open the
// window of every stream and of the connection to window bytes, so that
// only TCP, never HTTP/2's flow control, holds back what the server sends.
func dialH2(t *testing.T, url string, dialer *net.Dialer, window uint32) *rawH2 {
	t.Helper()
	d := &tls.Dialer{NetDialer: dialer, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}}
	conn, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(url, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("the server chose %q, not h2", p)
	}
	c := &rawH2{conn: conn, fr: http2.NewFramer(conn, conn), next: 1}
	c.flow = h2Flow{conn: 65535, initial: 65535, granted: map[uint32]int64{}, sent: map[uint32]int64{}, reset: map[uint32]bool{}}
	c.flow.changed = sync.NewCond(&c.flow.mu)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatal(err)
	}
	if window > 65535 {
		if err := c.fr.WriteWindowUpdate(0, window-65535); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// open starts a request of method on path, with header, and returns its
// stream's id. With end, the request has no body; otherwise data sends it.
func (c *rawH2) open(method, path string, header map[string]string, end bool) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, frame := c.headers(method, path, header, end)
	_, err := c.conn.Write(frame)
	return id, err
}

// headers is the HEADERS frame that opens the next stream, and its id. The
// caller holds mu.
func (c *rawH2) headers(method, path string, header map[string]string, end bool) (uint32, []byte) {
	c.hbuf.Reset()
	fields := []hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "localhost"}, {Name: ":path", Value: path}}
	for name, value := range header {
		fields = append(fields, hpack.HeaderField{Name: strings.ToLower(name), Value: value})
	}
	for _, f := range fields {
		c.enc.WriteField(f) // into a bytes.Buffer: never fails
	}
	id := c.next
	c.next += 2
	var frame bytes.Buffer
	http2.NewFramer(&frame, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true})
	return id, frame.Bytes()
}

// trickle sends the HEADERS frame of a request one byte at a time, every
// pause, until the connection fails (or the frame is sent).
func (c *rawH2) trickle(method, path string, header map[string]string, pause time.Duration) {
	c.mu.Lock()
	_, frame := c.headers(method, path, header, true)
	c.mu.Unlock()
	for _, b := range frame {
		if _, err := c.conn.Write([]byte{b}); err != nil {
			return
		}
		time.Sleep(pause) // the client's pace, not a synchronisation
	}
}

// data sends b on the stream id, ending the body with end, once the
// server's windows have room for it. It fails when the server reset the
// stream or the connection ended.
func (c *rawH2) data(id uint32, b []byte, end bool) error {
	if err := c.flow.spend(id, int64(len(b))); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fr.WriteData(id, end, b)
}

// spend waits until the windows of the connection and of the stream id
// have room for n bytes, and takes them.
func (f *h2Flow) spend(id uint32, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		switch {
		case f.reset[id]:
			return fmt.Errorf("the server reset stream %d", id)
		case f.ended:
			return errors.New("the connection ended")
		case f.conn >= n && f.initial+f.granted[id]-f.sent[id] >= n:
			f.conn -= n
			f.sent[id] += n
			f.waiting = false
			return nil
		}
		f.waiting = true
		f.changed.Wait()
	}
}

// update applies a frame that changes the windows or ends a stream.
func (f *h2Flow) update(fr http2.Frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.changed.Broadcast()
	switch fr := fr.(type) {
	case *http2.SettingsFrame:
		if v, ok := fr.Value(http2.SettingInitialWindowSize); ok {
			f.initial = int64(v)
		}
	case *http2.WindowUpdateFrame:
		if fr.StreamID == 0 {
			f.conn += int64(fr.Increment)
		} else {
			f.granted[fr.StreamID] += int64(fr.Increment)
		}
	case *http2.RSTStreamFrame:
		f.reset[fr.StreamID] = true
	case nil:
		f.ended = true
	}
}

// blocked reports whether data waits for the server to open a window.
func (c *rawH2) blocked() bool {
	c.flow.mu.Lock()
	defer c.flow.mu.Unlock()
	return c.flow.waiting
}

// h2Answer is what the server answered on one stream: its status and body,
// or the code it reset the stream with.
type h2Answer struct {
	response
	reset http2.ErrCode // set when the stream was reset
}

// answer reads frames until the stream id is answered whole (or reset),
// within d, acknowledging the server's settings and pings on the way and
// dropping the frames of other streams. It fails when the connection ends
// first, and reports a GOAWAY as an error.
func (c *rawH2) answer(id uint32, d time.Duration) (h2Answer, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	defer c.conn.SetReadDeadline(time.Time{})
	a := h2Answer{response: response{Header: http.Header{}}}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
				c.flow.update(nil)
			}
			return a, err
		}
		if done, err := c.take(f, id, &a); done || err != nil {
			return a, err
		}
	}
}

// take handles one frame that answer read, and reports whether the stream
// id is answered.
func (c *rawH2) take(f http2.Frame, id uint32, a *h2Answer) (bool, error) {
	c.flow.update(f)
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			c.mu.Lock()
			defer c.mu.Unlock()
			return false, c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			defer c.mu.Unlock()
			return false, c.fr.WritePing(true, f.Data)
		}
	case *http2.GoAwayFrame:
		// The server takes no new stream; those up to LastStreamID are
		// still answered.
		if f.LastStreamID < id {
			return true, fmt.Errorf("GOAWAY %v before stream %d", f.ErrCode, id)
		}
	case *http2.MetaHeadersFrame:
		if f.StreamID != id {
			return false, nil
		}
		a.addFields(f.Fields)
		return f.StreamEnded(), nil
	case *http2.DataFrame:
		if f.StreamID == id {
			a.Body = append(a.Body, f.Data()...)
			return f.StreamEnded(), nil
		}
	case *http2.RSTStreamFrame:
		if f.StreamID == id {
			a.reset = f.ErrCode
			return true, nil
		}
	}
	return false, nil
}

// addFields adds the decoded fields of a header block to a.
func (a *h2Answer) addFields(fields []hpack.HeaderField) {
	for _, hf := range fields {
		if hf.Name == ":status" {
			a.Status, _ = strconv.Atoi(hf.Value)
			continue
		}
		a.Header.Add(hf.Name, hf.Value)
	}
}

// answerBlock reads the answer of stream id as answer does, and returns
// its header block as the server encoded it, which dec decodes: from its
// first call on a connection, the connection's own decoder is left out and
// dec takes its place, so every answer of the connection is read with it.
func (c *rawH2) answerBlock(id uint32, dec *hpack.Decoder, d time.Duration) ([]byte, h2Answer, error) {
	c.fr.ReadMetaHeaders = nil // HEADERS frames come undecoded
	c.conn.SetReadDeadline(time.Now().Add(d))
	defer c.conn.SetReadDeadline(time.Time{})
	a := h2Answer{response: response{Header: http.Header{}}}
	var block []byte
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return block, a, err
		}
		h, ok := f.(*http2.HeadersFrame)
		if !ok || h.StreamID != id {
			if done, err := c.take(f, id, &a); done || err != nil {
				return block, a, err
			}
			continue
		}
		block = append(block, h.HeaderBlockFragment()...) // the tests' answers need no CONTINUATION
		fields, err := dec.DecodeFull(block)
		if err != nil {
			return block, a, err
		}
		a.addFields(fields)
		if h.StreamEnded() {
			return block, a, nil
		}
	}
}

// answering waits, within d, until the server has begun to answer some
// stream (its HEADERS came), reading what comes before it: from then on
// the connection is busy, in the server's eyes, until its streams end.
func (c *rawH2) answering(t *testing.T, d time.Duration) {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(d))
	defer c.conn.SetReadDeadline(time.Time{})
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer began within %v: %v", d, err)
		}
		if _, ok := f.(*http2.MetaHeadersFrame); ok {
			return
		}
		if _, err := c.take(f, 0, &h2Answer{response: response{Header: http.Header{}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// readInBackground reads what the server sends for d, in a goroutine of
// its own, acknowledging its settings and pings and opening the windows it
// grants, for a test that writes and reads nothing.
func (c *rawH2) readInBackground(d time.Duration) {
	go c.answer(0, d) // no stream 0 is answered: it reads until d has passed or the connection ends
}

// closedByServer reports whether the server has closed the connection:
// reading on finds its end (or a reset) rather than a timeout. What it
// reads is dropped.
func (c *rawH2) closedByServer(within time.Duration) bool {
	c.conn.SetReadDeadline(time.Now().Add(within))
	defer c.conn.SetReadDeadline(time.Time{})
	_, err := io.Copy(io.Discard, c.conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// hpackAdditions counts the fields of an HPACK header block that its
// decoder adds to the connection's table: the literals with incremental
// indexing (RFC 7541, section 6.2.1; their first bits are 01).
func hpackAdditions(block []byte) (int, error) {
	added := 0
	for len(block) > 0 {
		first := block[0]
		var err error
		switch {
		case first&0x80 != 0: // an indexed field (section 6.1)
			block, _, err = hpackInt(block, 7)
		case first&0xe0 == 0x20: // a dynamic table size update (section 6.3)
			block, _, err = hpackInt(block, 5)
		default: // a literal field (section 6.2): its name's index or the name, then the value
			prefix := 4 // without indexing, or never indexed
			if first&0xc0 == 0x40 {
				added++
				prefix = 6
			}
			var name uint64
			if block, name, err = hpackInt(block, prefix); err == nil && name == 0 {
				block, err = hpackString(block)
			}
			if err == nil {
				block, err = hpackString(block)
			}
		}
		if err != nil {
			return added, err
		}
	}
	return added, nil
}

// hpackInt reads an integer (RFC 7541, section 5.1) whose first byte holds
// prefix bits of it, and returns what follows it.
func hpackInt(b []byte, prefix int) ([]byte, uint64, error) {
	if len(b) == 0 {
		return nil, 0, errors.New("hpack: an integer is missing")
	}
	mask := uint64(1)<<prefix - 1
	v := uint64(b[0]) & mask
	b = b[1:]
	if v < mask {
		return b, v, nil
	}
	for shift := 0; len(b) > 0 && shift < 63; shift += 7 {
		c := b[0]
		b = b[1:]
		v += uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return b, v, nil
		}
	}
	return nil, 0, errors.New("hpack: an integer runs past the block")
}

// hpackString skips a string literal (RFC 7541, section 5.2): its length,
// beside the bit that says whether it is Huffman-coded, then its bytes.
func hpackString(b []byte) ([]byte, error) {
	b, n, err := hpackInt(b, 7)
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) < n {
		return nil, errors.New("hpack: a string runs past the block")
	}
	return b[n:], nil
}
