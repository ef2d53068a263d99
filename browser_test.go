package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// browserTimeout bounds the whole browser test: a page that never shows what
// a step waits for fails the test instead of hanging it. It is a bound on a
// hang, not a measure: the page unfolds 23 operations, and on a 2-core
// machine running the rest of the suite beside it (t.Parallel) that took
// up to three minutes.
const browserTimeout = 8 * time.Minute

// TestReferencePageInABrowser opens the API reference of the real binary in
// headless Chromium, as a person would: from /, with no key. What it expects
// to see comes from the document the binary serves, so an operation added to
// the document is covered without a change here.
func TestReferencePageInABrowser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary and drives a browser")
	}
	chromium, err := exec.LookPath("chromium")
	missingPart(t, "the browser test", "apt-get install chromium", err)
	bin := buildBinary(t)
	svc := startBinary(t, bin, "PETSTORE_ADDR=127.0.0.1:0",
		"PETSTORE_DB="+filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_API_KEYS="+testKey)
	base, stderr := svc.URL, svc.Stderr
	want := documentedOperations(t, base)
	tab := openTab(t, chromium)

	if !t.Run("/ leads to the reference, which loads with no console error and shows every operation", func(t *testing.T) {
		tab.do(t, "open /", chromedp.Navigate(base+"/"))
		tab.poll(t, "every operation rendered", fmt.Sprintf(`document.querySelectorAll('.opblock').length >= %d`, len(want)))
		if path := evaluate(t, tab, "read the location", chromedp.Evaluate[string](`location.pathname`)); path != "/docs" {
			t.Errorf("/ led to %s, want /docs", path)
		}
		tab.wantNoConsoleErrors(t)
		tab.screenshot(t, "reference.png", ".scheme-container")
	}) {
		return
	}

	if !t.Run("each operation shows its parameters, body, statuses, error codes and deprecation", func(t *testing.T) {
		// Every operation starts folded. Each is unfolded, read, and
		// folded again before the next, by one script in the page: with
		// all of them unfolded, every click laid out the whole grown page
		// again (each took longer than the one before, and the browser
		// used a minute of CPU); unfolding all at once outlasted the
		// test's bound on a loaded 2-core machine; and a round trip to
		// the browser for each click, wait and read took a minute there.
		got := shownOperations(t, tab, want)
		sortOperations(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the reference shows the document's operations wrong (-document +page):\n%s", diff)
		}
		tab.wantNoConsoleErrors(t)
	}) {
		return
	}

	if !slices.ContainsFunc(want, func(o shownOperation) bool { return o.OperationID == "createPet" }) {
		t.Fatalf("the served document has no createPet operation")
	}
	// Try it on a fresh page, with only createPet unfolded, as a person
	// would.
	tab.do(t, "open /docs", chromedp.Navigate(base+"/docs"))
	tab.poll(t, "every operation rendered", fmt.Sprintf(`document.querySelectorAll('.opblock').length >= %d`, len(want)))
	opblock := "#" + evaluate(t, tab, "find createPet", chromedp.Evaluate[string](
		`[...document.querySelectorAll('.opblock')].find(o => o.querySelector('.opblock-summary-operation-id')?.textContent === 'createPet').id`))
	tab.do(t, "unfold createPet", chromedp.Click(chromedp.CSS(opblock+" .opblock-summary-control")))
	const petName = "Tried in a browser"

	if !t.Run("a key typed in and createPet tried: 201, and listPets through the API has the pet", func(t *testing.T) {
		tab.authorize(t, testKey)
		// The key lives in the tab's memory only: nothing the browser keeps
		// for the origin holds it.
		if kept := evaluate(t, tab, "read what the page stored", chromedp.Evaluate[string](
			`JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`)); strings.Contains(kept, testKey) {
			t.Errorf("the page stored the key: %s", kept)
		}
		tab.replaceText(t, opblock+" textarea.body-param__text", fmt.Sprintf(`{"name": %q, "categoryId": 7}`, petName))
		status, body := tab.execute(t, opblock, "")
		if status != "201" {
			t.Fatalf("Execute answered %s, want 201; body %s", status, body)
		}
		var shown Pet
		if err := json.Unmarshal([]byte(body), &shown); err != nil {
			t.Fatalf("the page shows a body that is not a Pet: %v\n%s", err, body)
		}
		if diff := cmp.Diff(Pet{ID: shown.ID, Name: petName, CategoryID: 7, Status: "available"}, shown); diff != "" {
			t.Errorf("the 201 the page shows (-want +got):\n%s", diff)
		}
		listed := decode[[]Pet](t, doRequest(t, base, "GET", "/v1/pets", "", nil))
		if diff := cmp.Diff([]Pet{shown}, listed); diff != "" {
			t.Errorf("listPets through the API after the browser's create (-want +got):\n%s", diff)
		}
		if got := tab.authorizations(base + "/v1/pets"); !slices.Contains(got, "Bearer "+testKey) {
			t.Errorf("the page sent Authorization %q to /v1/pets, want the typed key", got)
		}
		tab.wantNoConsoleErrors(t)
		tab.screenshot(t, "try-it-201.png", opblock+" .responses-wrapper")
	}) {
		return
	}

	t.Run("a wrong key shows the 401 error body, and nothing is created", func(t *testing.T) {
		tab.logout(t)
		tab.authorize(t, "not-a-configured-key")
		status, body := tab.execute(t, opblock, "201")
		if status != "401" {
			t.Fatalf("Execute with a wrong key answered %s, want 401; body %s", status, body)
		}
		// The page shows the body pretty-printed: compare the values.
		direct := doRequest(t, base, "POST", "/v1/pets", `{"name":"x","categoryId":7}`, map[string]string{"Authorization": "Bearer not-a-configured-key"})
		wantError(t, direct, http.StatusUnauthorized, codeUnauthorized)
		if diff := cmp.Diff(decode[apiError](t, direct), decode[apiError](t, response{Body: []byte(body)})); diff != "" {
			t.Errorf("the page shows another 401 body than the API answers (-API +page):\n%s", diff)
		}
		if got := tab.authorizations(base + "/v1/pets"); !slices.Contains(got, "Bearer not-a-configured-key") {
			t.Errorf("the page sent Authorization %q to /v1/pets, want the typed wrong key among them", got)
		}
		if n := len(decode[[]Pet](t, doRequest(t, base, "GET", "/v1/pets", "", nil))); n != 1 {
			t.Errorf("after the refused create the API lists %d pets, want 1", n)
		}
		// The browser logs the refused request as a failed load; that is the
		// only console error this step may cause.
		tab.wantNoConsoleErrors(t, base+"/v1/pets")
		tab.screenshot(t, "try-it-401.png", opblock+" .responses-wrapper")
	})

	t.Run("neither key reached the service's log", func(t *testing.T) {
		for _, key := range []string{testKey, "not-a-configured-key"} {
			if strings.Contains(stderr.String(), key) {
				t.Errorf("the log holds the key %q", key)
			}
		}
	})
	t.Run("no request left the origin", func(t *testing.T) {
		if len(tab.requests()) == 0 {
			t.Fatalf("no request recorded")
		}
		for _, r := range tab.requests() {
			// data: URLs are the stylesheet's inline icons, not requests.
			if u, err := url.Parse(r.url); err != nil || (u.Scheme+"://"+u.Host != base && u.Scheme != "data") {
				t.Errorf("request outside %s: %s %s", base, r.method, abbreviate(r.url))
			}
		}
	})
}

