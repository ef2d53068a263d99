package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// ceilingPet has the shape of the service's Pet, so that the ceiling's bodies
// have the same size as the service's.
type ceilingPet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// ceilingVariants is how many distinct pre-encoded bodies of each kind the
// ceiling holds; requests pick one by id, so the bodies vary like the
// service's without the ceiling holding a million of them.
const ceilingVariants = 1024

// runCeiling is the bare net/http server: the same routes as the service,
// answered from memory with pre-encoded bodies of the same shape, and
// nothing else (no database, no validation beyond parsing the id). What it
// reaches is the most this machine's HTTP stack can do for these requests.
// Given a certificate and its key (PEM files) after PETS, it serves them
// over TLS instead, as the service does with -tls-cert and -tls-key (TLS 1.2
// and 1.3, Go's suites, HTTP/2 and HTTP/1.1 by ALPN): the bare Go TLS server
// of bench https. Given h2c after PETS, it serves HTTP/2 without TLS beside
// HTTP/1.1 (h2c, with prior knowledge), which bench https loads to tell
// what HTTP/2 costs from what TLS does.
func runCeiling(args []string) error {
	bounds := len(args) == 5 && args[4] == "bounds"
	if bounds {
		args = args[:4]
	}
	h2c := len(args) == 3 && args[2] == "h2c"
	if len(args) != 2 && len(args) != 4 && !h2c {
		return fmt.Errorf("usage: bench ceiling ADDR PETS [h2c | CERT KEY [bounds]]")
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		return err
	}
	mux := ceilingMux(n, newCeilingBodies(n))
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	srv, scheme, err := bareServer(mux, h2c, args[2:])
	if err != nil {
		return err
	}
	if bounds {
		withServiceTimeouts(srv)
	}
	return serveCeiling(srv, ln, scheme)
}

// withServiceTimeouts gives srv the time bounds the service's server has by
// default (its -read-header-timeout, -read-timeout, -write-timeout and
// -idle-timeout, and over HTTP/2 the write and ping timeouts of its
// http2Bounds), which net/http enforces: the ceiling with "bounds" after
// CERT KEY measures what they cost by themselves, apart from everything
// else the service adds. Over HTTP/2 net/http arms two timers for each
// stream and sets the connection's write deadline around each write.
func withServiceTimeouts(srv *http.Server) {
	srv.ReadHeaderTimeout = 5 * time.Second
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.IdleTimeout = 120 * time.Second
	srv.HTTP2 = &http.HTTP2Config{WriteByteTimeout: 30 * time.Second, SendPingTimeout: 5 * time.Second, PingTimeout: 5 * time.Second}
}

// bareServer is the server of the ceiling and of durable bare: h over
// plain HTTP/1.1, with h2c too when h2c, or over TLS when certKey names a
// certificate and its key (the service's TLS settings: TLS 1.2 and 1.3,
// HTTP/2 by ALPN). It returns the server and its URL scheme.
func bareServer(h http.Handler, h2c bool, certKey []string) (*http.Server, string, error) {
	srv := &http.Server{Handler: everyAnswer(h)}
	if h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	if len(certKey) != 2 {
		return srv, "http", nil
	}
	cert, err := tls.LoadX509KeyPair(certKey[0], certKey[1])
	if err != nil {
		return nil, "", fmt.Errorf("load the certificate: %w", err)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	return srv, "https", nil
}

// everyAnswer sets the header fields that the service sends on every
// answer, beside those of writeBody (sendCeiling's): an X-Request-Id of its
// own, of the shape of the service's (26 characters of base32 from
// math/rand/v2), and Strict-Transport-Security over TLS. A field that
// differs from one answer to the next costs HTTP/2 more than one that does
// not: HPACK sends a field it has sent before as an index.
func everyAnswer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Request-Id"] = []string{requestID()}
		if r.TLS != nil {
			h["Strict-Transport-Security"] = []string{"max-age=31536000"}
		}
		next.ServeHTTP(w, r)
	})
}

// requestID is a fresh request id: 26 characters of RFC 4648's base32
// alphabet, 5 random bits each, made as the service's newRequestID
// (http_observe.go) makes its own, for the same cost: the ceiling cannot
// import the service's package main.
func requestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var id [26]byte
	var bits uint64
	for i := range id {
		if i%12 == 0 { // 12 characters of 5 bits use 60 of a draw's 64
			bits = rand.Uint64()
		}
		id[i] = alphabet[bits&31]
		bits >>= 5
	}
	return string(id[:])
}

