package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"
)

// The document's examples are what tools send and expect: Dredd and Portman
// send the example requests and compare answers with the example responses,
// Swagger UI fills "Try it out" with them. So every parameter, request body
// and response has one, each is valid against its own schema, together they
// tell one story (the pet createPet adds is the one getPet returns), and the
// service, sent the example requests in the story's order, answers exactly
// the example responses.

// exampleSite is a place of the document that must carry an example: a
// parameter, or a media type of a request body or of a response.
type exampleSite struct {
	where   string // what the site is, for messages
	schema  *openapi3.SchemaRef
	example any
	found   bool
}

// exampleOf returns the example of a parameter or media type, given either
// as `example` or as the first of its `examples`.
func exampleOf(example any, examples openapi3.Examples) (any, bool) {
	if example != nil {
		return example, true
	}
	for _, name := range slices.Sorted(maps.Keys(examples)) {
		if e := examples[name]; e != nil && e.Value != nil {
			return e.Value.Value, true
		}
	}
	return nil, false
}

// exampleSites lists every site of the document: the parameters, request
// bodies and responses of every operation, the component responses and the
// x-unrouted-responses. A site reached twice (a shared component) is listed
// once, under the component's name.
func exampleSites(t *testing.T, doc *openapi3.T) []exampleSite {
	t.Helper()
	var sites []exampleSite
	seen := map[string]bool{}
	content := func(where string, c openapi3.Content) {
		for _, mt := range slices.Sorted(maps.Keys(c)) {
			ex, ok := exampleOf(c[mt].Example, c[mt].Examples)
			sites = append(sites, exampleSite{where + " " + mt, c[mt].Schema, ex, ok})
		}
	}
	response := func(where string, ref *openapi3.ResponseRef) {
		if ref.Ref != "" {
			where = ref.Ref
		}
		if !seen[where] {
			seen[where] = true
			content(where, ref.Value.Content)
		}
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		ops := doc.Paths.Value(path).Operations()
		for _, method := range slices.Sorted(maps.Keys(ops)) {
			op := ops[method]
			for _, p := range op.Parameters {
				where := op.OperationID + " parameter " + p.Value.Name
				if p.Ref != "" {
					where = p.Ref
				}
				if !seen[where] {
					seen[where] = true
					ex, ok := exampleOf(p.Value.Example, p.Value.Examples)
					sites = append(sites, exampleSite{where, p.Value.Schema, ex, ok})
				}
			}
			if op.RequestBody != nil {
				content(op.OperationID+" request", op.RequestBody.Value.Content)
			}
			for status, ref := range op.Responses.Map() {
				response(fmt.Sprintf("%s (%s %s) %s", op.OperationID, method, path, status), ref)
			}
		}
	}
	for name, ref := range doc.Components.Responses {
		response("#/components/responses/"+name, ref)
	}
	for status, ref := range unroutedResponses(t) {
		response(fmt.Sprintf("%s %d", unroutedKey, status), ref)
	}
	return sites
}

