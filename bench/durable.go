package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	_ "modernc.org/sqlite"
)

// durableBare is the least a durable create costs on this stack: net/http
// and the service's SQLite driver (modernc), the file in WAL mode with
// synchronous=FULL, creates group-committed by one writer (every create
// waiting at a commit goes in it), one row a create, and nothing else: no
// key, no validation beyond decoding, no event, no cache, no log. The
// service's creates are measured against it (bench https, bench create
// rows), as its reads are against the bare ceiling.
const durableSchema = `CREATE TABLE IF NOT EXISTS pets (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	name TEXT NOT NULL,
	category_id INTEGER NOT NULL,
	status TEXT NOT NULL
) STRICT`

// durableCreate is one create waiting for the writer.
type durableCreate struct {
	name     string
	category int64
	status   string
	id       int64
	err      error
	done     chan struct{}
}

// runDurable is `bench durable ADDR DB [h2c | CERT KEY]`: durable bare on
// the SQLite file DB, over plain HTTP/1.1 (and h2c with h2c), or over TLS
// with the certificate and key, with the ceiling's TLS settings.
func runDurable(args []string) error {
	h2c := len(args) == 3 && args[2] == "h2c"
	if len(args) != 2 && len(args) != 4 && !h2c {
		return fmt.Errorf("usage: bench durable ADDR DB [h2c | CERT KEY]")
	}
	db, err := sql.Open("sqlite", args[1]+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(durableSchema); err != nil {
		return err
	}
	creates := make(chan *durableCreate, 256)
	go durableWriter(db, creates)
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	srv, scheme, err := bareServer(durableMux(creates), h2c, args[2:])
	if err != nil {
		return err
	}
	return serveCeiling(srv, ln, scheme)
}

// durableMux answers POST /v1/pets, durably, and the liveness check.
func durableMux(creates chan<- *durableCreate) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		sendCeiling(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
	})
	mux.HandleFunc("POST /v1/pets", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Name       string `json:"name"`
			CategoryID int64  `json:"categoryId"`
			Status     string `json:"status"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil {
			sendCeiling(w, http.StatusBadRequest, []byte(`{"code":"invalid_body"}`+"\n"))
			return
		}
		if in.Status == "" {
			in.Status = "available"
		}
		c := &durableCreate{name: in.Name, category: in.CategoryID, status: in.Status, done: make(chan struct{})}
		creates <- c
		<-c.done
		if c.err != nil {
			sendCeiling(w, http.StatusInternalServerError, []byte(`{"code":"internal"}`+"\n"))
			return
		}
		out := ceilingPet{ID: c.id, Name: c.name, CategoryID: c.category, Status: c.status}
		w.Header().Set("Location", "/v1/pets/"+strconv.FormatInt(c.id, 10))
		sendCeiling(w, http.StatusCreated, encodeLine(out))
	})
	return mux
}

// durableWriter commits the creates: each batch is every create waiting
// when the last commit ended, in one transaction.
func durableWriter(db *sql.DB, creates <-chan *durableCreate) {
	batch := make([]*durableCreate, 0, 256)
	for c := range creates {
		batch = append(batch[:0], c)
	drain:
		for len(batch) < cap(batch) {
			select {
			case c := <-creates:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		err := durableCommit(db, batch)
		for _, c := range batch {
			if c.err == nil {
				c.err = err
			}
			close(c.done)
		}
	}
}

// durableCommit inserts the batch's rows in one transaction.
func durableCommit(db *sql.DB, batch []*durableCreate) error {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING id")
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, c := range batch {
		c.err = stmt.QueryRowContext(ctx, c.name, c.category, c.status).Scan(&c.id)
	}
	return tx.Commit()
}
