package main

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// newServerWithKeyFile is newTestServer for keys with scopes and expiry: the
// service accepts the keys of a key file holding content, read as the
// service reads -api-keys-file (ts.KeyFile, which ts.Keys.reload reads
// again), and reads the time from now. Keys do not depend on the database,
// so it runs on SQLite only. Of opts, withLimits and withFeed apply.
func newServerWithKeyFile(t *testing.T, content string, now func() time.Time, opts ...serverOption) *testServer {
	t.Helper()
	cfg := serverConfig{limits: limits{idempotencyTTL: defaultIdempotencyTTL}, events: defaultFeedConfig()}
	for _, o := range opts {
		o(&cfg)
	}
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := loadKeyring("", file, testSecret)
	if err != nil {
		t.Fatalf("loadKeyring: %v", err)
	}
	dbPath := filepath.Join(t.TempDir(), "pets.db")
	st, err := openStore(t.Context(), dbPath, 0)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	logBuf := &syncBuffer{}
	events := newFeed(slogTo(logBuf), st, kr, cfg.events, now)
	h := newServer(slogTo(logBuf), kr, st, newMetrics(st), events, now, cfg.limits)
	srv := startTestHTTP(t, h)
	t.Cleanup(srv.Close)
	t.Cleanup(events.stop) // before the server closes: a stream ends only when the feed stops
	return &testServer{URL: srv.URL, DBPath: dbPath, Store: st, Handler: h, Log: logBuf, Feed: events, Keys: kr, KeyFile: file}
}

// routeTable is the service's route table, over a store of its own.
func routeTable(t *testing.T) []route {
	t.Helper()
	st, err := openStore(t.Context(), filepath.Join(t.TempDir(), "pets.db"), 0)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return routes(slogTo(io.Discard), st, newMetrics(st), newFeed(slogTo(io.Discard), st, staticKeyring(testKey), defaultFeedConfig(), time.Now), newIdempotency(st, defaultIdempotencyTTL, time.Now), time.Now)
}

// scopeKey is the key that the scopes test gives the single scope s.
func scopeKey(s scope) string {
	return "key-for-" + strings.ReplaceAll(string(s), "*", "star") + "-0123456789"
}

