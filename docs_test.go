package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wantReferenceCSP is the policy the reference must carry, written out here
// so that a change to referenceCSP has to change the test too.
const wantReferenceCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// rawGet sends a GET without a key, as a browser does, through a client that
// neither adds Accept-Encoding nor follows redirects, so the test sees the
// answer as sent.
func rawGet(t *testing.T, base, path string, hdr map[string]string) response {
	t.Helper()
	client := &http.Client{
		Transport:     &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req := newRequest(t, base, "GET", path, "", hdr)
	req.Header.Del("Authorization")
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return readResponse(t, res)
}

// strongETag is the ETag of exactly these bytes.
func strongETag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// assetURL finds the files the page loads: /docs/{version}/{file}.
var assetURL = regexp.MustCompile(`(?:href|src)="(/docs/([0-9a-f]{16})/([^"/]+))"`)

func TestReferencePage(t *testing.T) {
	ts := newTestServer(t)
	page := rawGet(t, ts.URL, "/docs", nil)

	t.Run("/docs needs no key and is HTML that is revalidated, under the policy", func(t *testing.T) {
		if page.Status != http.StatusOK {
			t.Fatalf("status %d, body %s", page.Status, page.Body)
		}
		want := map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-cache",
			"Content-Security-Policy": wantReferenceCSP, "X-Content-Type-Options": "nosniff", "ETag": strongETag(page.Body)}
		got := map[string]string{}
		for k := range want {
			got[k] = page.Header.Get(k)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("headers mismatch (-want +got):\n%s", diff)
		}
	})

	// Every file the page names, and the licences that travel with the
	// renderer, are served from the page's version.
	assets := assetURL.FindAllStringSubmatch(string(page.Body), -1)
	var named, guides []string
	for _, m := range assets {
		if strings.HasSuffix(m[3], ".md") {
			guides = append(guides, m[3])
		} else {
			named = append(named, m[3])
		}
	}
	slices.Sort(named)
	if diff := cmp.Diff([]string{"favicon-32x32.png", "index.css", "reference.js", "swagger-ui-bundle.js", "swagger-ui.css"}, named); diff != "" {
		t.Fatalf("files the page loads (-want +got):\n%s", diff)
	}
	version := assets[0][2]
	onDisk := map[string]string{
		"favicon-32x32.png": "reference/swagger-ui/favicon-32x32.png", "index.css": "reference/swagger-ui/index.css",
		"reference.js": "reference/reference.js", "swagger-ui-bundle.js": "reference/swagger-ui/swagger-ui-bundle.js",
		"swagger-ui.css": "reference/swagger-ui/swagger-ui.css", "LICENSE": "reference/swagger-ui/LICENSE",
		"NOTICE": "reference/swagger-ui/NOTICE", "swagger-ui-bundle.js.LICENSE.txt": "reference/swagger-ui/swagger-ui-bundle.js.LICENSE.txt",
	}
	// The page links to the guides of docs/, served as they are in the
	// repository, as text.
	if len(guides) == 0 {
		t.Errorf("the page links to no guide of docs/")
	}
	for _, g := range guides {
		onDisk[g] = "docs/" + g
	}
	types := map[string]string{".md": "text/plain; charset=utf-8", ".png": "image/png", ".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
		".txt": "text/plain; charset=utf-8", "": "text/plain; charset=utf-8"}
	for name, file := range onDisk {
		t.Run(name+" is the file, with its type, kept for a year", func(t *testing.T) {
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			res := rawGet(t, ts.URL, "/docs/"+version+"/"+name, nil)
			if res.Status != http.StatusOK || !bytes.Equal(res.Body, want) {
				t.Fatalf("status %d, %d bytes; want 200 and the %d bytes of %s", res.Status, len(res.Body), len(want), file)
			}
			got := map[string]string{"Content-Type": res.Header.Get("Content-Type"), "Cache-Control": res.Header.Get("Cache-Control"),
				"ETag": res.Header.Get("ETag"), "X-Content-Type-Options": res.Header.Get("X-Content-Type-Options")}
			wantHeaders := map[string]string{"Content-Type": types[filepath.Ext(name)], "Cache-Control": "max-age=31536000, immutable",
				"ETag": strongETag(want), "X-Content-Type-Options": "nosniff"}
			if diff := cmp.Diff(wantHeaders, got); diff != "" {
				t.Errorf("headers mismatch (-want +got):\n%s", diff)
			}
		})
	}

	bundle, err := os.ReadFile("reference/swagger-ui/swagger-ui-bundle.js")
	if err != nil {
		t.Fatal(err)
	}
	gzipped := rawGet(t, ts.URL, "/docs/"+version+"/swagger-ui-bundle.js", map[string]string{"Accept-Encoding": "gzip"})
	plainETag, gzipETag := strongETag(bundle), strongETag(gzipped.Body)
	if plainETag == gzipETag {
		t.Fatalf("the gzip-compressed bundle has the plain bundle's ETag")
	}
	tests := []struct {
		rule           string
		acceptEncoding string
		ifNoneMatch    string
		status         int
		gzip           bool // the answer is gzip-compressed
	}{
		{"no Accept-Encoding gets the plain bytes", "", "", 200, false},
		{"gzip accepted gets them compressed", "gzip", "", 200, true},
		{"gzip among others, any case, gets them compressed", "br;q=1.0, GZIP;q=0.5", "", 200, true},
		{"a star accepts gzip", "*", "", 200, true},
		{"gzip;q=0 refuses gzip", "gzip;q=0", "", 200, false},
		{"gzip;q=0 refuses gzip even with a star", "*, gzip;q=0", "", 200, false},
		{"only identity gets the plain bytes", "identity", "", 200, false},
		{"only br gets the plain bytes", "br", "", 200, false},
		{"the plain ETag is 304 for a client without gzip", "", plainETag, 304, false},
		{"the gzip ETag is 304 for a client with gzip", "gzip", gzipETag, 304, false},
		{"If-None-Match compares weakly", "gzip", "W/" + gzipETag, 304, false},
		{"the plain ETag is not the compressed representation's", "gzip", plainETag, 200, true},
		{"the gzip ETag is not the plain representation's", "", gzipETag, 200, false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := rawGet(t, ts.URL, "/docs/"+version+"/swagger-ui-bundle.js",
				map[string]string{"Accept-Encoding": tt.acceptEncoding, "If-None-Match": tt.ifNoneMatch})
			wantETag, wantEncoding := plainETag, ""
			if tt.gzip || (tt.status == 304 && tt.acceptEncoding != "") {
				wantETag = gzipETag
			}
			if tt.gzip {
				wantEncoding = "gzip"
			}
			got := map[string]string{"ETag": res.Header.Get("ETag"), "Content-Encoding": res.Header.Get("Content-Encoding"),
				"Vary": res.Header.Get("Vary"), "Cache-Control": res.Header.Get("Cache-Control")}
			want := map[string]string{"ETag": wantETag, "Content-Encoding": wantEncoding, "Vary": "Accept-Encoding",
				"Cache-Control": "max-age=31536000, immutable"}
			if diff := cmp.Diff(want, got); diff != "" || res.Status != tt.status {
				t.Errorf("status %d, want %d; headers mismatch (-want +got):\n%s", res.Status, tt.status, diff)
			}
			body := res.Body
			switch {
			case tt.status == http.StatusNotModified:
				if len(body) != 0 {
					t.Errorf("a 304 with a body of %d bytes", len(body))
				}
				return
			case tt.gzip:
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatalf("not gzip: %v", err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatalf("not gzip: %v", err)
				}
			}
			if !bytes.Equal(body, bundle) {
				t.Errorf("the body (%d bytes once decoded) is not the bundle (%d bytes)", len(body), len(bundle))
			}
		})
	}

	t.Run("a HEAD of /docs has the headers and no body", func(t *testing.T) {
		res := ts.do(t, "HEAD", "/docs", "", map[string]string{"Authorization": ""})
		if res.Status != http.StatusOK || len(res.Body) != 0 || res.Header.Get("ETag") != strongETag(page.Body) {
			t.Errorf("status %d, %d bytes, ETag %q", res.Status, len(res.Body), res.Header.Get("ETag"))
		}
	})
	t.Run("/ sends a browser to /docs, without a key", func(t *testing.T) {
		res := rawGet(t, ts.URL, "/", nil)
		got := map[string]any{"status": res.Status, "Location": res.Header.Get("Location"), "body": string(res.Body)}
		if diff := cmp.Diff(map[string]any{"status": http.StatusFound, "Location": "/docs", "body": ""}, got); diff != "" {
			t.Errorf("GET / mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("a file of another version is 404 in JSON, and says to reload", func(t *testing.T) {
		wantError(t, rawGet(t, ts.URL, "/docs/0123456789abcdef/swagger-ui.css", nil), http.StatusNotFound, codeNotFound, "reload /docs")
	})
	t.Run("a file the reference does not have is 404 in JSON", func(t *testing.T) {
		wantError(t, rawGet(t, ts.URL, "/docs/"+version+"/openapi.go", nil), http.StatusNotFound, codeNotFound)
		wantError(t, rawGet(t, ts.URL, "/docs/"+version+"/vendored.json", nil), http.StatusNotFound, codeNotFound)
	})
	t.Run("only GET and HEAD: POST /docs is 405 with the key, 401 without", func(t *testing.T) {
		res := ts.do(t, "POST", "/docs", "", nil)
		wantError(t, res, http.StatusMethodNotAllowed, codeMethodNotAllowed)
		if got := res.Header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("Allow = %q, want GET, HEAD", got)
		}
		wantError(t, ts.do(t, "POST", "/docs", "", map[string]string{"Authorization": ""}), http.StatusUnauthorized, codeUnauthorized)
	})
	t.Run("paths beside the reference still need the key", func(t *testing.T) {
		for _, p := range []string{"/docs/", "/docs/" + version, "/docs/" + version + "/x/y", "/index.html"} {
			wantError(t, rawGet(t, ts.URL, p, nil), http.StatusUnauthorized, codeUnauthorized)
		}
	})
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		rule   string
		fields []string
		want   bool
	}{
		{"no field: the plain bytes, which every client reads", nil, false},
		{"gzip", []string{"gzip"}, true},
		{"codings are case-insensitive", []string{"GZip"}, true},
		{"x-gzip is gzip", []string{"x-gzip"}, true},
		{"in a list with weights", []string{"deflate, gzip;q=1.0, br"}, true},
		{"spaces around the weight", []string{"gzip ; q=0.5"}, true},
		{"in a second field line", []string{"br", "gzip"}, true},
		{"q=0 refuses", []string{"gzip;q=0"}, false},
		{"q=0.000 refuses", []string{"gzip;q=0.000"}, false},
		{"a weight that is not a number refuses", []string{"gzip;q=x"}, false},
		{"a weight above 1 refuses", []string{"gzip;q=2"}, false},
		{"a star accepts", []string{"*"}, true},
		{"a star with q=0 refuses", []string{"*;q=0"}, false},
		{"gzip named with q=0 wins over a star", []string{"*, gzip;q=0"}, false},
		{"gzip named wins over a star with q=0", []string{"*;q=0, gzip"}, true},
		{"identity only", []string{"identity"}, false},
		{"empty", []string{""}, false},
		{"a coding that only starts like gzip", []string{"gzipped"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if got := acceptsGzip(tt.fields); got != tt.want {
				t.Errorf("acceptsGzip(%q) = %v, want %v", tt.fields, got, tt.want)
			}
		})
	}
}

