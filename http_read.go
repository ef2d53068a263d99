package main

import (
	"context"
	"log/slog"
	"net/http"
)

// The read operations of every resource share one shape, served here: a
// list is a keyset page of a query, an item is a row by id, and both are
// answered from the resource's response cache while it holds them (see
// http_cache.go).

// handleList serves a list operation: it parses the query by spec, reads a
// page through cache (past it for a query with an id filter, whose lists of
// ids are too many to keep), and answers the encoded page and its Link.
func handleList[T any](log *slog.Logger, spec listSpec, cache *responseCache, read func(ctx context.Context, q listQuery) (page[T], error), encode func([]T) []byte, idOf func(T) int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseListQuery(r.URL.RawQuery, spec)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		fill := func() (cachedPage, error) {
			items, err := read(r.Context(), q)
			if err != nil {
				return cachedPage{}, err
			}
			p := cachedPage{body: encode(items.items), more: items.more}
			if items.more {
				p.link = spec.nextLink(q, idOf(items.items[len(items.items)-1]))
			}
			return p, nil
		}
		var p cachedPage
		if q.ids != nil {
			p, err = fill()
		} else {
			p, err = cache.page(cacheKey{id: q.page.after, limit: q.page.limit, filter: q.status}, fill)
		}
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		if p.link != "" {
			w.Header().Set("Link", p.link)
		}
		writeBody(w, http.StatusOK, p.body)
	})
}

// handleItem serves the read of one row: idOf takes its id from the path
// (answering 404 itself for one that cannot exist), and read returns its
// encoded body, through cache.
func handleItem(log *slog.Logger, cache *responseCache, idOf func(http.ResponseWriter, *http.Request, *slog.Logger) (int64, bool), read func(ctx context.Context, id int64) ([]byte, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := idOf(w, r, log)
		if !ok {
			return
		}
		body, err := cache.item(id, func() ([]byte, error) { return read(r.Context(), id) })
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeBody(w, http.StatusOK, body)
	})
}