// TestEachOperationNeedsItsScope calls every operation with a key of each
// single scope: the keys whose scope grants the operation's are served, all
// others get 403 insufficient_scope naming the scope, with RFC 6750's
// header. The operations are the rows of the route table, so a route added
// without a row here fails.
func TestEachOperationNeedsItsScope(t *testing.T) {
	t.Parallel()
	var file strings.Builder
	for _, s := range knownScopes() {
		fmt.Fprintf(&file, "%s %s scopes=%s\n", scopeKey(s), strings.NewReplacer(":", "-", "*", "star").Replace(string(s)), s)
	}
	const allKey = "key-without-scopes-0123456789"
	fmt.Fprintf(&file, "%s everything\n", allKey)
	ts := newServerWithKeyFile(t, file.String(), time.Now)
	admin := bearer(allKey)

	newPet := func() int64 {
		t.Helper()
		return decode[Pet](t, ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, admin)).ID
	}
	newOrder := func() int64 {
		t.Helper()
		return decode[Order](t, ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, newPet()), admin)).ID
	}
	pet, order := newPet(), newOrder()
	// Subscriptions point at a documentation address, which the outbound
	// guard refuses before any packet is sent.
	newHook := func() int64 {
		t.Helper()
		var h struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(ts.do(t, "POST", "/v1/webhooks", `{"url":"https://192.0.2.10/hook"}`, admin).Body, &h); err != nil || h.ID == 0 {
			t.Fatalf("create a subscription: %v", err)
		}
		return h.ID
	}
	hook := newHook()
	// Each operation is called with a fresh target where a call changes
	// it: a pet removed, a pet ordered or an order delivered is gone for
	// the next call.
	type call func() (method, path, body string)
	ops := map[string]struct {
		need scope // as the issue lists them
		call call
	}{
		"listPets":   {scopePetsRead, func() (string, string, string) { return "GET", "/v1/pets", "" }},
		"createPet":  {scopePetsWrite, func() (string, string, string) { return "POST", "/v1/pets", `{"name":"Rex","categoryId":1}` }},
		"getPet":     {scopePetsRead, func() (string, string, string) { return "GET", fmt.Sprintf("/v1/pets/%d", pet), "" }},
		"updatePet":  {scopePetsWrite, func() (string, string, string) { return "PATCH", fmt.Sprintf("/v1/pets/%d", pet), `{"name":"Max"}` }},
		"deletePet":  {scopePetsWrite, func() (string, string, string) { return "DELETE", fmt.Sprintf("/v1/pets/%d", newPet()), "" }},
		"listOrders": {scopeOrdersRead, func() (string, string, string) { return "GET", "/v1/store/orders", "" }},
		"placeOrder": {scopeOrdersWrite, func() (string, string, string) {
			return "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, newPet())
		}},
		"getOrder": {scopeOrdersRead, func() (string, string, string) { return "GET", fmt.Sprintf("/v1/store/orders/%d", order), "" }},
		"updateOrder": {scopeOrdersWrite, func() (string, string, string) {
			return "PATCH", fmt.Sprintf("/v1/store/orders/%d", newOrder()), `{"status":"delivered"}`
		}},
		"getMetrics":        {scopeAll, func() (string, string, string) { return "GET", "/metrics", "" }},
		"listEvents":        {scopeEventsRead, func() (string, string, string) { return "GET", "/v1/events", "" }},
		"createEventTicket": {scopeEventsRead, func() (string, string, string) { return "POST", "/v1/events/tickets", "" }},
		"createWebhook": {scopeWebhooksWrite, func() (string, string, string) {
			return "POST", "/v1/webhooks", `{"url":"https://192.0.2.10/hook"}`
		}},
		"listWebhooks": {scopeWebhooksWrite, func() (string, string, string) { return "GET", "/v1/webhooks", "" }},
		"getWebhook":   {scopeWebhooksWrite, func() (string, string, string) { return "GET", fmt.Sprintf("/v1/webhooks/%d", hook), "" }},
		"updateWebhook": {scopeWebhooksWrite, func() (string, string, string) {
			return "PATCH", fmt.Sprintf("/v1/webhooks/%d", hook), `{"description":"changed"}`
		}},
		"deleteWebhook": {scopeWebhooksWrite, func() (string, string, string) {
			return "DELETE", fmt.Sprintf("/v1/webhooks/%d", newHook()), ""
		}},
		"rotateWebhookSecret": {scopeWebhooksWrite, func() (string, string, string) {
			return "POST", fmt.Sprintf("/v1/webhooks/%d/secret", hook), ""
		}},
		"listWebhookDeliveries": {scopeWebhooksWrite, func() (string, string, string) {
			return "GET", fmt.Sprintf("/v1/webhooks/%d/deliveries", hook), ""
		}},
	}
	for _, rt := range routeTable(t) {
		if rt.scope == noKey {
			continue
		}
		op, ok := ops[rt.operation]
		if !ok {
			t.Errorf("the route %s (%s) needs a key, and this test does not call it", rt.pattern, rt.operation)
			continue
		}
		if rt.scope != op.need {
			t.Errorf("the route %s (%s) needs %q, want %q", rt.pattern, rt.operation, rt.scope, op.need)
		}
		holders := map[string]scopeSet{allKey: everyScope}
		for _, s := range knownScopes() {
			holders[scopeKey(s)] = s.grants()
		}
		for _, key := range slices.Sorted(maps.Keys(holders)) {
			held := holders[key]
			allowed := held.has(rt.scope)
			t.Run(fmt.Sprintf("%s with %s", rt.operation, key), func(t *testing.T) {
				method, path, body := op.call()
				res := ts.do(t, method, path, body, bearer(key))
				if allowed && rt.operation == "createWebhook" && !held.has(scopePetsRead) && !held.has(scopeOrdersRead) {
					// Past the scope check, a subscription is refused
					// when its key may read no event it would deliver.
					wantError(t, res, http.StatusBadRequest, codeInvalidField, "may read none")
					return
				}
				if allowed && strings.Contains(path, "/v1/webhooks/") && !(held.has(scopePetsRead) && held.has(scopeOrdersRead)) {
					// Past the scope check, a subscription is managed only
					// by a key that may read every type it delivers (this
					// one delivers every type): to any other it is not there.
					wantError(t, res, http.StatusNotFound, codeNotFound)
					return
				}
				if allowed {
					if res.Status >= 300 {
						t.Errorf("%s %s: status %d, want 2xx (the key's scopes grant %s); body %s", method, path, res.Status, rt.scope, res.Body)
					}
					return
				}
				wantError(t, res, http.StatusForbidden, codeInsufficientScope, string(rt.scope))
				want := fmt.Sprintf(`Bearer error="insufficient_scope", scope="%s"`, rt.scope)
				if got := res.Header.Get("WWW-Authenticate"); got != want {
					t.Errorf("WWW-Authenticate = %q, want %q", got, want)
				}
			})
		}
	}
	t.Run("a 403 is logged with the outcome forbidden and counted by caller and scope", func(t *testing.T) {
		var forbidden int
		for _, r := range ts.Log.find(t, "INFO", "request") {
			if status := fmt.Sprint(r["status"]); status == "403" {
				forbidden++
				if r.field("outcome") != "forbidden" || r.field("caller") == "" {
					t.Errorf("the access line of a 403 lacks outcome forbidden or its caller: %v", r)
				}
			} else if r.field("outcome") != "" {
				t.Errorf("the access line of a %s has an outcome: %v", status, r)
			}
		}
		if forbidden == 0 {
			t.Fatalf("no access line of a 403")
		}
		body := ts.do(t, "GET", "/metrics", "", admin).Body
		if got := metricValue(t, body, "petstore_forbidden_total", map[string]string{"caller": "pets-read", "scope": "*"}); got != 1 {
			t.Errorf("petstore_forbidden_total{caller=pets-read,scope=*} = %v, want 1", got)
		}
	})
}