// TestOpenAPIExamples checks that every site has an example valid against
// its schema, and that the examples of the operations tell one story.
func TestOpenAPIExamples(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	for _, s := range exampleSites(t, doc) {
		t.Run("the example of "+s.where+" is valid against its schema", func(t *testing.T) {
			if !s.found {
				t.Fatalf("%s has no example", s.where)
			}
			if err := s.schema.Value.VisitJSON(s.example, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
				t.Errorf("example %s does not match the schema:\n%v", mustJSON(t, s.example), err)
			}
		})
	}

	ex := documentExamples{t: t, doc: doc}
	pet := ex.response("getPet", 200)
	order := ex.response("placeOrder", 201)
	listed := ex.response("listPets", 200).([]any)
	events := ex.response("listEvents", 200).([]any)
	hook := ex.response("getWebhook", 200)
	listedIDs := map[any]bool{}
	for _, p := range listed {
		listedIDs[p.(map[string]any)["id"]] = true
	}
	tests := []struct {
		rule      string
		want, got any
	}{
		{"createPet answers with the pet getPet returns", pet, ex.response("createPet", 201)},
		{"createPet's pet is its request with an id and the default status",
			ex.response("createPet", 201), withFields(ex.request("createPet", "application/json"), "id", pet.(map[string]any)["id"], "status", "available")},
		{"getPet, updatePet and deletePet ask for that pet", pet.(map[string]any)["id"], ex.parameter("getPet", "petId")},
		{"listPets lists that pet", true, slices.ContainsFunc(listed, func(p any) bool { return cmp.Equal(p, pet) })},
		{"listPets lists only pets of its status example", []any{ex.parameter("listPets", "status")}, slices.Compact(fieldOf(listed, "status"))},
		{"listPets lists exactly the pets of its id example", ex.parameter("listPets", "id"), fieldOf(listed, "id")},
		{"updatePet answers getPet's pet with the patch applied (RFC 7396)", ex.response("updatePet", 200), mergePatch(pet, ex.request("updatePet", "application/merge-patch+json"))},
		{"updatePet's two media types carry the same patch", ex.request("updatePet", "application/merge-patch+json"), ex.request("updatePet", "application/json")},
		{"placeOrder orders a listed pet", true, listedIDs[ex.request("placeOrder", "application/json").(map[string]any)["petId"]]},
		{"placeOrder does not order the pet deletePet removes", false, cmp.Equal(ex.request("placeOrder", "application/json").(map[string]any)["petId"], ex.parameter("deletePet", "petId"))},
		{"placeOrder answers a placed order for its pet, updated when placed",
			withFields(order, "petId", ex.request("placeOrder", "application/json").(map[string]any)["petId"], "status", "placed", "updatedAt", order.(map[string]any)["placedAt"]), order},
		{"getOrder returns the order placeOrder placed", order, ex.response("getOrder", 200)},
		{"getOrder and updateOrder ask for that order", order.(map[string]any)["id"], ex.parameter("getOrder", "orderId")},
		{"listOrders lists that order, of its status example", []any{withFields(order, "status", ex.parameter("listOrders", "status"))}, ex.response("listOrders", 200)},
		{"updateOrder answers the order with the new status, placedAt kept",
			withFields(order, "status", ex.request("updateOrder", "application/json").(map[string]any)["status"], "updatedAt", ex.response("updateOrder", 200).(map[string]any)["updatedAt"]),
			ex.response("updateOrder", 200)},
		{"updateOrder changes the order after it was placed", true,
			mustTimestamp(t, ex.response("updateOrder", 200), "updatedAt").After(mustTimestamp(t, order, "placedAt"))},
		{"updateOrder's two media types carry the same change", ex.request("updateOrder", "application/json"), ex.request("updateOrder", "application/merge-patch+json")},
		{"the two creates carry different Idempotency-Keys: a key names one request", false,
			cmp.Equal(ex.parameter("createPet", "Idempotency-Key"), ex.parameter("placeOrder", "Idempotency-Key"))},
		{"listEvents shows the order placeOrder placed, then as updateOrder delivered it", []any{order, ex.response("updateOrder", 200)}, fieldOf(events, "data")},
		{"listEvents' events happened when the order was placed, then delivered",
			[]any{order.(map[string]any)["placedAt"], ex.response("updateOrder", 200).(map[string]any)["updatedAt"]}, fieldOf(events, "occurredAt")},
		{"listEvents' stream example carries the events of its JSON example", events, streamExampleEvents(t, ex)},
		{"createEventTicket's ticket expires 60 s after the order was delivered, the story's last instant",
			mustTimestamp(t, ex.response("updateOrder", 200), "updatedAt").Add(ticketTTL), mustTimestamp(t, ex.response("createEventTicket", 201), "expiresAt")},
		{"createWebhook answers its request, active, with an id and a secret", withFields(ex.request("createWebhook", "application/json"), "id", hook.(map[string]any)["id"],
			"status", "active", "statusReason", nil, "createdAt", hook.(map[string]any)["createdAt"], "secret", ex.response("createWebhook", 201).(map[string]any)["secret"]),
			ex.response("createWebhook", 201)},
		{"getWebhook returns createWebhook's subscription without its secret", withoutField(ex.response("createWebhook", 201), "secret"), hook},
		{"listWebhooks lists that subscription, of its status example", []any{withFields(hook, "status", ex.parameter("listWebhooks", "status"))}, ex.response("listWebhooks", 200)},
		{"getWebhook and the others ask for that subscription", hook.(map[string]any)["id"], ex.parameter("getWebhook", "webhookId")},
		{"updateWebhook answers getWebhook's subscription with the patch applied (RFC 7396)", ex.response("updateWebhook", 200), mergePatch(hook, ex.request("updateWebhook", "application/merge-patch+json"))},
		{"updateWebhook's two media types carry the same patch", ex.request("updateWebhook", "application/merge-patch+json"), ex.request("updateWebhook", "application/json")},
		{"rotateWebhookSecret answers the subscription with a new secret", withFields(hook, "secret", ex.response("rotateWebhookSecret", 200).(map[string]any)["secret"]), ex.response("rotateWebhookSecret", 200)},
		{"the rotated secret is another one", false, cmp.Equal(ex.response("rotateWebhookSecret", 200).(map[string]any)["secret"], ex.response("createWebhook", 201).(map[string]any)["secret"])},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("examples mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// streamExampleEvents decodes the events in the data lines of listEvents'
// text/event-stream example (a bookmark's data, {}, is no event).
func streamExampleEvents(t *testing.T, ex documentExamples) []any {
	t.Helper()
	_, op := ex.operation("listEvents")
	example, _ := op.Responses.Status(http.StatusOK).Value.Content.Get(eventStreamType).Example.(string)
	var events []any
	for line := range strings.Lines(example) {
		if data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: "); ok && data != "{}" {
			events = append(events, decodeJSON(t, []byte(data)))
		}
	}
	return events
}

// documentExamples finds the examples of the operations, by operationId.
type documentExamples struct {
	t   *testing.T
	doc *openapi3.T
}

// operation returns the operation with the given id and its path.
func (e documentExamples) operation(id string) (string, *openapi3.Operation) {
	e.t.Helper()
	for path, item := range e.doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID == id {
				return path, op
			}
		}
	}
	e.t.Fatalf("no operation %s", id)
	return "", nil
}