// ceilingBodies are the ceiling's answers, encoded once.
type ceilingBodies struct {
	pets, pages [ceilingVariants][]byte // a pet, and a page of 20 from it
	firstPage   []byte                  // the first page of the list
	healthy     []byte                  // the liveness check's
	// An order of the same shape and length as the service's, placed and
	// delivered.
	placed, delivered []byte
}

// newCeilingBodies encodes the ceiling's answers for a table of n pets.
func newCeilingBodies(n int64) *ceilingBodies {
	statuses := []string{"available", "pending", "sold"}
	pet := func(id int64) ceilingPet {
		return ceilingPet{ID: id, Name: fmt.Sprintf("pet-%d", id), CategoryID: id%10 + 1, Status: statuses[id%3]}
	}
	b := &ceilingBodies{}
	for i := range int64(ceilingVariants) {
		// Ids near the top of the table, so the digits are as many as the
		// service's.
		base := max(1, n-ceilingVariants*20) + i
		b.pets[i] = encodeLine(pet(base))
		page := make([]ceilingPet, 20)
		for j := range page {
			page[j] = pet(base + int64(j))
		}
		b.pages[i] = encodeLine(page)
	}
	firstPage := make([]ceilingPet, 20)
	for j := range firstPage {
		firstPage[j] = pet(int64(j + 1))
	}
	b.firstPage = encodeLine(firstPage)
	b.healthy = encodeLine(map[string]string{"status": "ok"})
	// The sell scenario reads the ids from the bodies.
	orderBody := func(id int64, status string) []byte {
		return fmt.Appendf(nil, `{"id":%d,"petId":%d,"status":%q,"placedAt":"2026-11-22T15:20:13.609Z","updatedAt":"2026-11-22T15:20:13.609Z"}`+"\n", id, n, status)
	}
	b.placed, b.delivered = orderBody(n, "placed"), orderBody(n, "delivered")
	return b
}

// encodeLine is v in JSON, with the newline the service's encoder ends a
// body with.
func encodeLine(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}

// sendCeiling writes a JSON answer with the header fields the service's
// writeBody sets (everyAnswer has set the rest).
func sendCeiling(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}

// ceilingMux routes the service's routes that the benchmark loads to
// answers from b, for a table of n pets.
func ceilingMux(n int64, b *ceilingBodies) *http.ServeMux {
	mux := http.NewServeMux()
	// The service's liveness check, which needs no key: what bench https
	// sends once on each new connection.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		sendCeiling(w, http.StatusOK, b.healthy)
	})
	mux.HandleFunc("GET /v1/pets", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("after") == "" {
			w.Header().Set("Link", `</v1/pets?limit=20&after=20>; rel="next"`)
			sendCeiling(w, http.StatusOK, b.firstPage)
			return
		}
		after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
		w.Header().Set("Link", "</v1/pets?limit=20&status="+q.Get("status")+"&after="+strconv.FormatInt(after+60, 10)+`>; rel="next"`)
		sendCeiling(w, http.StatusOK, b.pages[after%ceilingVariants])
	})
	mux.HandleFunc("GET /v1/pets/{petId}", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.PathValue("petId"), 10, 64)
		h := w.Header()
		h.Set("Deprecation", "@1795219200")
		h.Set("Sunset", "Thu, 05 Dec 2030 00:00:00 GMT")
		h.Add("Link", `</v1/openapi.json>; rel="deprecation"; type="application/json", </v1/pets?id=`+strconv.FormatInt(id, 10)+`>; rel="successor-version"`)
		sendCeiling(w, http.StatusOK, b.pets[id%ceilingVariants])
	})
	mux.HandleFunc("POST /v1/pets", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", "/v1/pets/1000001")
		sendCeiling(w, http.StatusCreated, b.pets[0])
	})
	mux.HandleFunc("POST /v1/store/orders", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", "/v1/store/orders/"+strconv.FormatInt(n, 10))
		sendCeiling(w, http.StatusCreated, b.placed)
	})
	mux.HandleFunc("PATCH /v1/store/orders/{orderId}", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sendCeiling(w, http.StatusOK, b.delivered)
	})
	return mux
}

// serveCeiling prints the ceiling's URL line and serves srv on ln (over
// TLS when scheme is https) until SIGTERM or an interrupt closes it.
func serveCeiling(srv *http.Server, ln net.Listener, scheme string) error {
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		srv.Close()
	}()
	fmt.Printf("ceiling listening on %s://%s\n", scheme, ln.Addr())
	var err error
	if scheme == "https" {
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if err != http.ErrServerClosed {
		return err
	}
	return nil
}