// TestRoutesAreTheDocumentsSecurity holds the route table and the API
// document to the same answer to "who may do what": each operation's
// security requirement lists exactly the scope of its route, the operations
// without a key are the routes without one, and no /v1 route lacks a
// declared scope.
func TestRoutesAreTheDocumentsSecurity(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	documented := map[string]string{} // "METHOD /path" -> operation: scope
	for path, item := range doc.Paths.Map() {
		if path != "/healthz" && path != "/readyz" && path != "/metrics" {
			path = "/v1" + path
		}
		for method, op := range item.Operations() {
			need := "(no security requirement)"
			switch sec := op.Security; {
			case sec == nil:
			case len(*sec) == 0:
				need = string(noKey)
			case len(*sec) == 1 && len((*sec)[0]) == 1 && len((*sec)[0]["bearerAuth"]) == 1:
				need = (*sec)[0]["bearerAuth"][0]
			case len(*sec) == 2 && len((*sec)[0]["bearerAuth"]) == 1 && len((*sec)[1]) == 1 && (*sec)[1]["eventTicket"] != nil:
				// A ticket carries the rights of the key that asked for
				// it, so the key's scope is the route's.
				need = (*sec)[0]["bearerAuth"][0] + " (or a ticket)"
			default:
				need = fmt.Sprintf("(not one bearerAuth scope: %v)", *sec)
			}
			documented[method+" "+path] = op.OperationID + ": " + need
		}
	}
	routed := map[string]string{}
	for _, rt := range routeTable(t) {
		if rt.operation == "" {
			if strings.Contains(rt.pattern, " /v1") {
				t.Errorf("the /v1 route %s has no operation in the document", rt.pattern)
			}
			continue
		}
		if rt.scope != noKey && !slices.Contains(knownScopes(), rt.scope) {
			t.Errorf("the route %s declares %q, which is no scope", rt.pattern, rt.scope)
		}
		routed[rt.pattern] = rt.operation + ": " + string(rt.scope)
		if rt.tickets {
			routed[rt.pattern] += " (or a ticket)"
		}
	}
	if diff := cmp.Diff(documented, routed); diff != "" {
		t.Errorf("the document's security (-) and the route table (+) differ:\n%s", diff)
	}
}