// shownOperation is what the reference must show of one operation. Built
// from the document, it is what the document says; built from the page, what
// a person sees.
type shownOperation struct {
	Method, Path, OperationID string
	Deprecated                bool
	Parameters                []string // "in name", sorted
	RequestBody               bool
	// Responses maps each status to the error codes shown with it: from the
	// document, the codes its schema pins the status to (code's const or
	// enum); from the page, those of them that the status's row shows.
	Responses map[string][]string
}

// documentedOperations reads every operation of the document base serves.
// It reads the JSON itself, so that it sees the document exactly as the
// browser gets it, resolving only the local $refs it needs.
func documentedOperations(t *testing.T, base string) []shownOperation {
	t.Helper()
	res := doRequest(t, base, "GET", "/v1/openapi.json", "", map[string]string{"Authorization": ""})
	if res.Status != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: status %d", res.Status)
	}
	var doc map[string]any
	if err := json.Unmarshal(res.Body, &doc); err != nil {
		t.Fatalf("the served document is not JSON: %v", err)
	}
	// resolve follows a local $ref ("#/components/...") to what it names.
	resolve := func(v any) map[string]any {
		m, _ := v.(map[string]any)
		for m != nil {
			ref, ok := m["$ref"].(string)
			if !ok {
				return m
			}
			var target any = doc
			for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
				next, _ := target.(map[string]any)
				target = next[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]
			}
			m, _ = target.(map[string]any)
		}
		t.Fatalf("the served document has a $ref that leads nowhere: %v", v)
		return nil
	}
	paramKey := func(v any) string {
		p := resolve(v)
		return fmt.Sprint(p["in"], " ", p["name"])
	}
	var ops []shownOperation
	// The webhooks section (what a receiver gets) is shown as operations
	// too, named by their key where a path would be.
	paths := map[string]any{}
	for _, section := range []string{"paths", "webhooks"} {
		items, _ := doc[section].(map[string]any)
		maps.Copy(paths, items)
	}
	for path, item := range paths {
		item := resolve(item)
		var pathParams []string
		for _, p := range asSlice(item["parameters"]) {
			pathParams = append(pathParams, paramKey(p))
		}
		for _, method := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"} {
			op, ok := item[method].(map[string]any)
			if !ok {
				continue
			}
			params := slices.Clone(pathParams)
			for _, p := range asSlice(op["parameters"]) {
				if k := paramKey(p); !slices.Contains(params, k) {
					params = append(params, k)
				}
			}
			slices.Sort(params)
			o := shownOperation{Method: strings.ToUpper(method), Path: path, Parameters: params,
				RequestBody: op["requestBody"] != nil, Responses: map[string][]string{}}
			o.OperationID, _ = op["operationId"].(string)
			o.Deprecated, _ = op["deprecated"].(bool)
			responses, _ := op["responses"].(map[string]any)
			for status, r := range responses {
				o.Responses[status] = errorCodes(resolve(r))
			}
			ops = append(ops, o)
		}
	}
	sortOperations(ops)
	if len(ops) == 0 {
		t.Fatalf("the served document has no operation")
	}
	return ops
}