// response is the JSON example of the operation's answer with status.
func (e documentExamples) response(id string, status int) any {
	e.t.Helper()
	_, op := e.operation(id)
	ref := op.Responses.Status(status)
	if ref == nil {
		e.t.Fatalf("%s has no %d", id, status)
	}
	v, _ := exampleOf(ref.Value.Content.Get("application/json").Example, ref.Value.Content.Get("application/json").Examples)
	return v
}

// request is the example of the operation's request body of media type mt.
func (e documentExamples) request(id, mt string) any {
	e.t.Helper()
	_, op := e.operation(id)
	m := op.RequestBody.Value.Content.Get(mt)
	if m == nil {
		e.t.Fatalf("%s takes no %s body", id, mt)
	}
	v, _ := exampleOf(m.Example, m.Examples)
	return v
}

// parameter is the example of the operation's parameter called name.
func (e documentExamples) parameter(id, name string) any {
	e.t.Helper()
	_, op := e.operation(id)
	for _, p := range op.Parameters {
		if p.Value.Name == name {
			v, _ := exampleOf(p.Value.Example, p.Value.Examples)
			return v
		}
	}
	e.t.Fatalf("%s has no parameter %s", id, name)
	return nil
}

// withFields returns a copy of the JSON object v with the given fields
// (name, value, name, value...) set.
func withFields(v any, fields ...any) any {
	out := maps.Clone(v.(map[string]any))
	for i := 0; i < len(fields); i += 2 {
		out[fields[i].(string)] = fields[i+1]
	}
	return out
}

// withoutField returns a copy of the JSON object v without the field name.
func withoutField(v any, name string) any {
	out := maps.Clone(v.(map[string]any))
	delete(out, name)
	return out
}

// fieldOf returns the field name of every object of list.
func fieldOf(list []any, name string) []any {
	var out []any
	for _, v := range list {
		out = append(out, v.(map[string]any)[name])
	}
	return out
}