// TestKeyFileAttributes reads scopes= and expires= as the service does.
func TestKeyFileAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule    string
		line    string
		scopes  string
		expires time.Time
	}{
		{"a line without scopes keeps every scope", "key-0123456789abcdef", "*", time.Time{}},
		{"a label, then scopes", "key-0123456789abcdef shop scopes=pets:read", "pets:read", time.Time{}},
		{"scopes without a label", "key-0123456789abcdef scopes=orders:read,pets:read", "pets:read,orders:read", time.Time{}},
		{"a write scope includes the read of its resource", "key-0123456789abcdef scopes=pets:write", "pets:write", time.Time{}},
		{"* is every scope", "key-0123456789abcdef scopes=pets:read,*", "*", time.Time{}},
		{"a date expires at its first instant, UTC", "key-0123456789abcdef shop expires=2027-03-01", "*", time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"an RFC 3339 time, in UTC", "key-0123456789abcdef expires=2027-03-01T12:00:00+02:00 scopes=events:read", "events:read", time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)},
		{"2000-01-01 is the earliest expiry", "key-0123456789abcdef expires=2000-01-01", "*", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			entries, err := parseKeyFile(strings.NewReader(tt.line+"\n"), testSecret)
			if err != nil || len(entries) != 1 {
				t.Fatalf("parseKeyFile = %v, %v; want one entry", entries, err)
			}
			got := struct {
				Scopes  string
				Expires time.Time
			}{entries[0].scopes.String(), entries[0].expires}
			want := struct {
				Scopes  string
				Expires time.Time
			}{tt.scopes, tt.expires}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("entry mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a write scope grants the read of the same resource only", func(t *testing.T) {
		got := map[scope]bool{}
		for _, s := range knownScopes() {
			got[s] = scopePetsWrite.grants().has(s)
		}
		want := map[scope]bool{scopePetsRead: true, scopePetsWrite: true, scopeOrdersRead: false, scopeOrdersWrite: false,
			scopeEventsRead: false, scopeWebhooksWrite: false, scopeAll: false}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pets:write grants mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestMalformedKeyFileLines: each malformed line is an error that names its
// line and never repeats it, and a reload that meets one keeps the keys in
// force. A digest written in any other way than sha256:HEX, and a line with
// a character no one sees, are malformed: either would make a key of text
// that the file shows as something else.
func TestMalformedKeyFileLines(t *testing.T) {
	t.Parallel()
	const good = "good-key-0123456789 web scopes=pets:read\n"
	const secret = "s3cret-key-0123456789"
	typo := []byte(newPSK())
	typo[10] ^= 1 // one character changed
	d := sha256.Sum256([]byte("the-intended-key-0123456789"))
	digest := hex.EncodeToString(d[:])
	d512 := sha512.Sum512([]byte("the-intended-key-0123456789"))
	const readsAsDigest, bareDigest, invisible = "the first word reads as a digest", "the first word is 64 hex digits", "which cannot be seen"
	tests := []struct {
		rule, line, mention string
	}{
		{"SHA256: in upper case is not the digest form", "SHA256:" + digest + " shop scopes=pets:read", readsAsDigest},
		{"Sha256: in mixed case is not the digest form", "Sha256:" + digest + " shop", readsAsDigest},
		{"sha-256: is not the digest form", "sha-256:" + digest, readsAsDigest},
		{"another algorithm's name before 64 hex digits", "sha512:" + digest + " shop", readsAsDigest},
		{"a SHA-512 digest", "sha512:" + hex.EncodeToString(d512[:]) + " shop", readsAsDigest},
		{"any name before a colon and 64 hex digits", "shop:" + digest, readsAsDigest},
		{"a digest in quotes", `"sha256:` + digest + `" shop`, readsAsDigest},
		{"a digest without sha256:", digest + " shop scopes=pets:read", bareDigest},
		{"a digest without sha256:, in upper case", strings.ToUpper(digest), bareDigest},
		{"a digest as sha256sum prints it", digest + "  -", bareDigest},
		{"a space after sha256 makes the digest a label", "sha256 " + digest + " scopes=pets:read", "a label holds no run of 32 or more hex digits"},
		{"a byte order mark before sha256: (files joined with cat)", "\ufeffsha256:" + digest + " shop", "a byte order mark (U+FEFF)"},
		{"a zero-width space in a key", secret[:6] + "\u200b" + secret[6:] + " shop", "an invisible format character (U+200B)"},
		{"a word joiner after a key", secret + "\u2060 shop", "an invisible format character (U+2060)"},
		{"a right-to-left override in a comment", secret + " shop # \u202eyek-dlo", "an invisible format character (U+202E)"},
		{"a no-break space between a key and its label", secret + "\u00a0shop", "a space other than the ASCII space (U+00A0)"},
		{"an ideographic space", secret + "\u3000shop", "a space other than the ASCII space (U+3000)"},
		{"a line separator", secret + " shop\u2028", "a line or paragraph separator (U+2028)"},
		{"a carriage return inside a line", secret + " shop\rother-key-0123456789", "a control character (U+000D)"},
		{"a NUL (a file saved as UTF-16)", secret + "\x00", "a control character (U+0000)"},
		{"a Hangul filler, a letter drawn as nothing", secret + "\u3164 shop", "an invisible character (U+3164)"},
		{"a variation selector", secret + "\ufe0f shop", "an invisible character (U+FE0F)"},
		{"bytes that are not UTF-8 (a Latin-1 no-break space)", secret + "\xa0shop", "bytes that are not UTF-8"},
		{"the zero time as a date", secret + " expires=0001-01-01", "before 2000-01-01"},
		{"the zero time as an RFC 3339 time", secret + " expires=0001-01-01T00:00:00Z", "before 2000-01-01"},
		{"the Unix epoch", secret + " expires=1970-01-01", "before 2000-01-01"},
		{"an instant before 2000 in UTC, written with an offset", secret + " expires=2000-01-01T00:30:00+01:00", "before 2000-01-01"},
		{"an unknown scope", secret + " shop scopes=pets:delete", "scopes= takes"},
		{"an empty scope list", secret + " shop scopes=", "scopes= takes"},
		{"a scope list with a space", secret + " shop scopes=pets:read, orders:read", "line 2"},
		{"scopes given twice", secret + " shop scopes=pets:read scopes=orders:read", "scopes= is given twice"},
		{"expires given twice", secret + " expires=2027-01-01 expires=2028-01-01", "expires= is given twice"},
		{"a date that is no date", secret + " expires=2027-02-30", "expires= takes"},
		{"a date in another form", secret + " expires=01/03/2027", "expires= takes"},
		{"an unknown attribute", secret + " shop color=" + secret, "unknown attribute"},
		{"a label after the attributes", secret + " scopes=pets:read shop", "nothing more"},
		{"a psk_ key with a one-character typo", string(typo) + " shop", "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "keys")
			writeFile(t, file, good)
			kr, err := loadKeyring("", file, testSecret)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, file, "# rotated\n"+tt.line+"\n")
			err = kr.reload()
			if err == nil {
				t.Fatalf("reload accepted the line %q", tt.line)
			}
			for _, want := range []string{"line 2:", tt.mention} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error %q does not say %q", err, want)
				}
			}
			for _, word := range []string{secret, string(typo)} {
				if strings.Contains(err.Error(), word) {
					t.Errorf("the error repeats a key: %v", err)
				}
			}
			// Nor a word of the line but its attributes and scopes,
			// nor a digest, which a typo makes a key.
			if strings.Contains(strings.ToLower(err.Error()), digest) {
				t.Errorf("the error repeats a digest: %v", err)
			}
			for _, word := range strings.FieldsFunc(tt.line, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) {
				if len(word) >= 8 && !strings.Contains(word, "=") && scope(word).bit() == 0 && strings.Contains(err.Error(), word) {
					t.Errorf("the error repeats a word of the line: %v", err)
				}
			}
			if _, ok := kr.keys().match("good-key-0123456789"); !ok {
				t.Errorf("after the failed reload the previous key is no longer accepted")
			}
		})
	}
}

