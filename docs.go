package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// referenceFiles is the API reference page served at /docs: the page and its
// script, and the renderer's files, which reference/npm/vendor.sh copies
// unchanged from the npm package that reference/npm/package-lock.json pins
// (reference/vendored.json records which), and the guides of docs/, which the
// page links to where a reader needs more than the document says. See
// docs/api.md, "API reference page", and docs/development.md.
//
//go:embed reference/index.html reference/reference.js reference/swagger-ui docs/*.md
var referenceFiles embed.FS

// referenceCSP is the Content-Security-Policy of the reference: scripts,
// styles and every request (the document, "Try it out") come from this
// origin only. data: images are the renderer's icons, which its stylesheet
// carries inline as data: URLs; they are not requests. Nothing needs
// 'unsafe-inline' or 'unsafe-eval'. The page may not be framed (it takes a
// key), and has no forms to post anywhere.
const referenceCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// The Cache-Control of the reference. The page names the current version of
// its files, so it is revalidated on every visit (one 304 when nothing
// changed); a file's URL changes whenever any file does, so a file can be
// kept for a year.
const (
	referencePageCaching = "no-cache"
	referenceFileCaching = "max-age=31536000, immutable"
)

// versionPlaceholder is where index.html names the version of its files.
const versionPlaceholder = "{{version}}"

// referenceType is the Content-Type of a file of the reference, by its
// name. A file of another kind is refused when the site is built: the types
// come from here, not from the machine's MIME database.
func referenceType(name string) (string, bool) {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".png":
		return "image/png", true
	case ".txt", "": // the licence texts: LICENSE, NOTICE, *.LICENSE.txt
		return "text/plain; charset=utf-8", true
	case ".md":
		// The guides of docs/, shown as text: browsers display text/plain,
		// where some would download text/markdown.
		return "text/plain; charset=utf-8", true
	}
	return "", false
}

// referenceSite is the reference ready to serve: the page, and the files it
// loads from /docs/{version}/{file}.
type referenceSite struct {
	version string
	page    *staticFile
	files   map[string]*staticFile
}

// staticFile is one file of the reference with its headers worked out.
type staticFile struct {
	body, gzipped  []byte // gzipped is nil when compression saves too little
	etag, gzipETag string // strong: each names its exact bytes
	contentType    string
	cacheControl   string
}

// newReferenceSite returns a function that builds the site on its first call
// and returns the same site afterwards. Building hashes and compresses about
// 2 MB, so it waits for the first request for the reference: starting the
// service, and the API's requests, never pay for it.
func newReferenceSite() func() (*referenceSite, error) {
	return sync.OnceValues(func() (*referenceSite, error) { return buildReferenceSite(referenceFiles) })
}

// buildReferenceSite reads the page and its files from fsys (laid out as
// referenceFiles is). The version in the files' URLs is a digest of every
// file, so it changes whenever one of them does.
func buildReferenceSite(fsys fs.FS) (*referenceSite, error) {
	files := map[string][]byte{}
	for _, dir := range []string{"reference", "reference/swagger-ui", "docs"} {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() || (dir == "reference" && e.Name() == "index.html") {
				continue
			}
			if _, dup := files[e.Name()]; dup {
				return nil, fmt.Errorf("reference: two files named %s", e.Name())
			}
			b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("reference: %w", err)
			}
			files[e.Name()] = b
		}
	}
	page, err := fs.ReadFile(fsys, "reference/index.html")
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	if !bytes.Contains(page, []byte(versionPlaceholder)) {
		return nil, fmt.Errorf("reference: index.html never names %s", versionPlaceholder)
	}

	digest := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		sum := sha256.Sum256(files[name])
		fmt.Fprintf(digest, "%s %x\n", name, sum)
	}
	site := &referenceSite{version: hex.EncodeToString(digest.Sum(nil))[:16], files: map[string]*staticFile{}}
	for name, b := range files {
		if site.files[name], err = newStaticFile(name, b, referenceFileCaching); err != nil {
			return nil, err
		}
	}
	page = bytes.ReplaceAll(page, []byte(versionPlaceholder), []byte(site.version))
	if site.page, err = newStaticFile("index.html", page, referencePageCaching); err != nil {
		return nil, err
	}
	return site, nil
}

// newStaticFile works out how to serve the file name holding b.
func newStaticFile(name string, b []byte, cacheControl string) (*staticFile, error) {
	ct, ok := referenceType(name)
	if !ok {
		return nil, fmt.Errorf("reference: no Content-Type for %s", name)
	}
	sum := sha256.Sum256(b)
	f := &staticFile{body: b, etag: `"` + hex.EncodeToString(sum[:]) + `"`, contentType: ct, cacheControl: cacheControl}
	if ct == "image/png" {
		return f, nil // already compressed
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("reference: compress %s: %w", name, err)
	}
	// Compression is worth a second representation only when it saves at
	// least a tenth (and a few hundred bytes).
	if buf.Len() < len(b)-len(b)/10 && len(b)-buf.Len() > 500 {
		f.gzipped = buf.Bytes()
		zsum := sha256.Sum256(f.gzipped)
		f.gzipETag = `"` + hex.EncodeToString(zsum[:]) + `"`
	}
	return f, nil
}

// serve answers r with the file: gzip-compressed when the client accepts it
// and compression pays, 304 when the client's copy is current.
func (f *staticFile) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	body, etag := f.body, f.etag
	if f.gzipped != nil {
		// Caches must keep the two representations apart.
		h.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Values("Accept-Encoding")) {
			body, etag = f.gzipped, f.gzipETag
			h.Set("Content-Encoding", "gzip")
		}
	}
	h.Set("ETag", etag)
	h.Set("Cache-Control", f.cacheControl)
	h.Set("Content-Security-Policy", referenceCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	if etagMatches(r.Header.Values("If-None-Match"), etag) {
		h.Del("Content-Encoding")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// acceptsGzip reports whether Accept-Encoding field values accept gzip: gzip
// (or x-gzip, or *) listed with a weight above zero (RFC 9110, section
// 12.5.3). No field at all accepts anything, but answering an unnamed
// encoding to a client that did not ask for one is a surprise; the plain
// bytes it gets are never wrong.
func acceptsGzip(fieldValues []string) bool {
	gzipQ, starQ := -1.0, -1.0
	for _, v := range fieldValues {
		for elem := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(elem, ";")
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					parsed, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
					if err != nil || parsed < 0 || parsed > 1 {
						parsed = 0 // a weight that is not one refuses, to be safe
					}
					q = parsed
				}
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "*":
				starQ = max(starQ, q)
			}
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// handleReferencePage serves GET /docs, without a key: the page a person
// opens.
func handleReferencePage(log *slog.Logger, site func() (*referenceSite, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := site()
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		s.page.serve(w, r)
	})
}

// handleReferenceFile serves GET /docs/{version}/{file}, without a key: the
// files the page loads. Only the current version is served; a page older
// than the running service reloads to get it.
func handleReferenceFile(log *slog.Logger, site func() (*referenceSite, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := site()
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		f := s.files[r.PathValue("file")]
		if r.PathValue("version") != s.version || f == nil {
			writeError(w, r, log, errorf(codeNotFound, "no file %q in this version of the API reference; reload /docs",
				abbreviate(r.PathValue("version")+"/"+r.PathValue("file"))))
			return
		}
		f.serve(w, r)
	})
}

// handleRoot serves GET / by sending a browser, or anyone, to the API
// reference. The redirect is temporary: / may serve something else one day,
// and a browser keeps a permanent redirect for good.
func handleRoot() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/docs")
		w.WriteHeader(http.StatusFound)
	})
}
