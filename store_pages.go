package main

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// Keyset pages on PostgreSQL, with their LIMIT written out.
//
// A page's statement ends in LIMIT ?, the page size plus one. PostgreSQL
// plans a prepared statement for each execution's values until the plan made
// once for every value looks as cheap, and it estimates that a LIMIT
// parameter keeps a tenth of the rows the rest of the statement leaves: past
// about ten thousand rows that plan never looks as cheap, so every page was
// planned again, about a quarter of the first page's throughput at a million
// pets. With the LIMIT written out, the plan made once costs what it is, and
// PostgreSQL keeps it after its first five executions, as it does for small
// tables; it still chooses, so a filtered page whose best plan depends on the
// value keeps plans made for each value. One statement per page size, made on
// the first page of that size; clients ask for a handful of sizes. SQLite
// plans every statement once whatever its LIMIT, and keeps the parameter.
// Every LIMIT ? of a page statement is the page's size: the type filter of
// the events (listEventsOfTypes) reads at most a page of each type, and
// all of its LIMITs are written out.

// maxSizedPages bounds the statements of written-out LIMITs kept, for all
// page statements together; past it a page runs with its LIMIT a parameter.
const maxSizedPages = 64

// pageStatements are the statements of pages with their LIMIT written out.
type pageStatements struct {
	mu     sync.Mutex
	text   map[*sql.Stmt]string // a page statement's SQL, with its LIMIT ?s
	sized  map[sizedPage]*sql.Stmt
	closed bool
}

// sizedPage is a page statement with its LIMITs written out as rows.
type sizedPage struct {
	stmt *sql.Stmt
	rows int
}

// addPage records stmt, prepared from query on the read pool of PostgreSQL,
// as a page statement when its last parameter is its LIMIT.
func (p *pageStatements) addPage(stmt *sql.Stmt, query string) {
	if !strings.HasSuffix(query, " LIMIT ?") {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.text == nil {
		p.text = map[*sql.Stmt]string{}
		p.sized = map[sizedPage]*sql.Stmt{}
	}
	p.text[stmt] = query
}

// pageStatement returns stmt's statement with its LIMITs written out as
// rows, and true; or stmt and false (they stay parameters) for a statement
// that is no PostgreSQL page, past maxSizedPages, or when the statement could
// not be prepared (the page then runs as before, and tells of any trouble).
func (s *store) pageStatement(ctx context.Context, stmt *sql.Stmt, rows int) (*sql.Stmt, bool) {
	if s.dialect != postgresDialect {
		return stmt, false
	}
	p := &s.pages
	key := sizedPage{stmt, rows}
	p.mu.Lock()
	text, isPage := p.text[stmt]
	sized, ok := p.sized[key]
	full := len(p.sized) >= maxSizedPages
	p.mu.Unlock()
	switch {
	case ok:
		return sized, true
	case !isPage || full:
		return stmt, false
	}
	prepared, err := s.reader.PrepareContext(ctx, s.dialect.sql(strings.ReplaceAll(text, " LIMIT ?", " LIMIT "+strconv.Itoa(rows))))
	if err != nil {
		return stmt, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sized, ok := p.sized[key]; ok {
		prepared.Close() // another page of this size made it meanwhile
		return sized, true
	}
	if p.closed || len(p.sized) >= maxSizedPages {
		prepared.Close()
		return stmt, false
	}
	p.sized[key] = prepared
	return prepared, true
}

// close closes the statements made, and makes no more.
func (p *pageStatements) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, stmt := range p.sized {
		stmt.Close()
	}
	clear(p.sized)
}