// TestPSKChecksum: a key of petstore keys new has the documented form, and
// changing any one of its characters breaks its checksum.
func TestPSKChecksum(t *testing.T) {
	t.Parallel()
	key := newPSK()
	if len(key) != len("psk_")+43+6 || !strings.HasPrefix(key, "psk_") || !validPSK(key) {
		t.Fatalf("newPSK() = %q: not psk_, 43 base64url characters and a 6-character checksum", key)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := len("psk_"); i < len(key); i++ {
		for _, c := range []byte(alphabet) {
			if c == key[i] {
				continue
			}
			typo := key[:i] + string(c) + key[i+1:]
			if validPSK(typo) {
				t.Fatalf("a typo at character %d passes the checksum", i)
			}
		}
	}
	for _, cut := range []string{key[:len(key)-1], key + "A"} {
		if validPSK(cut) {
			t.Errorf("a key of %d characters passes the checksum", len(cut))
		}
	}
}

// TestKeyExpiresWhileTheServerRuns: a key valid for 2 s stops working when
// the clock passes its expiry, with no reload, and the metrics report its
// expiry by label and id.
func TestKeyExpiresWhileTheServerRuns(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	const shortLived, admin = "short-lived-key-0123456789", "admin-key-0123456789"
	ts := newServerWithKeyFile(t, fmt.Sprintf("%s shop scopes=pets:read expires=%s\n%s admin\n",
		shortLived, start.Add(2*time.Second).Format(time.RFC3339), admin), clock.now)

	if res := ts.do(t, "GET", "/v1/pets", "", bearer(shortLived)); res.Status != http.StatusOK {
		t.Fatalf("before its expiry: status %d, want 200", res.Status)
	}
	clock.set(start.Add(2*time.Second - time.Nanosecond))
	if res := ts.do(t, "GET", "/v1/pets", "", bearer(shortLived)); res.Status != http.StatusOK {
		t.Fatalf("an instant before its expiry: status %d, want 200", res.Status)
	}
	clock.set(start.Add(2 * time.Second))
	res := ts.do(t, "GET", "/v1/pets", "", bearer(shortLived))
	wantError(t, res, http.StatusUnauthorized, codeUnauthorized, "expired")
	if got, want := res.Header.Get("WWW-Authenticate"), `Bearer error="invalid_token", error_description="the key has expired"`; got != want {
		t.Errorf("WWW-Authenticate = %q, want %q", got, want)
	}

	body := ts.do(t, "GET", "/metrics", "", bearer(admin)).Body
	id := keyID(testSecret, shortLived)
	labels := map[string]string{"caller": "shop", "id": hex.EncodeToString(id[:4])}
	if got, want := metricValue(t, body, "petstore_api_key_expiry_timestamp_seconds", labels), float64(start.Add(2*time.Second).Unix()); got != want {
		t.Errorf("petstore_api_key_expiry_timestamp_seconds%v = %v, want %v", labels, got, want)
	}
	if strings.Contains(string(body), `petstore_api_key_expiry_timestamp_seconds{caller="admin"`) {
		t.Errorf("a key that never expires has an expiry metric")
	}
}

// TestAForbiddenRequestIsNotAFailedGuess: 403s come from a valid key, so
// they never spend the address's budget of failed authentications.
func TestAForbiddenRequestIsNotAFailedGuess(t *testing.T) {
	t.Parallel()
	const reader = "reader-key-0123456789"
	ts := newServerWithKeyFile(t, reader+" shop scopes=pets:read\n", time.Now,
		withLimits(limits{idempotencyTTL: defaultIdempotencyTTL, authFailures: 2}))
	for range 5 {
		if res := ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, bearer(reader)); res.Status != http.StatusForbidden {
			t.Fatalf("createPet with a read-only key: status %d, want 403", res.Status)
		}
	}
	if res := ts.do(t, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer wrong-key-0123456789"}); res.Status != http.StatusUnauthorized {
		t.Errorf("a wrong key after five 403s: status %d, want 401 (the 403s spent no failure)", res.Status)
	}
}