func TestBuildReferenceSite(t *testing.T) {
	base := fstest.MapFS{
		"reference/index.html":            {Data: []byte(`<script src="/docs/{{version}}/a.js"></script>`)},
		"reference/a.js":                  {Data: []byte("a")},
		"reference/swagger-ui/b.css":      {Data: []byte("b")},
		"reference/swagger-ui/LICENSE":    {Data: []byte("licence")},
		"reference/swagger-ui/icon.png":   {Data: []byte("png")},
		"reference/swagger-ui/notes.txt":  {Data: []byte("notes")},
		"reference/swagger-ui/sub/x.html": {Data: []byte("a directory is not served")},
		"docs/guide.md":                   {Data: []byte("# A guide")},
	}
	with := func(name, data string) fstest.MapFS {
		fsys := fstest.MapFS{}
		for k, v := range base {
			fsys[k] = v
		}
		if data == "" {
			delete(fsys, name)
		} else {
			fsys[name] = &fstest.MapFile{Data: []byte(data)}
		}
		return fsys
	}
	site, err := buildReferenceSite(base)
	if err != nil {
		t.Fatalf("build: %v", err)
	}

	t.Run("the page names its files by the version", func(t *testing.T) {
		want := `<script src="/docs/` + site.version + `/a.js"></script>`
		if diff := cmp.Diff(want, string(site.page.body)); diff != "" {
			t.Errorf("page mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"LICENSE", "a.js", "b.css", "guide.md", "icon.png", "notes.txt"}, slices.Sorted(maps.Keys(site.files))); diff != "" {
			t.Errorf("files mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the same files give the same version", func(t *testing.T) {
		again, err := buildReferenceSite(with("reference/a.js", "a"))
		if err != nil || again.version != site.version {
			t.Errorf("version %q (err %v), want %q", again.version, err, site.version)
		}
	})
	t.Run("a changed file, even the renderer's, changes the version", func(t *testing.T) {
		for _, name := range []string{"reference/a.js", "reference/swagger-ui/b.css"} {
			changed, err := buildReferenceSite(with(name, "changed"))
			if err != nil || changed.version == site.version {
				t.Errorf("%s changed: version %q (err %v), want another than %q", name, changed.version, err, site.version)
			}
		}
	})
	t.Run("a small file is not compressed, a compressible one is", func(t *testing.T) {
		big, err := buildReferenceSite(with("reference/swagger-ui/b.css", strings.Repeat("body { margin: 0 }\n", 200)))
		if err != nil {
			t.Fatal(err)
		}
		if site.files["b.css"].gzipped != nil || big.files["b.css"].gzipped == nil {
			t.Errorf("gzipped: small %v, big %v; want only the big one", site.files["b.css"].gzipped != nil, big.files["b.css"].gzipped != nil)
		}
	})
	for _, tt := range []struct {
		rule string
		fsys fstest.MapFS
	}{
		{"a page that never names the version", with("reference/index.html", `<script src="/docs/a.js"></script>`)},
		{"a file without a known type", with("reference/swagger-ui/font.woff2", "font")},
		{"the same name in both directories", with("reference/swagger-ui/a.js", "other")},
		{"no page", with("reference/index.html", "")},
	} {
		t.Run(tt.rule+" is refused", func(t *testing.T) {
			if _, err := buildReferenceSite(tt.fsys); err == nil {
				t.Errorf("built without an error")
			}
		})
	}
}

// vendoredRecord is reference/vendored.json.
type vendoredRecord struct {
	Comment   string            `json:"comment"`
	Package   string            `json:"package"`
	Version   string            `json:"version"`
	License   string            `json:"license"`
	Integrity string            `json:"integrity"`
	Files     map[string]string `json:"files"`
}

// TestReferenceVendoredFiles holds the renderer's files to what
// reference/npm/vendor.sh wrote: the package and version the lockfile pins,
// and each file's checksum. A hand edit, a file added or left behind, or a
// lockfile moved without running the script fails it.
func TestReferenceVendoredFiles(t *testing.T) {
	var record vendoredRecord
	readJSON(t, "reference/vendored.json", &record)
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, "reference/npm/package.json", &pkg)
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	readJSON(t, "reference/npm/package-lock.json", &lock)

	t.Run("package.json pins one exact version, the one vendored", func(t *testing.T) {
		if diff := cmp.Diff(map[string]string{record.Package: record.Version}, pkg.Dependencies); diff != "" {
			t.Errorf("dependencies mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the lockfile's package is the one vendored", func(t *testing.T) {
		locked := lock.Packages["node_modules/"+record.Package]
		got := []string{locked.Version, locked.Integrity}
		if diff := cmp.Diff([]string{record.Version, record.Integrity}, got); diff != "" || locked.Integrity == "" {
			t.Errorf("version and integrity mismatch (-vendored.json +package-lock.json):\n%s", diff)
		}
	})
	t.Run("the files are those vendored, unchanged", func(t *testing.T) {
		entries, err := os.ReadDir("reference/swagger-ui")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join("reference/swagger-ui", e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			got[e.Name()] = hex.EncodeToString(sum[:])
		}
		if diff := cmp.Diff(record.Files, got); diff != "" {
			t.Errorf("reference/swagger-ui differs from vendored.json (-recorded +on disk); run reference/npm/vendor.sh:\n%s", diff)
		}
	})
}

// readJSON decodes the JSON file at path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestStartUpNamesTheReference reads what run prints once it listens: the
// launch contract's line, unchanged and first, then where the reference is.
func TestStartUpNamesTheReference(t *testing.T) {
	env := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": ":memory:", "PETSTORE_API_KEYS": testKey}
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, nil, func(k string) string { return env[k] }, strings.NewReader(""), stdoutW, io.Discard)
		stdoutW.CloseWithError(err)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("run did not return within 15s of cancellation")
		}
	})
	stdout := bufio.NewReader(stdoutR)
	var lines []string
	for range 2 {
		line, err := stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("stdout after %q: %v", lines, err)
		}
		lines = append(lines, line)
	}
	go io.Copy(io.Discard, stdout)
	m := urlLine.FindStringSubmatch(strings.TrimSuffix(lines[0], "\n"))
	if m == nil {
		t.Fatalf("first line %q does not match %v", lines[0], urlLine)
	}
	if want := "petstore API reference on " + m[1] + "/docs\n"; lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	if res := rawGet(t, m[1], "/docs", nil); res.Status != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("the printed reference answers %d %q", res.Status, res.Header.Get("Content-Type"))
	}
}

// BenchmarkBuildReferenceSite measures what the first request for the
// reference costs, once per process: digests and compression of its files.
func BenchmarkBuildReferenceSite(b *testing.B) {
	for b.Loop() {
		if _, err := buildReferenceSite(referenceFiles); err != nil {
			b.Fatal(err)
		}
	}
}