// errorCodes returns the error codes a response's JSON schema pins its code
// to (sorted), looking at the schema itself and its allOf members, not at the
// Error schema a $ref names: that one lists every code.
func errorCodes(response map[string]any) []string {
	content, _ := response["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	schema, _ := media["schema"].(map[string]any)
	var codes []string
	for _, s := range append([]any{schema}, asSlice(schema["allOf"])...) {
		s, _ := s.(map[string]any)
		props, _ := s["properties"].(map[string]any)
		code, _ := props["code"].(map[string]any)
		if c, ok := code["const"].(string); ok {
			codes = append(codes, c)
		}
		for _, c := range asSlice(code["enum"]) {
			codes = append(codes, fmt.Sprint(c))
		}
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}

// asSlice returns v as a JSON array, or nil.
func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// sortOperations orders operations by path, then method.
func sortOperations(ops []shownOperation) {
	slices.SortFunc(ops, func(a, b shownOperation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
}

// unfoldEach is the script that unfolds each operation of the page in turn,
// as a click on its summary does, reads it once it shows its responses, and
// folds it again. A step that the page does not show within a minute fails
// the script, naming the operation.
const unfoldEach = `(async () => {
	const shown = async (what, cond) => {
		for (const end = Date.now() + 60000; !cond(); ) {
			if (Date.now() > end) throw new Error(what + ' did not show within a minute');
			await new Promise(r => setTimeout(r, 10));
		}
	};
	const read = o => ({
		Method: o.querySelector('.opblock-summary-method').textContent,
		Path: o.querySelector('.opblock-summary [data-path]').dataset.path,
		OperationID: o.querySelector('.opblock-summary-operation-id')?.textContent ?? '',
		Deprecated: o.classList.contains('opblock-deprecated'),
		RequestBody: o.querySelector('.opblock-section-request-body') !== null,
		Parameters: [...o.querySelectorAll('tr[data-param-name]')].map(p => p.dataset.paramIn + ' ' + p.dataset.paramName),
		Responses: Object.fromEntries([...o.querySelectorAll('table.responses-table:not(.live-responses-table) > tbody > tr.response')]
			.map(r => [r.dataset.code, r.innerText])),
	});
	const out = [];
	for (const id of [...document.querySelectorAll('.opblock')].map(o => o.id)) {
		const op = () => document.getElementById(id);
		op().querySelector('.opblock-summary-control').click();
		await shown(id + ' unfolded', () => op().querySelector('table.responses-table tr.response') !== null);
		out.push(read(op()));
		op().querySelector('.opblock-summary-control').click();
		await shown(id + ' folded', () => op().querySelector('table.responses-table') === null);
	}
	return out;
})()`

// shownOperations unfolds, reads and folds each operation of the page
// (unfoldEach). For each status it keeps the error codes of want that the
// status's row shows.
func shownOperations(t *testing.T, tab *browserTab, want []shownOperation) []shownOperation {
	t.Helper()
	type rendered struct {
		Method, Path, OperationID string
		Deprecated, RequestBody   bool
		Parameters                []string
		Responses                 map[string]string // status: the row's text
	}
	page := evaluate(t, tab, "unfold and read each operation", chromedp.Evaluate[[]rendered](unfoldEach, chromedp.EvalAwaitPromise))
	documented := map[string][]string{} // "status operationId" to codes
	for _, o := range want {
		for status, codes := range o.Responses {
			documented[status+" "+o.OperationID] = codes
		}
	}
	var got []shownOperation
	for _, p := range page {
		o := shownOperation{Method: p.Method, Path: p.Path, OperationID: p.OperationID, Deprecated: p.Deprecated,
			Parameters: slices.Sorted(slices.Values(p.Parameters)), RequestBody: p.RequestBody, Responses: map[string][]string{}}
		for status, text := range p.Responses {
			var shown []string
			for _, code := range documented[status+" "+o.OperationID] {
				if strings.Contains(text, code) {
					shown = append(shown, code)
				}
			}
			o.Responses[status] = shown
		}
		got = append(got, o)
	}
	return got
}

// browserTab is one tab of a headless Chromium, with a record of every
// request the page sent and every console message it wrote.
type browserTab struct {
	ctx context.Context

	mu       sync.Mutex
	reqs     []recordedRequest
	messages []consoleMessage
	seen     int // messages already checked by wantNoConsoleErrors
}

// recordedRequest is a request the page sent.
type recordedRequest struct {
	method, url   string
	authorization string
}

// consoleMessage is a console call, an uncaught exception or an entry of the
// browser's log (where failed loads and Content-Security-Policy refusals go).
type consoleMessage struct {
	level, source, text, url string
}

// openTab starts Chromium with a fresh profile and opens a tab. The flags
// keep it from reaching any other host on its own (updates, sync, field
// trials): on a closed network those attempts are refused, and a test must
// not depend on them; one keeps its JavaScript engine on one thread. The browser is stopped when the test ends.
func openTab(t *testing.T, chromium string) *browserTab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // Chromium refuses to start as root with its sandbox, and CI runs as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		// V8 compiles and collects on the page's own thread rather than
		// on threads beside it: the test took 44 s of the machine's CPU
		// alone, 35 to 38 s so (the page's short life never pays back the
		// concurrent optimising compiler), in the same wall time.
		chromedp.Flag("js-flags", "--single-threaded"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	parent, cancelTimeout := context.WithTimeout(context.Background(), browserTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // stops the browser this test started and waits for it
		cancelTimeout()
	})
	tab := &browserTab{ctx: ctx}
	// Listen sees every event before the command that follows it returns,
	// so once a step has seen its result on the page, the record holds the
	// requests and messages that led to it.
	if err := chromedp.Listen(ctx, tab.record); err != nil {
		missingPart(t, "the browser test", "apt-get install chromium", err)
	}
	return tab
}

// record keeps the events the test checks. It runs in chromedp's reading
// loop, so it only appends.
func (b *browserTab) record(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		auth, _ := ev.Request.Headers["Authorization"].(string)
		b.reqs = append(b.reqs, recordedRequest{method: ev.Request.Method, url: ev.Request.URL, authorization: auth})
	case *runtime.EventConsoleAPICalled:
		var text []string
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				text = append(text, strings.Trim(string(a.Value), `"`))
			} else {
				text = append(text, a.Description)
			}
		}
		b.messages = append(b.messages, consoleMessage{level: string(ev.Type), source: "console", text: strings.Join(text, " ")})
	case *runtime.EventExceptionThrown:
		text := ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			text += " " + ev.ExceptionDetails.Exception.Description
		}
		b.messages = append(b.messages, consoleMessage{level: "error", source: "exception", text: text, url: ev.ExceptionDetails.URL})
	case *log.EventEntryAdded:
		b.messages = append(b.messages, consoleMessage{level: string(ev.Entry.Level), source: string(ev.Entry.Source), text: ev.Entry.Text, url: ev.Entry.URL})
	}
}