// TestPSKWithABadChecksumIsRefused: the service refuses a psk_ key whose
// checksum does not match, even when the key file lists its digest, which
// shows that no lookup was made.
func TestPSKWithABadChecksumIsRefused(t *testing.T) {
	t.Parallel()
	key := newPSK()
	typo := key[:20] + string(key[20]^1) + key[21:]
	d := sha256.Sum256([]byte(typo))
	ts := newServerWithKeyFile(t, fmt.Sprintf("%s shop\nsha256:%s typo\n", key, hex.EncodeToString(d[:])), time.Now)
	if res := ts.do(t, "GET", "/v1/pets", "", bearer(key)); res.Status != http.StatusOK {
		t.Errorf("the key: status %d, want 200", res.Status)
	}
	res := ts.do(t, "GET", "/v1/pets", "", bearer(typo))
	wantError(t, res, http.StatusUnauthorized, codeUnauthorized, "checksum")
	if strings.Contains(string(res.Body), typo) || strings.Contains(ts.Log.String(), typo) || strings.Contains(ts.Log.String(), key) {
		t.Errorf("a key is echoed or logged")
	}
}

// TestFilesOthersCouldChangeAreRefused: as OpenSSH's StrictModes, the key
// file and the secret file are refused when a user other than this one and
// root owns them or a directory above them, or when a directory above them
// can be written by others without the sticky bit; a root-owned sticky
// directory (as /tmp) is fine. Changing owners needs root.
func TestFilesOthersCouldChangeAreRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	const nobody = 65534
	tests := []struct {
		rule    string
		arrange func(dir, file string) error
		mention string // "" when the file is accepted
	}{
		{"a file and directories of this user and root", func(dir, file string) error { return nil }, ""},
		{"a file owned by another user", func(dir, file string) error { return os.Chown(file, nobody, nobody) }, "owned by user id 65534"},
		{"a directory owned by another user", func(dir, file string) error { return os.Chown(dir, nobody, nobody) }, "owned by user id 65534"},
		{"a directory its group can write", func(dir, file string) error { return os.Chmod(dir, 0o775) }, "(mode 0775)"},
		{"a directory anyone can write", func(dir, file string) error { return os.Chmod(dir, 0o777) }, "(mode 0777)"},
		{"a root-owned directory anyone can write, with the sticky bit", func(dir, file string) error {
			return os.Chmod(dir, 0o777|os.ModeSticky)
		}, ""},
		{"a parent directory anyone can write", func(dir, file string) error { return os.Chmod(filepath.Dir(dir), 0o777) }, "(mode 0777)"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etc", "petstore")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			keyFile, secretFile := filepath.Join(dir, "keys"), filepath.Join(dir, "secret")
			writeFile(t, keyFile, "a-key-0123456789abcdef web\n")
			writeFile(t, secretFile, strings.Repeat("s", 40)+"\n")
			if err := tt.arrange(dir, keyFile); err != nil {
				t.Fatal(err)
			}
			if tt.rule == "a file owned by another user" {
				os.Chown(secretFile, nobody, nobody)
			}
			_, keyErr := loadKeyring("", keyFile, testSecret)
			_, secretErr := loadSecret(secretFile, "")
			for what, err := range map[string]error{"the key file": keyErr, "the secret file": secretErr} {
				switch {
				case tt.mention == "" && err != nil:
					t.Errorf("%s is refused: %v", what, err)
				case tt.mention != "" && (err == nil || !strings.Contains(err.Error(), tt.mention)):
					t.Errorf("%s: error %v, want one that says %q", what, err, tt.mention)
				}
			}
		})
	}
}