// mergePatch applies a JSON Merge Patch (RFC 7396) to the object target.
func mergePatch(target, patch any) any {
	out := maps.Clone(target.(map[string]any))
	for k, v := range patch.(map[string]any) {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// mustTimestamp parses the RFC 3339 field name of the JSON object v.
func mustTimestamp(t *testing.T, v any, name string) time.Time {
	t.Helper()
	s, _ := v.(map[string]any)[name].(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ts
}

// exampleRequest builds the request an operation's examples describe, as
// Dredd and Portman send it: path parameters, query parameters (arrays
// written as the document's form style without explode: id=1,2) and header
// parameters from their examples, and the body from the example of
// mediaType ("" for none).
func (e documentExamples) exampleRequest(id, mediaType string) (method, target, body string, header map[string]string) {
	e.t.Helper()
	path, op := e.operation(id)
	for m, o := range e.doc.Paths.Value(path).Operations() {
		if o == op {
			method = m
		}
	}
	if len(e.doc.Paths.Value(path).Servers) == 0 {
		path = "/v1" + path // under the document's servers, https://{host}/v1
	}
	header = map[string]string{}
	var query []string
	for _, p := range op.Parameters {
		ex, _ := exampleOf(p.Value.Example, p.Value.Examples)
		var value string
		if list, ok := ex.([]any); ok {
			var items []string
			for _, item := range list {
				items = append(items, plainJSON(e.t, item))
			}
			value = strings.Join(items, ",")
		} else {
			value = plainJSON(e.t, ex)
		}
		switch p.Value.In {
		case "path":
			path = strings.ReplaceAll(path, "{"+p.Value.Name+"}", value)
		case "query":
			query = append(query, p.Value.Name+"="+value)
		case "header":
			header[p.Value.Name] = value
		}
	}
	if len(query) > 0 {
		path += "?" + strings.Join(query, "&")
	}
	if mediaType != "" {
		body = mustJSON(e.t, e.request(id, mediaType))
		header["Content-Type"] = mediaType
	}
	return method, path, body, header
}

// plainJSON writes a scalar as it goes into a URL or a header: a string
// without its quotes, a number as its digits.
func plainJSON(t *testing.T, v any) string {
	t.Helper()
	if s, ok := v.(string); ok {
		return s
	}
	return mustJSON(t, v)
}

// TestOpenAPIExamplesAreWhatTheServiceAnswers sends the example requests, in
// the order of the story the examples tell, to a service over a fresh
// database whose clock reads the example timestamps, and compares each
// answer with the example of its status, whole. Then it produces every
// error example the same way, each from a server in the state it needs.
func TestOpenAPIExamplesAreWhatTheServiceAnswers(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	ex := documentExamples{t: t, doc: doc}
	clock := &fakeClock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	// The stream's example ends with a keep-alive: a short heartbeat sends
	// it soon after the events.
	ts := newTestServer(t, withClock(clock.now), withFeed(feedConfig{heartbeat: 50 * time.Millisecond, retention: defaultEventsRetention, maxStreams: defaultEventsMaxStreams}))
	ts.Store.now = clock.now // the events' occurredAt
	setClock := func(v any, name string) func() { return func() { clock.set(mustTimestamp(t, v, name)) } }

	// The story: Rex is added; Tom joins him (he is in listPets' example);
	// the pets are listed and Rex is looked at; Tom is ordered, the order
	// looked at, listed and delivered; Rex changes category, then leaves
	// the store; the feed, read for the order's events after the two pets'
	// creation, shows the order placed and delivered, as a page and as a
	// stream (which then bookmarks the pets' events it skipped); a ticket
	// is issued. Dredd replays the same operations in the document's order,
	// on a store seeded with listPets' pets, and compares the page's
	// structure with the example's: the order's two events come out the
	// same there.
	steps := []struct {
		operation string
		mediaType string // of the request body, "" for none
		accept    string // the media type of the answer asked for, "" for JSON
		status    int
		before    func() // sets the clock
		// random names the fields of the answer that are random (a
		// ticket): the answer must hold a valid value, not the example's.
		random []string
	}{
		{operation: "createPet", mediaType: "application/json", status: 201},
		{operation: "listPets", status: 200, before: func() { addListedPets(t, ts, ex) }},
		{operation: "getPet", status: 200},
		{operation: "placeOrder", mediaType: "application/json", status: 201, before: setClock(ex.response("placeOrder", 201), "placedAt")},
		{operation: "getOrder", status: 200},
		{operation: "listOrders", status: 200},
		{operation: "updateOrder", mediaType: "application/json", status: 200, before: setClock(ex.response("updateOrder", 200), "updatedAt")},
		{operation: "updateOrder", mediaType: "application/merge-patch+json", status: 200},
		{operation: "updatePet", mediaType: "application/merge-patch+json", status: 200},
		{operation: "updatePet", mediaType: "application/json", status: 200},
		{operation: "deletePet", status: 204},
		{operation: "listEvents", status: 200},
		{operation: "listEvents", accept: eventStreamType, status: 200},
		{operation: "createEventTicket", status: 201, random: []string{"ticket"}},
		{operation: "getHealth", status: 200},
		{operation: "getReadiness", status: 200},
	}
	for _, step := range steps {
		name := step.operation + " with its example"
		if step.mediaType != "" {
			name = step.operation + " with its " + step.mediaType + " example"
		}
		if step.accept != "" {
			name += ", asked for " + step.accept + ","
		}
		ok := t.Run(fmt.Sprintf("%s answers its %d example", name, step.status), func(t *testing.T) {
			if step.before != nil {
				step.before()
			}
			method, target, body, header := ex.exampleRequest(step.operation, step.mediaType)
			if step.accept == eventStreamType {
				header["Accept"] = step.accept
				wantStreamExample(t, ts, ex, step.operation, method, target, header)
				return
			}
			res := ts.do(t, method, target, body, header)
			if res.Status != step.status {
				t.Fatalf("%s %s: status %d, want %d; body %s", method, target, res.Status, step.status, res.Body)
			}
			if step.status == http.StatusNoContent {
				return
			}
			got := decodeJSON(t, res.Body)
			if len(step.random) > 0 {
				_, op := ex.operation(step.operation)
				schema := op.Responses.Status(step.status).Value.Content.Get("application/json").Schema
				if err := schema.Value.VisitJSON(got, openapi3.EnableJSONSchema2020()); err != nil {
					t.Errorf("the answer %s does not match the schema: %v", res.Body, err)
				}
				example, _ := ex.response(step.operation, step.status).(map[string]any)
				for _, field := range step.random {
					got = withFields(got, field, example[field])
				}
			}
			if diff := cmp.Diff(ex.response(step.operation, step.status), got); diff != "" {
				t.Errorf("%s %s: answer mismatch (-example +service):\n%s", method, target, diff)
			}
		})
		if !ok {
			break // the story's later steps stand on this one
		}
	}

	t.Run("getOpenAPIDocument's example is the document cut to what it requires", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/openapi.json", "", nil)
		served := decodeJSON(t, res.Body).(map[string]any)
		info := served["info"].(map[string]any)
		want := map[string]any{"openapi": served["openapi"], "info": map[string]any{"title": info["title"], "version": info["version"]}, "paths": map[string]any{}}
		if diff := cmp.Diff(want, ex.response("getOpenAPIDocument", 200)); diff != "" {
			t.Errorf("example mismatch (-served +example):\n%s", diff)
		}
	})
	t.Run("getMetrics' example names metrics the service has", func(t *testing.T) {
		_, op := ex.operation("getMetrics")
		example, _ := op.Responses.Status(200).Value.Content.Get("text/plain").Example.(string)
		res := ts.do(t, "GET", "/metrics", "", nil)
		for line := range strings.Lines(example) {
			if strings.HasPrefix(line, "# ") && !strings.Contains(string(res.Body), line) {
				t.Errorf("the service's metrics lack the example's line %q", line)
			}
		}
	})
}

// wantStreamExample opens the stream of the operation's example request
// and compares its first bytes, as many as the text/event-stream example
// has, with that example: the stream never ends, so the example shows its
// start. The example ends with a keep-alive, which the stream sends after
// its heartbeat of silence.
func wantStreamExample(t *testing.T, ts *testServer, ex documentExamples, id, method, target string, header map[string]string) {
	t.Helper()
	_, op := ex.operation(id)
	example, _ := op.Responses.Status(http.StatusOK).Value.Content.Get(eventStreamType).Example.(string)
	if example == "" {
		t.Fatalf("%s has no %s example", id, eventStreamType)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req := newRequest(t, ts.URL, method, target, "", header).WithContext(ctx)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != eventStreamType {
		t.Fatalf("%s %s: status %d, Content-Type %q; want 200 and a stream; body %s", method, target, res.StatusCode, res.Header.Get("Content-Type"), readResponse(t, res).Body)
	}
	got := make([]byte, len(example))
	if _, err := io.ReadFull(res.Body, got); err != nil {
		t.Fatalf("reading the stream: %v; read %q", err, got)
	}
	if diff := cmp.Diff(strings.Split(example, "\n"), strings.Split(string(got), "\n")); diff != "" {
		t.Errorf("%s %s: the stream's start mismatch (-example +service):\n%s", method, target, diff)
	}
}

// addListedPets adds, through the API, the pets of listPets' example that
// the store lacks (all but the one createPet's example added), checking that
// each gets the id the example gives it.
func addListedPets(t *testing.T, ts *testServer, ex documentExamples) {
	t.Helper()
	for _, p := range ex.response("listPets", 200).([]any) {
		listed := p.(map[string]any)
		if res := ts.do(t, "GET", "/v1/pets?id="+plainJSON(t, listed["id"]), "", nil); len(decodeJSON(t, res.Body).([]any)) > 0 {
			continue
		}
		np := maps.Clone(listed)
		delete(np, "id")
		res := ts.do(t, "POST", "/v1/pets", mustJSON(t, np), nil)
		if got := decodeJSON(t, res.Body); res.Status != http.StatusCreated || !cmp.Equal(got, p) {
			t.Fatalf("adding the listed pet %v: status %d, body %s", p, res.Status, res.Body)
		}
	}
}

// decodeJSON decodes a JSON body into maps, slices and float64s, as the
// examples of the document are decoded.
func decodeJSON(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Errorf("decode %q: %v", b, err)
	}
	return v
}

// TestOpenAPIErrorExamplesAreWhatTheServiceAnswers produces every error
// example of the document, each from a server in the state its message
// speaks of (the pets and the order of the story), and compares the answer
// with the example, whole: the examples are the service's own words.
func TestOpenAPIErrorExamplesAreWhatTheServiceAnswers(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	ex := documentExamples{t: t, doc: doc}
	send := func(ts *testServer, id, mediaType string) {
		t.Helper()
		method, target, body, header := ex.exampleRequest(id, mediaType)
		if res := ts.do(t, method, target, body, header); res.Status >= 300 {
			t.Fatalf("setting up: %s %s: status %d, body %s", method, target, res.Status, res.Body)
		}
	}
	// placed is the store of the story with Tom's order placed; delivered,
	// with that order delivered.
	placed := newTestServer(t)
	send(placed, "createPet", "application/json")
	addListedPets(t, placed, ex)
	send(placed, "placeOrder", "application/json")
	delivered := newTestServer(t)
	send(delivered, "createPet", "application/json")
	addListedPets(t, delivered, ex)
	send(delivered, "placeOrder", "application/json")
	send(delivered, "updateOrder", "application/json")

	sunset := newTestServer(t, withClock(func() time.Time { return getPetSunset }))
	send(sunset, "createPet", "application/json")
	// The example's budget: 10 requests a second in bursts of 20, on a
	// clock that stands still, so the 21st request is refused for 1 s.
	still := time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)
	limited := newTestServer(t, withClock(func() time.Time { return still }),
		withLimits(limits{idempotencyTTL: defaultIdempotencyTTL, rateLimit: 10, rateBurst: 20}))
	for range 20 {
		limited.do(t, "GET", "/healthz", "", nil) // never counted
		if res := limited.do(t, "GET", "/metrics", "", nil); res.Status != http.StatusOK {
			t.Fatalf("spending the rate limit: status %d", res.Status)
		}
	}
	broken := newTestServer(t)
	broken.Store.Close()
	pruned := prunedServer(t)
	// The example's cap is the default, 100 streams a key.
	streaming := newTestServer(t)
	holdStreams(t, streaming, defaultEventsMaxStreams)
	readOnly := newTestServer(t)
	readOnly.setReadOnly(t, true)
	unreachable, haveUnreachable := unreachableServer(t)

	key := plainJSON(t, ex.parameter("createPet", "Idempotency-Key"))
	noKey := map[string]string{"Authorization": ""}
	big := `{"name":"Rex","categoryId":1}`
	big += strings.Repeat(" ", 1_100_000-len(big))
	getPet := func(status int) string { return fmt.Sprintf("getPet (GET /pets/{petId}) %d application/json", status) }
	listEvents := func(status int) string { return fmt.Sprintf("listEvents (GET /events) %d application/json", status) }
	stream := map[string]string{"Accept": eventStreamType}
	component := func(name string) string { return "#/components/responses/" + name + " application/json" }
	unrouted := func(status int) string { return fmt.Sprintf("%s %d application/json", unroutedKey, status) }
	tests := []struct {
		site   string // the example, as exampleSites names it
		ts     *testServer
		method string
		path   string
		body   string
		header map[string]string
		twice  bool // a second Authorization line, the same key again
	}{
		{site: getPet(400), ts: placed, method: "GET", path: "/v1/pets/1", twice: true},
		{site: component("AuthorizationRepeated"), ts: placed, method: "GET", path: "/v1/pets", twice: true},
		{site: getPet(401), ts: placed, method: "GET", path: "/v1/pets/1", header: noKey},
		{site: getPet(404), ts: placed, method: "GET", path: "/v1/pets/9"},
		{site: getPet(410), ts: sunset, method: "GET", path: "/v1/pets/1"},
		{site: getPet(429), ts: limited, method: "GET", path: "/v1/pets/1"},
		{site: getPet(500), ts: broken, method: "GET", path: "/v1/pets/1"},
		{site: component("Unauthorized"), ts: placed, method: "GET", path: "/v1/pets", header: noKey},
		{site: component("InvalidParameter"), ts: placed, method: "GET", path: "/v1/pets?limit=0"},
		{site: component("InvalidBody"), ts: placed, method: "PATCH", path: "/v1/pets/2", body: `{"name":`},
		{site: component("CreateInvalid"), ts: placed, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`,
			header: map[string]string{idempotencyHeader: `""`}},
		{site: component("PayloadTooLarge"), ts: placed, method: "POST", path: "/v1/pets", body: big},
		{site: component("UnsupportedMediaType"), ts: placed, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`,
			header: map[string]string{"Content-Type": "text/plain"}},
		{site: component("PatchUnsupportedMediaType"), ts: placed, method: "PATCH", path: "/v1/pets/2", body: `[]`,
			header: map[string]string{"Content-Type": "application/json-patch+json"}},
		{site: component("IdempotencyConflict"), method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`,
			header: map[string]string{idempotencyHeader: key}},
		{site: component("IdempotencyMismatch"), ts: placed, method: "POST", path: "/v1/pets", body: `{"name":"Tom","categoryId":2}`,
			header: map[string]string{idempotencyHeader: key}},
		{site: component("PetNotFound"), ts: placed, method: "DELETE", path: "/v1/pets/9"},
		{site: component("PetHasOpenOrder"), ts: placed, method: "PATCH", path: "/v1/pets/2", body: `{"status":"available"}`},
		{site: component("PetHasOrders"), ts: delivered, method: "DELETE", path: "/v1/pets/2"},
		{site: component("PlaceOrderConflict"), ts: placed, method: "POST", path: "/v1/store/orders", body: `{"petId":2}`},
		{site: component("PlaceOrderUnprocessable"), ts: placed, method: "POST", path: "/v1/store/orders", body: `{"petId":9}`},
		{site: component("OrderNotFound"), ts: placed, method: "GET", path: "/v1/store/orders/9"},
		{site: component("WebhookNotFound"), ts: placed, method: "GET", path: "/v1/webhooks/9"},
		{site: component("InvalidTransition"), ts: delivered, method: "PATCH", path: "/v1/store/orders/1", body: `{"status":"cancelled"}`},
		{site: component("RateLimited"), ts: limited, method: "GET", path: "/v1/pets"},
		{site: component("Internal"), ts: broken, method: "GET", path: "/v1/pets"},
		{site: component("Unavailable"), ts: broken, method: "GET", path: "/readyz"},
		{site: component("CannotWrite"), ts: readOnly, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`},
		{site: component("DatabaseUnreachable"), ts: unreachable, method: "GET", path: "/v1/pets"},
		{site: getPet(503), ts: unreachable, method: "GET", path: "/v1/pets/1"},
		{site: listEvents(400), ts: placed, method: "GET", path: "/v1/events?type=pet.born"},
		{site: listEvents(401), ts: placed, method: "GET", path: "/v1/events?ticket=NOSUCHTICKET", header: map[string]string{"Authorization": "", "Accept": eventStreamType}},
		{site: listEvents(410), ts: pruned, method: "GET", path: "/v1/events?after=2"},
		{site: listEvents(429), ts: streaming, method: "GET", path: "/v1/events", header: stream},
		{site: listEvents(503), ts: unreachable, method: "GET", path: "/v1/events"},
		{site: "createEventTicket (POST /events/tickets) 400 application/json", ts: placed, method: "POST", path: "/v1/events/tickets", body: `{}`},
		{site: unrouted(404), ts: placed, method: "GET", path: "/v1/cats"},
		{site: unrouted(405), ts: placed, method: "DELETE", path: "/v1/pets"},
	}
	examples := map[string]any{}
	for _, s := range exampleSites(t, doc) {
		if body, ok := s.example.(map[string]any); ok && body["code"] != nil {
			examples[s.where] = s.example
		}
	}
	// Each operation's 403 names its scope: a key holding only
	// webhooks:write, which no operation of the document needs, gets them all.
	narrow := newServerWithKeyFile(t, testKey+" narrow scopes=webhooks:write\n"+otherTestKey+" narrow2 scopes=events:read\n", time.Now)
	narrowWebhooks := map[string]string{"Authorization": "Bearer " + otherTestKey} // events:read only
	headerFor := func(path string) map[string]string {
		if strings.HasPrefix(path, "/v1/webhooks") {
			return narrowWebhooks
		}
		return nil
	}
	for _, op := range []struct{ site, method, path, body string }{
		{"listPets (GET /pets)", "GET", "/v1/pets", ""},
		{"createPet (POST /pets)", "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`},
		{"getPet (GET /pets/{petId})", "GET", "/v1/pets/1", ""},
		{"updatePet (PATCH /pets/{petId})", "PATCH", "/v1/pets/1", `{"name":"Rex"}`},
		{"deletePet (DELETE /pets/{petId})", "DELETE", "/v1/pets/1", ""},
		{"listOrders (GET /store/orders)", "GET", "/v1/store/orders", ""},
		{"placeOrder (POST /store/orders)", "POST", "/v1/store/orders", `{"petId":1}`},
		{"getOrder (GET /store/orders/{orderId})", "GET", "/v1/store/orders/1", ""},
		{"updateOrder (PATCH /store/orders/{orderId})", "PATCH", "/v1/store/orders/1", `{"status":"delivered"}`},
		{"getMetrics (GET /metrics)", "GET", "/metrics", ""},
		{"listEvents (GET /events)", "GET", "/v1/events", ""},
		{"createEventTicket (POST /events/tickets)", "POST", "/v1/events/tickets", ""},
		{"listWebhooks (GET /webhooks)", "GET", "/v1/webhooks", ""},
		{"createWebhook (POST /webhooks)", "POST", "/v1/webhooks", `{"url":"https://192.0.2.10/hook"}`},
		{"getWebhook (GET /webhooks/{webhookId})", "GET", "/v1/webhooks/1", ""},
		{"updateWebhook (PATCH /webhooks/{webhookId})", "PATCH", "/v1/webhooks/1", `{"status":"paused"}`},
		{"deleteWebhook (DELETE /webhooks/{webhookId})", "DELETE", "/v1/webhooks/1", ""},
		{"rotateWebhookSecret (POST /webhooks/{webhookId}/secret)", "POST", "/v1/webhooks/1/secret", ""},
		{"listWebhookDeliveries (GET /webhooks/{webhookId}/deliveries)", "GET", "/v1/webhooks/1/deliveries", ""},
	} {
		tests = append(tests, struct {
			site   string
			ts     *testServer
			method string
			path   string
			body   string
			header map[string]string
			twice  bool
		}{site: op.site + " 403 application/json", ts: narrow, method: op.method, path: op.path, body: op.body, header: headerFor(op.path)})
	}
	var covered []string
	for _, tt := range tests {
		if (tt.site == component("DatabaseUnreachable") || tt.site == getPet(503) || tt.site == listEvents(503)) && !haveUnreachable {
			covered = append(covered, tt.site) // recorded by unreachableServer, for the end of the run
			continue
		}
		covered = append(covered, tt.site)
		t.Run("the example of "+tt.site, func(t *testing.T) {
			want, ok := examples[tt.site]
			if !ok {
				t.Fatalf("the document has no error example %q", tt.site)
			}
			ts := tt.ts
			if ts == nil { // the create is held in flight on a server of its own
				ts = holdInFlightCreate(t, tt.path, tt.header[idempotencyHeader], tt.body)
			}
			res := ts.do(t, tt.method, tt.path, tt.body, tt.header)
			if tt.twice {
				req := newRequest(t, ts.URL, tt.method, tt.path, tt.body, tt.header)
				req.Header.Add("Authorization", "Bearer "+testKey)
				got, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res = readResponse(t, got)
			}
			if diff := cmp.Diff(want, decodeJSON(t, res.Body)); diff != "" {
				t.Errorf("%s %s: status %d, answer mismatch (-example +service):\n%s", tt.method, tt.path, res.Status, diff)
			}
		})
	}
	t.Run("every error example is produced", func(t *testing.T) {
		if diff := cmp.Diff(slices.Sorted(maps.Keys(examples)), slices.Sorted(slices.Values(covered))); diff != "" {
			t.Errorf("error examples (-) that no row produces:\n%s", diff)
		}
	})
}