// requests returns the requests recorded so far.
func (b *browserTab) requests() []recordedRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

// authorizations returns the Authorization headers of the requests to url.
func (b *browserTab) authorizations(url string) []string {
	var out []string
	for _, r := range b.requests() {
		if r.url == url {
			out = append(out, r.authorization)
		}
	}
	return out
}

// wantNoConsoleErrors fails the test for every error message since the last
// call, except a failed load of one of the allowed URLs (a refused request
// the step meant to make). Warnings are logged.
func (b *browserTab) wantNoConsoleErrors(t *testing.T, allowedFailedLoads ...string) {
	t.Helper()
	b.mu.Lock()
	msgs := b.messages[b.seen:]
	b.seen = len(b.messages)
	b.mu.Unlock()
	for _, m := range msgs {
		switch {
		case m.level == "warning":
			t.Logf("console warning (%s): %s", m.source, m.text)
		case m.level != "error" && m.level != "assert":
		case m.source == "network" && slices.Contains(allowedFailedLoads, m.url):
			t.Logf("console error expected by this step (%s): %s %s", m.source, m.text, m.url)
		default:
			t.Errorf("console error (%s): %s %s", m.source, m.text, m.url)
		}
	}
}

// do runs actions in the tab, failing the test if one fails.
func (b *browserTab) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// evaluate runs one action that returns a value in the tab, failing the
// test if it fails.
func evaluate[T any](t *testing.T, b *browserTab, what string, action chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// poll waits until the JavaScript condition holds on the page: the test
// waits on what the page shows, never on time.
func (b *browserTab) poll(t *testing.T, what, condition string) {
	t.Helper()
	// No timeout of its own (chromedp's is 30 s): browserTimeout bounds the
	// whole test, and unfolding every operation of the reference takes
	// more than 30 s on a loaded machine.
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](condition, chromedp.WithPollingTimeout(0))); err != nil {
		html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, condition, err, abbreviateText(html, 4000))
	}
}