// TestKeysNew checks petstore keys new in-process: the key and its line, the
// line a key file accepts, and the settings and files it refuses.
func TestKeysNew(t *testing.T) {
	t.Parallel()
	t.Run("prints the key, then the line that accepts it", func(t *testing.T) {
		var out strings.Builder
		if err := run(t.Context(), []string{"keys", "new", "-label", "shop", "-scopes", "pets:read,orders:write", "-expires", "2030-01-01"},
			os.Getenv, strings.NewReader(""), &out, io.Discard); err != nil {
			t.Fatalf("keys new: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 2 || !validPSK(lines[0]) {
			t.Fatalf("keys new printed %q, want a psk_ key and a line", out.String())
		}
		d := sha256.Sum256([]byte(lines[0]))
		if want := "sha256:" + hex.EncodeToString(d[:]) + " shop scopes=pets:read,orders:write expires=2030-01-01T00:00:00Z"; lines[1] != want {
			t.Errorf("the key file line = %q, want %q", lines[1], want)
		}
	})
	t.Run("appends to a file whose last line lacks its newline", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "keys")
		writeFile(t, file, "old-key-0123456789 web")
		var out strings.Builder
		if err := run(t.Context(), []string{"keys", "new", "-file", file}, os.Getenv, strings.NewReader(""), &out, io.Discard); err != nil {
			t.Fatalf("keys new: %v", err)
		}
		key := strings.TrimSuffix(out.String(), "\n")
		kr, err := loadKeyring("", file, testSecret)
		if err != nil {
			t.Fatalf("the key file after keys new: %v", err)
		}
		for _, k := range []string{"old-key-0123456789", key} {
			if e, ok := kr.keys().match(k); !ok || e.scopes != everyScope {
				t.Errorf("the file does not accept a key with every scope (%v, %v)", ok, e.scopes)
			}
		}
	})
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared-keys")
	writeFile(t, shared, "")
	os.Chmod(shared, 0o666)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rule    string
		args    []string
		setting string
	}{
		{"an unknown scope", []string{"-scopes", "pets:delete"}, "-scopes"},
		{"a label with a space-like character", []string{"-label", "a/b"}, "-label"},
		{"a label the key file would refuse, a digest's hex digits", []string{"-label", strings.Repeat("ab", 16)}, "-label"},
		{"an expiry already past", []string{"-expires", "2020-01-01"}, "-expires"},
		{"a number of days that is none", []string{"-expires", "0d"}, "-expires"},
		{"a file other users can write", []string{"-file", shared}, "-file"},
		{"a FIFO", []string{"-file", fifo}, "-file"},
	} {
		t.Run("refuses "+tt.rule, func(t *testing.T) {
			var out strings.Builder
			err := run(t.Context(), append([]string{"keys", "new"}, tt.args...), os.Getenv, strings.NewReader(""), &out, io.Discard)
			if ce, ok := errors.AsType[*configError](err); !ok || ce.setting != tt.setting {
				t.Errorf("keys new %v = %v, want a configError for %s", tt.args, err, tt.setting)
			}
			if out.Len() > 0 {
				t.Errorf("a refused keys new printed %q", out.String())
			}
		})
	}
}

// TestScopeBitsFollowKnownScopes: each known scope has a bit of its own, in
// the order of knownScopes, and every one of them is in everyScope.
func TestScopeBitsFollowKnownScopes(t *testing.T) {
	t.Parallel()
	var all scopeSet
	for i, s := range knownScopes() {
		if s.bit() != 1<<i {
			t.Errorf("%s has bit %b, want %b", s, s.bit(), 1<<i)
		}
		all |= s.bit()
	}
	if all != everyScope {
		t.Errorf("the known scopes' bits are %b, everyScope %b", all, everyScope)
	}
	if noKey.bit() != 0 || scope("").bit() != 0 {
		t.Errorf("a name that is not a scope has a bit")
	}
}

// TestAKeyListedTwiceIsRefused: a key listed twice (two lines of the key
// file, a line and its digest, or the file and PETSTORE_API_KEYS) would hold
// two sets of scopes, and its bearer use and its tickets could each find a
// different one. A reload that meets one keeps the keys in force; the error
// names both listings by where they are, never by the key. (The start-up
// refusals are rows of TestRunRefusesBadConfiguration.)
func TestAKeyListedTwiceIsRefused(t *testing.T) {
	t.Parallel()
	const key, other = "listed-twice-0123456789", "other-key-0123456789"
	digest := sha256.Sum256([]byte(key))
	tests := []struct {
		rule, env, file, mention string
	}{
		{"two lines of one key", "", key + " a scopes=pets:read\n" + other + "\n" + key + " b\n", "line 3 is the same key as line 1"},
		{"a key and its digest", "", "sha256:" + hex.EncodeToString(digest[:]) + " a\n" + key + " b scopes=orders:read\n", "line 2 is the same key as line 1"},
		{"a key of PETSTORE_API_KEYS in the file", other + "," + key, "\n" + key + " narrow scopes=pets:read,events:read\n", "line 2 is the same key as key 2 of PETSTORE_API_KEYS"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "keys")
			writeFile(t, file, "good-key-0123456789 web\n")
			kr, err := loadKeyring(tt.env, file, testSecret)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, file, tt.file)
			err = kr.reload()
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("reload() = %v, want an error mentioning %q", err, tt.mention)
			}
			if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), hex.EncodeToString(digest[:])) {
				t.Errorf("the error repeats the key or its digest: %v", err)
			}
			if _, ok := kr.keys().match("good-key-0123456789"); !ok {
				t.Errorf("after the refused reload the previous key is no longer accepted")
			}
		})
	}
}