// authorize types key into the Authorize dialog, as a person would, and
// closes it.
func (b *browserTab) authorize(t *testing.T, key string) {
	t.Helper()
	b.do(t, "open the Authorize dialog", chromedp.Click(chromedp.CSS(".auth-wrapper .authorize")))
	b.do(t, "type the key", chromedp.SendKeys(chromedp.CSS(".modal-ux input"), key))
	b.do(t, "apply the key", chromedp.Click(chromedp.CSS(`.modal-ux button[aria-label="Apply credentials"]`)))
	b.poll(t, "the key applied", `document.querySelector('.modal-ux button[aria-label="Remove authorization"]') !== null`)
	b.do(t, "close the dialog", chromedp.Click(chromedp.CSS(".modal-ux .btn-done")))
	b.poll(t, "the dialog closed", `document.querySelector('.modal-ux') === null`)
}

// logout forgets the key in the Authorize dialog.
func (b *browserTab) logout(t *testing.T) {
	t.Helper()
	b.do(t, "open the Authorize dialog", chromedp.Click(chromedp.CSS(".auth-wrapper .authorize")))
	b.do(t, "log out", chromedp.Click(chromedp.CSS(`.modal-ux button[aria-label="Remove authorization"]`)))
	b.poll(t, "the key forgotten", `document.querySelector('.modal-ux button[aria-label="Apply credentials"]') !== null`)
	b.do(t, "close the dialog", chromedp.Click(chromedp.CSS(".modal-ux .btn-done")))
	b.poll(t, "the dialog closed", `document.querySelector('.modal-ux') === null`)
}

// replaceText selects all the text of a field and types text over it.
func (b *browserTab) replaceText(t *testing.T, sel, text string) {
	t.Helper()
	b.do(t, "replace the text of "+sel,
		chromedp.Focus(chromedp.CSS(sel)),
		chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		chromedp.SendKeys(chromedp.CSS(sel), text))
	if got := evaluate(t, b, "read "+sel, chromedp.Value(chromedp.CSS(sel))); got != text {
		t.Fatalf("%s holds %q after typing, want %q", sel, got, text)
	}
}

// execute clicks Execute in the operation and waits for the answer to show:
// a status other than previous (the one an earlier Execute showed, or "").
// It returns the status and the response body the page shows.
func (b *browserTab) execute(t *testing.T, opblock, previous string) (status, body string) {
	t.Helper()
	statusJS := fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '').trim()`,
		opblock+" .live-responses-table tbody tr.response td.response-col_status")
	b.do(t, "click Execute", chromedp.Click(chromedp.CSS(opblock+" .execute")))
	b.poll(t, "the answer shown", fmt.Sprintf(`%s !== '' && %[1]s !== %q`, statusJS, previous))
	status = evaluate(t, b, "read the status", chromedp.Evaluate[string](statusJS))
	body = evaluate(t, b, "read the body", chromedp.Evaluate[string](fmt.Sprintf(
		`[...document.querySelectorAll(%q)].find(h => h.textContent === 'Response body')?.parentElement.querySelector('pre')?.textContent ?? ''`,
		opblock+" .live-responses-table h5")))
	return status, body
}

// screenshot scrolls the element sel selects to the top of the window,
// saves what the window shows in the test's artefact directory and says
// where: run go test with -artifacts to keep it.
func (b *browserTab) screenshot(t *testing.T, name, sel string) {
	t.Helper()
	b.do(t, "scroll to "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).scrollIntoView(true)`, sel)))
	png := evaluate(t, b, "take the screenshot "+name, chromedp.CaptureScreenshot())
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// abbreviateText cuts s to n bytes for a failure message.
func abbreviateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n[...]"
}
