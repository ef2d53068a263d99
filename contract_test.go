package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/go-cmp/cmp"
)

// unroutedKey is the extension of openapi.json that lists the answers to a
// request outside every operation (an unknown path, a method a path does not
// take): OpenAPI has no place of its own for them.
const unroutedKey = "x-unrouted-responses"

// The servers a contract row can be answered by.
const (
	serverHealthy  = ""             // a working service with the seeded pets
	serverDBClosed = "db-closed"    // its database closed: every query fails
	serverSunset   = "after-sunset" // its clock at getPet's sunset
	// Its PostgreSQL database stopped answering after it started (only
	// where PostgreSQL is installed: always in CI).
	serverUnreachable = "unreachable"
	// Its test key has used up a rate limit of one request at first, then
	// one per 1,000 s.
	serverRateLimited = "rate-limited"
	// Its writer refuses writes (SQLITE_READONLY), as on a read-only disk;
	// it holds contractData's readOnlyPet and readOnlyOrder.
	serverReadOnly = "read-only"
	// A server made for the row alone, on which the row's own request (its
	// path, Idempotency-Key and body) is already in flight: another
	// connection holds the write lock until the row has run.
	serverInFlight = "in-flight"
	// Its client address, 127.0.0.1, has spent a budget of one failed
	// authentication.
	serverThrottled = "throttled"
	// Its feed pruned events 1 to 3 (see prunedServer).
	serverPruned = "pruned"
	// Its feed allows one stream per key, and the test key holds it open.
	serverStreamsFull = "streams-full"
	// Its test key holds only the scope webhooks:write, which no operation
	// of the document needs (see newServerWithKeyFile).
	serverNarrowKey = "narrow-key"
)

// ticketPlaceholder, in a row's path, is replaced by a fresh ticket that
// the row's server issued (createEventTicket) just before the row runs: a
// ticket opens one stream and expires after 60 s.
const ticketPlaceholder = "{ticket}"

// contractCase is one row of the contract table: a request and the status the
// service must answer it with. The response is then validated against the
// document, and the request too.
type contractCase struct {
	rule   string            // the behaviour the row shows
	server string            // which server answers: one of the server* constants
	method string            // HTTP method
	path   string            // path and query, from the root (/v1/... or /healthz)
	body   string            // request body; when not empty, Content-Type is application/json
	header map[string]string // headers added to the test key; an empty value removes one
	status int               // the status the service must answer
	// breaksDocument says the request itself is outside the document (no
	// key, a parameter out of range, a body the schema refuses, a path or
	// method no operation has). The validator must refuse it: that shows the
	// document states the rule the service enforces. False means the
	// validator must accept the request, even if the service refuses it for
	// a rule the schema cannot express (such as `1.0` for an integer).
	breaksDocument bool
	// secondAuthorization, when not empty, is sent as a second
	// Authorization line after the test key's.
	secondAuthorization string
	// stream says the answer is a stream, which never ends: the row reads
	// its first frame (the retry field), then hangs up, and the document
	// is checked against the status, the headers and that frame.
	stream bool
}

// contractData is what TestContract's set-up stores before any row runs,
// with the ids as they appear in paths and bodies. Every row that changes
// data (places, delivers, cancels, changes or deletes) has a pet or an order
// that no other row reads, and every row that needs a state finds it made
// here: no row depends on which rows ran before it.
type contractData struct {
	// The healthy server's pets 1 to 3 are Rex (available), Tom (pending,
	// with no order: createPet can add a pet as pending) and Kit (available).
	petPending  string // Tom
	petSold     string // sold by orderDelivered; a row makes it available again, as a returned animal
	petOrdered  string // pending: orderPlaced is placed for it
	petToOrder  string // available: the row that places an order takes it
	petToPatch  string // available, no order: the updatePet rows change it, each whatever the others did
	petToDelete string // available, no order: the deletePet row removes it

	orderDelivered string // delivered: it sold petSold
	orderPlaced    string // placed for petOrdered; the rows that use it leave it placed
	orderToDeliver string // placed: the row that delivers it is the only one to use it
	orderToCancel  string // placed: the row that cancels it is the only one to use it

	petKey   string // the Idempotency-Key a pet was created with
	orderKey string // the Idempotency-Key orderKeyed was placed with
	// orderKeyedBody is the body orderKey was placed with; its pet is
	// pending from then on.
	orderKeyedBody string

	// On the read-only server: a pet without orders, and a placed order
	// of another pet, both stored before its writer turned read-only; and
	// a ticket it issued then (using a ticket is a write, so it is 503
	// whether or not the ticket has expired since).
	readOnlyPet, readOnlyOrder, readOnlyTicket string

	// Webhook subscriptions: one the rows read (and rotate), one the
	// updateWebhook rows change, one the deleteWebhook row removes, and
	// one on the read-only server.
	webhook, webhookToPatch, webhookToDelete, readOnlyWebhook string
}

// seedContract stores contractData on the healthy server ts and on the
// read-only server ro, then makes ro read-only. Everything goes through the
// API, as a client would make it.
func seedContract(t *testing.T, ts, ro *testServer) contractData {
	t.Helper()
	pet := func(ts *testServer, name, status string) string {
		t.Helper()
		p := ts.createPet(t, name, 1, status)
		if p.ID == 0 {
			t.Fatalf("seeding the contract: createPet %s failed", name)
		}
		return strconv.FormatInt(p.ID, 10)
	}
	send := func(ts *testServer, method, path, body string, hdr map[string]string, status int) string {
		t.Helper()
		res := ts.do(t, method, path, body, hdr)
		var created struct {
			ID int64 `json:"id"`
		}
		if res.Status != status || json.Unmarshal(res.Body, &created) != nil {
			t.Fatalf("seeding the contract: %s %s %s: status %d, body %s; want %d", method, path, body, res.Status, res.Body, status)
		}
		return strconv.FormatInt(created.ID, 10)
	}
	order := func(ts *testServer, petID string) string {
		t.Helper()
		return send(ts, "POST", "/v1/store/orders", `{"petId":`+petID+`}`, nil, http.StatusCreated)
	}
	var d contractData
	pet(ts, "Rex", "available")
	d.petPending = pet(ts, "Tom", "pending")
	pet(ts, "Kit", "available")
	d.petSold = pet(ts, "Sold", "")
	d.orderDelivered = order(ts, d.petSold)
	send(ts, "PATCH", "/v1/store/orders/"+d.orderDelivered, `{"status":"delivered"}`, nil, http.StatusOK)
	d.petOrdered = pet(ts, "Ordered", "")
	d.orderPlaced = order(ts, d.petOrdered)
	d.petToOrder = pet(ts, "To order", "")
	d.orderToDeliver = order(ts, pet(ts, "To deliver", ""))
	d.orderToCancel = order(ts, pet(ts, "To cancel", ""))
	d.petToPatch = pet(ts, "To patch", "")
	d.petToDelete = pet(ts, "To delete", "")
	d.petKey, d.orderKey = "contract-pet", "contract-order"
	send(ts, "POST", "/v1/pets", `{"name":"Once","categoryId":1}`, map[string]string{"Idempotency-Key": d.petKey}, http.StatusCreated)
	d.orderKeyedBody = `{"petId":` + pet(ts, "Keyed", "") + `}`
	send(ts, "POST", "/v1/store/orders", d.orderKeyedBody, map[string]string{"Idempotency-Key": d.orderKey}, http.StatusCreated)

	hook := `{"url":"https://example.com/hooks/petstore"}`
	d.webhook = send(ts, "POST", "/v1/webhooks", hook, nil, http.StatusCreated)
	d.webhookToPatch = send(ts, "POST", "/v1/webhooks", hook, nil, http.StatusCreated)
	d.webhookToDelete = send(ts, "POST", "/v1/webhooks", hook, nil, http.StatusCreated)
	d.readOnlyWebhook = send(ro, "POST", "/v1/webhooks", hook, nil, http.StatusCreated)

	d.readOnlyPet = pet(ro, "Rex", "")
	d.readOnlyOrder = order(ro, pet(ro, "Tom", ""))
	d.readOnlyTicket = newTicket(t, ro.URL)
	ro.setReadOnly(t, true)
	return d
}

// contractTable covers every operation and every documented status. A new
// operation, status or header in openapi.json needs a row here, and a new
// behaviour of the service needs the document to describe it: TestContract
// fails on a gap either way. d is what the set-up stored (see contractData);
// POST rows add pets and orders that no other row reads.
func contractTable(etag string, d contractData) []contractCase {
	noKey := map[string]string{"Authorization": ""}
	wrongKey := map[string]string{"Authorization": "Bearer not-a-key"}
	narrowWebhooks := map[string]string{"Authorization": "Bearer " + otherTestKey} // on serverNarrowKey: events:read only
	mergePatch := map[string]string{"Content-Type": "application/merge-patch+json"}
	jsonPatch := map[string]string{"Content-Type": "application/json-patch+json"}
	textPlain := map[string]string{"Content-Type": "text/plain"}
	twice := "Bearer " + testKey // a second Authorization line, the same key again
	stream := map[string]string{"Accept": eventStreamType}
	streamNoKey := map[string]string{"Accept": eventStreamType, "Authorization": ""}
	return []contractCase{
		// listPets
		{rule: "a page with more pets after it", method: "GET", path: "/v1/pets?limit=2", status: 200},
		{rule: "the last page, with the after cursor", method: "GET", path: "/v1/pets?limit=2&after=2", status: 200},
		{rule: "a status filter with a cursor", method: "GET", path: "/v1/pets?status=available&limit=1&after=0", status: 200},
		{rule: "nothing matches: an empty array", method: "GET", path: "/v1/pets?status=sold&after=1000", status: 200},
		{rule: "limit above 100", method: "GET", path: "/v1/pets?limit=101", status: 400, breaksDocument: true},
		{rule: "limit below 1", method: "GET", path: "/v1/pets?limit=0", status: 400, breaksDocument: true},
		{rule: "status not a PetStatus", method: "GET", path: "/v1/pets?status=lost", status: 400, breaksDocument: true},
		{rule: "after not an integer", method: "GET", path: "/v1/pets?after=x", status: 400, breaksDocument: true},
		{rule: "an unknown parameter, which the schema cannot refuse", method: "GET", path: "/v1/pets?limt=5", status: 400},
		{rule: "the id filter", method: "GET", path: "/v1/pets?id=1,3", status: 200},
		{rule: "the id filter, with repeats and out of order, paged: the Link carries the ids", method: "GET", path: "/v1/pets?id=3,1,1&limit=1", status: 200},
		{rule: "the id filter with a status filter, paged", method: "GET", path: "/v1/pets?status=available&id=1,2,3&limit=1&after=0", status: 200},
		{rule: "the id filter, no such pet: an empty array", method: "GET", path: "/v1/pets?id=999999", status: 200},
		{rule: "the id filter of 100 ids", method: "GET", path: "/v1/pets?id=" + idList(100), status: 200},
		{rule: "the id filter of 101 ids", method: "GET", path: "/v1/pets?id=" + idList(101), status: 400, breaksDocument: true},
		{rule: "the id filter of 100 ids of 19 digits, paged one by one: its Link could pass 512 bytes", method: "GET", path: "/v1/pets?limit=1&id=1," + longIDList(99), status: 400},
		{rule: "the id filter: an id that cannot exist", method: "GET", path: "/v1/pets?id=1,0", status: 400, breaksDocument: true},
		{rule: "the id filter: an id that is not a number", method: "GET", path: "/v1/pets?id=1,rex", status: 400, breaksDocument: true},
		{rule: "the id filter: an empty item", method: "GET", path: "/v1/pets?id=1,,3", status: 400, breaksDocument: true},
		{rule: "listPets without a key", method: "GET", path: "/v1/pets", header: noKey, status: 401, breaksDocument: true},
		{rule: "listPets with a wrong key", method: "GET", path: "/v1/pets", header: wrongKey, status: 401},
		{rule: "listPets when the database fails", server: serverDBClosed, method: "GET", path: "/v1/pets", status: 500},
		{rule: "listPets when the database cannot be reached", server: serverUnreachable, method: "GET", path: "/v1/pets", status: 503},
		{rule: "listPets with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/pets", secondAuthorization: twice, status: 400},

		// createPet
		{rule: "a minimal NewPet", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, status: 201},
		{rule: "a NewPet with every field", method: "POST", path: "/v1/pets", body: `{"name":"Tom","categoryId":9223372036854775807,"status":"sold"}`, status: 201},
		{rule: "charset parameter on the media type", method: "POST", path: "/v1/pets", body: `{"name":"Kit","categoryId":2}`,
			header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, status: 201},
		{rule: "categoryId missing", method: "POST", path: "/v1/pets", body: `{"name":"Rex"}`, status: 400, breaksDocument: true},
		{rule: "a blank name", method: "POST", path: "/v1/pets", body: `{"name":"  ","categoryId":1}`, status: 400, breaksDocument: true},
		{rule: "a name of 101 characters", method: "POST", path: "/v1/pets", body: `{"name":"` + strings.Repeat("é", 101) + `","categoryId":1}`, status: 400, breaksDocument: true},
		{rule: "a control character in the name", method: "POST", path: "/v1/pets", body: `{"name":"Re\nx","categoryId":1}`, status: 400, breaksDocument: true},
		{rule: "a client-supplied id", method: "POST", path: "/v1/pets", body: `{"id":7,"name":"Rex","categoryId":1}`, status: 400, breaksDocument: true},
		{rule: "categoryId 0", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":0}`, status: 400, breaksDocument: true},
		{rule: "categoryId written as a fraction, which the schema cannot refuse", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1.0}`, status: 400},
		{rule: "a body that is not JSON", method: "POST", path: "/v1/pets", body: `{"name":`, status: 400, breaksDocument: true},
		{rule: "createPet without a key", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, header: noKey, status: 401, breaksDocument: true},
		{rule: "a body over 1 MiB", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}` + strings.Repeat(" ", maxBodyBytes), status: 413},
		{rule: "a body that is not application/json", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`,
			header: textPlain, status: 415, breaksDocument: true},
		{rule: "createPet with two Authorization headers, which the schema cannot refuse", method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, secondAuthorization: twice, status: 400},
		{rule: "createPet when the database fails", server: serverDBClosed, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, status: 500},

		{rule: "a create with an Idempotency-Key", method: "POST", path: "/v1/pets", body: `{"name":"New","categoryId":1}`,
			header: map[string]string{"Idempotency-Key": "contract-new-pet"}, status: 201},
		{rule: "a retry with the same key and pet replays the 201", method: "POST", path: "/v1/pets", body: `{"name":"Once","categoryId":1}`,
			header: map[string]string{"Idempotency-Key": `"` + d.petKey + `"`}, status: 201},
		{rule: "the same key for a different pet", method: "POST", path: "/v1/pets", body: `{"name":"Twice","categoryId":1}`,
			header: map[string]string{"Idempotency-Key": d.petKey}, status: 422},
		{rule: "the key of an order, on createPet", method: "POST", path: "/v1/pets", body: `{"name":"Once","categoryId":1}`,
			header: map[string]string{"Idempotency-Key": d.orderKey}, status: 422},
		{rule: "the same key while the first is still in flight", server: serverInFlight, method: "POST", path: "/v1/pets", body: `{"name":"Held","categoryId":1}`,
			header: map[string]string{"Idempotency-Key": "held"}, status: 409},
		{rule: "an Idempotency-Key that is an empty quoted string", method: "POST", path: "/v1/pets",
			body: `{"name":"Rex","categoryId":1}`, header: map[string]string{"Idempotency-Key": `""`}, status: 400, breaksDocument: true},
		{rule: "an Idempotency-Key that is not printable ASCII", method: "POST", path: "/v1/pets",
			body: `{"name":"Rex","categoryId":1}`, header: map[string]string{"Idempotency-Key": "clé"}, status: 400, breaksDocument: true},
		{rule: "createPet when the disk cannot be written", server: serverReadOnly, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, status: 503},
		{rule: "createPet over the rate limit", server: serverRateLimited, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, status: 429},
		{rule: "listPets over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/pets", status: 429},
		{rule: "listPets without a key, from an address that failed too often", server: serverThrottled, method: "GET", path: "/v1/pets", header: noKey, status: 429, breaksDocument: true},
		{rule: "getPet with a wrong key, from an address that failed too often", server: serverThrottled, method: "GET", path: "/v1/pets/1", header: wrongKey, status: 429},

		// getPet
		{rule: "an existing pet, with the deprecation headers", method: "GET", path: "/v1/pets/1", status: 200},
		{rule: "an id no pet has", method: "GET", path: "/v1/pets/999999", status: 404},
		{rule: "an id that cannot exist", method: "GET", path: "/v1/pets/0", status: 404, breaksDocument: true},
		{rule: "an id that is not a number", method: "GET", path: "/v1/pets/rex", status: 404, breaksDocument: true},
		{rule: "getPet without a key", method: "GET", path: "/v1/pets/1", header: noKey, status: 401, breaksDocument: true},
		{rule: "getPet with a wrong key", method: "GET", path: "/v1/pets/1", header: wrongKey, status: 401},
		{rule: "getPet from the sunset on", server: serverSunset, method: "GET", path: "/v1/pets/1", status: 410},
		{rule: "getPet when the database fails", server: serverDBClosed, method: "GET", path: "/v1/pets/1", status: 500},
		{rule: "getPet when the database cannot be reached", server: serverUnreachable, method: "GET", path: "/v1/pets/1", status: 503},
		{rule: "getPet with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/pets/1", secondAuthorization: twice, status: 400},
		{rule: "getPet over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/pets/1", status: 429},

		// updatePet
		{rule: "a merge patch of name and category", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"Patched","categoryId":2}`,
			header: mergePatch, status: 200},
		{rule: "a patch of the status, sent as application/json", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"status":"sold"}`, status: 200},
		{rule: "an empty patch changes nothing", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{}`, header: mergePatch, status: 200},
		{rule: "a pet with a placed order can change its name", method: "PATCH", path: "/v1/pets/" + d.petOrdered, body: `{"name":"Renamed"}`, status: 200},
		{rule: "a pet sold by a delivered order can be made available again", method: "PATCH", path: "/v1/pets/" + d.petSold, body: `{"status":"available"}`,
			header: mergePatch, status: 200},
		{rule: "a pet with a placed order cannot change its status", method: "PATCH", path: "/v1/pets/" + d.petOrdered, body: `{"status":"available"}`,
			header: mergePatch, status: 409},
		{rule: "a null removes nothing", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":null}`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "a patch of the id", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"id":1}`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "a patch with an unknown field", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"colour":"red"}`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "a patch to a status that is not a PetStatus", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"status":"lost"}`, status: 400, breaksDocument: true},
		{rule: "a patch that is not an object", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `[]`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "a patch with a field twice, which the schema cannot refuse", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"A","name":"B"}`,
			header: mergePatch, status: 400},
		{rule: "a patch of categoryId written as a fraction, which the schema cannot refuse", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"categoryId":1.0}`,
			status: 400},
		{rule: "a patch of a pet that does not exist", method: "PATCH", path: "/v1/pets/999999", body: `{"name":"Nobody"}`, header: mergePatch, status: 404},
		{rule: "a patch of an id that cannot exist", method: "PATCH", path: "/v1/pets/0", body: `{"name":"Nobody"}`, header: mergePatch, status: 404, breaksDocument: true},
		{rule: "a patch over 1 MiB", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"Big"}` + strings.Repeat(" ", maxBodyBytes), header: mergePatch, status: 413},
		{rule: "a patch that is a JSON Patch, not a merge patch", method: "PATCH", path: "/v1/pets/" + d.petToPatch,
			body: `[{"op":"replace","path":"/name","value":"Rex"}]`, header: jsonPatch, status: 415, breaksDocument: true},
		{rule: "a patch sent as text", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"Rex"}`, header: textPlain, status: 415, breaksDocument: true},
		{rule: "updatePet without a key", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"Rex"}`, header: noKey, status: 401, breaksDocument: true},
		{rule: "updatePet with two Authorization headers, which the schema cannot refuse", method: "PATCH", path: "/v1/pets/" + d.petToPatch, body: `{"name":"Rex"}`, secondAuthorization: twice, status: 400},
		{rule: "updatePet over the rate limit", server: serverRateLimited, method: "PATCH", path: "/v1/pets/1", body: `{"name":"Rex"}`, status: 429},
		{rule: "updatePet when the database fails", server: serverDBClosed, method: "PATCH", path: "/v1/pets/1", body: `{"name":"Rex"}`, status: 500},
		{rule: "updatePet when the disk cannot be written", server: serverReadOnly, method: "PATCH", path: "/v1/pets/" + d.readOnlyPet, body: `{"name":"Renamed"}`, status: 503},

		// deletePet
		{rule: "a pet no order names is removed", method: "DELETE", path: "/v1/pets/" + d.petToDelete, status: 204},
		{rule: "a pet that does not exist", method: "DELETE", path: "/v1/pets/999999", status: 404},
		{rule: "a pet id that cannot exist", method: "DELETE", path: "/v1/pets/0", status: 404, breaksDocument: true},
		{rule: "a pet that a delivered order names stays", method: "DELETE", path: "/v1/pets/" + d.petSold, status: 409},
		{rule: "a pet that a placed order names stays", method: "DELETE", path: "/v1/pets/" + d.petOrdered, status: 409},
		{rule: "deletePet without a key", method: "DELETE", path: "/v1/pets/" + d.petToDelete, header: noKey, status: 401, breaksDocument: true},
		{rule: "deletePet with two Authorization headers, which the schema cannot refuse", method: "DELETE", path: "/v1/pets/" + d.petToDelete, secondAuthorization: twice, status: 400},
		{rule: "deletePet over the rate limit", server: serverRateLimited, method: "DELETE", path: "/v1/pets/1", status: 429},
		{rule: "deletePet when the database fails", server: serverDBClosed, method: "DELETE", path: "/v1/pets/1", status: 500},
		{rule: "deletePet when the disk cannot be written", server: serverReadOnly, method: "DELETE", path: "/v1/pets/" + d.readOnlyPet, status: 503},

		// listOrders
		{rule: "a page of orders with more after it", method: "GET", path: "/v1/store/orders?limit=2", status: 200},
		{rule: "the last page of orders, with the after cursor", method: "GET", path: "/v1/store/orders?after=1", status: 200},
		{rule: "a status filter over orders, paged", method: "GET", path: "/v1/store/orders?status=placed&limit=1&after=0", status: 200},
		{rule: "no order matches: an empty array", method: "GET", path: "/v1/store/orders?status=cancelled&after=1000000", status: 200},
		{rule: "listOrders: limit above 100", method: "GET", path: "/v1/store/orders?limit=101", status: 400, breaksDocument: true},
		{rule: "listOrders: status not an OrderStatus", method: "GET", path: "/v1/store/orders?status=sold", status: 400, breaksDocument: true},
		{rule: "listOrders: after not an integer", method: "GET", path: "/v1/store/orders?after=x", status: 400, breaksDocument: true},
		{rule: "listOrders has no id filter, which the schema cannot refuse", method: "GET", path: "/v1/store/orders?id=1", status: 400},
		{rule: "listOrders without a key", method: "GET", path: "/v1/store/orders", header: noKey, status: 401, breaksDocument: true},
		{rule: "listOrders with a wrong key", method: "GET", path: "/v1/store/orders", header: wrongKey, status: 401},
		{rule: "listOrders with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/store/orders", secondAuthorization: twice, status: 400},
		{rule: "listOrders over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/store/orders", status: 429},
		{rule: "listOrders when the database fails", server: serverDBClosed, method: "GET", path: "/v1/store/orders", status: 500},
		{rule: "listOrders when the database cannot be reached", server: serverUnreachable, method: "GET", path: "/v1/store/orders", status: 503},
		{rule: "placeOrder when the database cannot be reached", server: serverUnreachable, method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, status: 503},

		// placeOrder
		{rule: "an order for an available pet", method: "POST", path: "/v1/store/orders", body: `{"petId":` + d.petToOrder + `}`, status: 201},
		{rule: "a retry of an order with the same key and pet replays the 201", method: "POST", path: "/v1/store/orders", body: d.orderKeyedBody,
			header: map[string]string{"Idempotency-Key": d.orderKey}, status: 201},
		{rule: "an order for a pet already ordered", method: "POST", path: "/v1/store/orders", body: `{"petId":` + d.petOrdered + `}`, status: 409},
		{rule: "an order for a pet added as pending", method: "POST", path: "/v1/store/orders", body: `{"petId":` + d.petPending + `}`, status: 409},
		{rule: "an order with the same key while the first is still in flight", server: serverInFlight, method: "POST", path: "/v1/store/orders",
			body: `{"petId":1}`, header: map[string]string{"Idempotency-Key": "held-order"}, status: 409},
		{rule: "an order for a pet that does not exist", method: "POST", path: "/v1/store/orders", body: `{"petId":999999}`, status: 422},
		{rule: "the same key for an order of another pet", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`,
			header: map[string]string{"Idempotency-Key": d.orderKey}, status: 422},
		{rule: "the key of a pet, on placeOrder", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`,
			header: map[string]string{"Idempotency-Key": d.petKey}, status: 422},
		{rule: "petId missing", method: "POST", path: "/v1/store/orders", body: `{}`, status: 400, breaksDocument: true},
		{rule: "petId 0", method: "POST", path: "/v1/store/orders", body: `{"petId":0}`, status: 400, breaksDocument: true},
		{rule: "petId as a string", method: "POST", path: "/v1/store/orders", body: `{"petId":"1"}`, status: 400, breaksDocument: true},
		{rule: "a client-supplied order id", method: "POST", path: "/v1/store/orders", body: `{"id":1,"petId":1}`, status: 400, breaksDocument: true},
		{rule: "petId written as a fraction, which the schema cannot refuse", method: "POST", path: "/v1/store/orders", body: `{"petId":1.0}`, status: 400},
		{rule: "an order with an empty quoted Idempotency-Key", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`,
			header: map[string]string{"Idempotency-Key": `""`}, status: 400, breaksDocument: true},
		{rule: "an order over 1 MiB", method: "POST", path: "/v1/store/orders", body: `{"petId":1}` + strings.Repeat(" ", maxBodyBytes), status: 413},
		{rule: "an order that is not application/json", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, header: textPlain, status: 415, breaksDocument: true},
		{rule: "placeOrder without a key", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, header: noKey, status: 401, breaksDocument: true},
		{rule: "placeOrder with two Authorization headers, which the schema cannot refuse", method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, secondAuthorization: twice, status: 400},
		{rule: "placeOrder over the rate limit", server: serverRateLimited, method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, status: 429},
		{rule: "placeOrder when the database fails", server: serverDBClosed, method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, status: 500},
		{rule: "placeOrder when the disk cannot be written", server: serverReadOnly, method: "POST", path: "/v1/store/orders", body: `{"petId":` + d.readOnlyPet + `}`, status: 503},

		// getOrder
		{rule: "an existing order", method: "GET", path: "/v1/store/orders/" + d.orderDelivered, status: 200},
		{rule: "an id no order has", method: "GET", path: "/v1/store/orders/999999", status: 404},
		{rule: "an order id that cannot exist", method: "GET", path: "/v1/store/orders/0", status: 404, breaksDocument: true},
		{rule: "an order id that is not a number", method: "GET", path: "/v1/store/orders/first", status: 404, breaksDocument: true},
		{rule: "getOrder without a key", method: "GET", path: "/v1/store/orders/" + d.orderDelivered, header: noKey, status: 401, breaksDocument: true},
		{rule: "getOrder with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/store/orders/1", secondAuthorization: twice, status: 400},
		{rule: "getOrder over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/store/orders/1", status: 429},
		{rule: "getOrder when the database fails", server: serverDBClosed, method: "GET", path: "/v1/store/orders/1", status: 500},
		{rule: "getOrder when the database cannot be reached", server: serverUnreachable, method: "GET", path: "/v1/store/orders/1", status: 503},

		// updateOrder
		{rule: "a placed order delivered", method: "PATCH", path: "/v1/store/orders/" + d.orderToDeliver, body: `{"status":"delivered"}`, status: 200},
		{rule: "a placed order cancelled, as a merge patch", method: "PATCH", path: "/v1/store/orders/" + d.orderToCancel, body: `{"status":"cancelled"}`,
			header: mergePatch, status: 200},
		{rule: "a placed order asked to be placed changes nothing", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"placed"}`, status: 200},
		{rule: "a delivered order asked to be delivered changes nothing", method: "PATCH", path: "/v1/store/orders/" + d.orderDelivered, body: `{"status":"delivered"}`,
			header: mergePatch, status: 200},
		{rule: "a delivered order cannot be cancelled", method: "PATCH", path: "/v1/store/orders/" + d.orderDelivered, body: `{"status":"cancelled"}`, status: 409},
		{rule: "a delivered order cannot be placed again", method: "PATCH", path: "/v1/store/orders/" + d.orderDelivered, body: `{"status":"placed"}`,
			header: mergePatch, status: 409},
		{rule: "an order update without status", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{}`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "an order update with status null", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":null}`, header: mergePatch, status: 400, breaksDocument: true},
		{rule: "an order update to a status that is not an OrderStatus", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"sold"}`,
			status: 400, breaksDocument: true},
		{rule: "an order update with another field", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"placed","petId":1}`,
			status: 400, breaksDocument: true},
		{rule: "an order update with status twice, which the schema cannot refuse", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced,
			body: `{"status":"placed","status":"placed"}`, status: 400},
		{rule: "an update of an order that does not exist", method: "PATCH", path: "/v1/store/orders/999999", body: `{"status":"delivered"}`, status: 404},
		{rule: "an update of an order id that cannot exist", method: "PATCH", path: "/v1/store/orders/0", body: `{"status":"delivered"}`, status: 404, breaksDocument: true},
		{rule: "an order update over 1 MiB", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"placed"}` + strings.Repeat(" ", maxBodyBytes),
			status: 413},
		{rule: "an order update that is a JSON Patch", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced,
			body: `[{"op":"replace","path":"/status","value":"delivered"}]`, header: jsonPatch, status: 415, breaksDocument: true},
		{rule: "updateOrder without a key", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"delivered"}`, header: noKey, status: 401,
			breaksDocument: true},
		{rule: "updateOrder with two Authorization headers, which the schema cannot refuse", method: "PATCH", path: "/v1/store/orders/" + d.orderPlaced, body: `{"status":"delivered"}`, secondAuthorization: twice, status: 400},
		{rule: "updateOrder over the rate limit", server: serverRateLimited, method: "PATCH", path: "/v1/store/orders/1", body: `{"status":"delivered"}`, status: 429},
		{rule: "updateOrder when the database fails", server: serverDBClosed, method: "PATCH", path: "/v1/store/orders/1", body: `{"status":"delivered"}`, status: 500},
		{rule: "updateOrder when the disk cannot be written", server: serverReadOnly, method: "PATCH", path: "/v1/store/orders/" + d.readOnlyOrder,
			body: `{"status":"delivered"}`, status: 503},

		// listEvents
		{rule: "the feed from its start: a page, with the Link to the next", method: "GET", path: "/v1/events", status: 200},
		{rule: "a page after a cursor, of some types, limited: the Link keeps them", method: "GET", path: "/v1/events?after=1&limit=2&type=order.*,pet.created", status: 200},
		{rule: "a cursor past the newest event: an empty page, with the Link", method: "GET", path: "/v1/events?after=1000000", status: 200},
		{rule: "the stream, resuming after Last-Event-ID", method: "GET", path: "/v1/events?type=pet.*",
			header: map[string]string{"Accept": eventStreamType, "Last-Event-ID": "1"}, stream: true, status: 200},
		{rule: "the stream, opened with a ticket and no key", method: "GET", path: "/v1/events?ticket=" + ticketPlaceholder, header: streamNoKey, stream: true, status: 200},
		{rule: "a page asked for with a ticket and no key: a ticket opens only a stream", method: "GET", path: "/v1/events?limit=1&ticket=" + ticketPlaceholder,
			header: map[string]string{"Authorization": ""}, status: 400},
		{rule: "listEvents: limit above 1000", method: "GET", path: "/v1/events?limit=1001", status: 400, breaksDocument: true},
		{rule: "listEvents: limit below 1", method: "GET", path: "/v1/events?limit=0", status: 400, breaksDocument: true},
		{rule: "a type that is no event type", method: "GET", path: "/v1/events?type=pet.born", status: 400, breaksDocument: true},
		{rule: "a type list with an empty item", method: "GET", path: "/v1/events?type=pet.*,", status: 400, breaksDocument: true},
		{rule: "listEvents: after not an integer", method: "GET", path: "/v1/events?after=x", status: 400, breaksDocument: true},
		{rule: "listEvents: an unknown parameter, which the schema cannot refuse", method: "GET", path: "/v1/events?limt=5", status: 400},
		{rule: "a stream's Last-Event-ID that is not an event id", method: "GET", path: "/v1/events",
			header: map[string]string{"Accept": eventStreamType, "Last-Event-ID": "x"}, status: 400, breaksDocument: true},
		{rule: "listEvents with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/events", secondAuthorization: twice, status: 400},
		{rule: "listEvents without a key", method: "GET", path: "/v1/events", header: noKey, status: 401, breaksDocument: true},
		{rule: "listEvents with a wrong key", method: "GET", path: "/v1/events", header: wrongKey, status: 401},
		{rule: "a stream with a ticket that is not valid", method: "GET", path: "/v1/events?ticket=NOSUCHTICKET", header: streamNoKey, status: 401},
		{rule: "a cursor before pruned events", server: serverPruned, method: "GET", path: "/v1/events?after=2", status: 410},
		{rule: "a stream resuming before pruned events", server: serverPruned, method: "GET", path: "/v1/events",
			header: map[string]string{"Accept": eventStreamType, "Last-Event-ID": "1"}, status: 410},
		{rule: "listEvents over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/events", status: 429},
		{rule: "a stream past the key's cap of open streams", server: serverStreamsFull, method: "GET", path: "/v1/events", header: stream, status: 429},
		{rule: "listEvents when the database fails", server: serverDBClosed, method: "GET", path: "/v1/events", status: 500},
		{rule: "listEvents when the database cannot be reached", server: serverUnreachable, method: "GET", path: "/v1/events", status: 503},
		{rule: "a ticket used when the disk cannot be written: using it is a write", server: serverReadOnly, method: "GET", path: "/v1/events?ticket=" + d.readOnlyTicket,
			header: streamNoKey, status: 503},

		// createEventTicket
		{rule: "a ticket", method: "POST", path: "/v1/events/tickets", status: 201},
		{rule: "a ticket request with a body, which the schema cannot refuse", method: "POST", path: "/v1/events/tickets", body: `{}`, status: 400},
		{rule: "createEventTicket with two Authorization headers, which the schema cannot refuse", method: "POST", path: "/v1/events/tickets", secondAuthorization: twice, status: 400},
		{rule: "createEventTicket without a key", method: "POST", path: "/v1/events/tickets", header: noKey, status: 401, breaksDocument: true},
		{rule: "createEventTicket with a wrong key", method: "POST", path: "/v1/events/tickets", header: wrongKey, status: 401},
		{rule: "createEventTicket over the rate limit", server: serverRateLimited, method: "POST", path: "/v1/events/tickets", status: 429},
		{rule: "createEventTicket when the database fails", server: serverDBClosed, method: "POST", path: "/v1/events/tickets", status: 500},
		{rule: "createEventTicket when the disk cannot be written", server: serverReadOnly, method: "POST", path: "/v1/events/tickets", status: 503},
		// A key without the operation's scope
		{rule: "listPets with a key lacking pets:read", server: serverNarrowKey, method: "GET", path: "/v1/pets", status: 403},
		{rule: "createPet with a key lacking pets:write", server: serverNarrowKey, method: "POST", path: "/v1/pets", body: `{"name":"Rex","categoryId":1}`, status: 403},
		{rule: "getPet with a key lacking pets:read, with the deprecation headers", server: serverNarrowKey, method: "GET", path: "/v1/pets/1", status: 403},
		{rule: "updatePet with a key lacking pets:write", server: serverNarrowKey, method: "PATCH", path: "/v1/pets/1", body: `{"name":"Rex"}`, status: 403},
		{rule: "deletePet with a key lacking pets:write", server: serverNarrowKey, method: "DELETE", path: "/v1/pets/1", status: 403},
		{rule: "listOrders with a key lacking orders:read", server: serverNarrowKey, method: "GET", path: "/v1/store/orders", status: 403},
		{rule: "placeOrder with a key lacking orders:write", server: serverNarrowKey, method: "POST", path: "/v1/store/orders", body: `{"petId":1}`, status: 403},
		{rule: "getOrder with a key lacking orders:read", server: serverNarrowKey, method: "GET", path: "/v1/store/orders/1", status: 403},
		{rule: "updateOrder with a key lacking orders:write", server: serverNarrowKey, method: "PATCH", path: "/v1/store/orders/1", body: `{"status":"delivered"}`, status: 403},
		{rule: "the metrics with a key lacking *", server: serverNarrowKey, method: "GET", path: "/metrics", status: 403},
		{rule: "listEvents with a key lacking events:read", server: serverNarrowKey, method: "GET", path: "/v1/events", status: 403},
		{rule: "createEventTicket with a key lacking events:read", server: serverNarrowKey, method: "POST", path: "/v1/events/tickets", status: 403},
		{rule: "listWebhooks with a key lacking webhooks:write", server: serverNarrowKey, method: "GET", path: "/v1/webhooks", header: narrowWebhooks, status: 403},
		{rule: "createWebhook with a key lacking webhooks:write", server: serverNarrowKey, method: "POST", path: "/v1/webhooks", body: `{"url":"https://192.0.2.10/hook"}`, header: narrowWebhooks, status: 403},
		{rule: "getWebhook with a key lacking webhooks:write", server: serverNarrowKey, method: "GET", path: "/v1/webhooks/1", header: narrowWebhooks, status: 403},
		{rule: "updateWebhook with a key lacking webhooks:write", server: serverNarrowKey, method: "PATCH", path: "/v1/webhooks/1", body: `{"status":"paused"}`, header: narrowWebhooks, status: 403},
		{rule: "deleteWebhook with a key lacking webhooks:write", server: serverNarrowKey, method: "DELETE", path: "/v1/webhooks/1", header: narrowWebhooks, status: 403},
		{rule: "rotateWebhookSecret with a key lacking webhooks:write", server: serverNarrowKey, method: "POST", path: "/v1/webhooks/1/secret", header: narrowWebhooks, status: 403},
		{rule: "listWebhookDeliveries with a key lacking webhooks:write", server: serverNarrowKey, method: "GET", path: "/v1/webhooks/1/deliveries", header: narrowWebhooks, status: 403},
		// listWebhooks
		{rule: "a page of subscriptions with more after it", method: "GET", path: "/v1/webhooks?limit=1", status: 200},
		{rule: "the last page of subscriptions, of a status", method: "GET", path: "/v1/webhooks?status=active&after=1", status: 200},
		{rule: "listWebhooks: limit below 1", method: "GET", path: "/v1/webhooks?limit=0", status: 400, breaksDocument: true},
		{rule: "listWebhooks: status not a WebhookStatus", method: "GET", path: "/v1/webhooks?status=dead", status: 400, breaksDocument: true},
		{rule: "listWebhooks with a wrong key", method: "GET", path: "/v1/webhooks", header: wrongKey, status: 401},
		{rule: "listWebhooks over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/webhooks", status: 429},
		{rule: "listWebhooks when the database fails", server: serverDBClosed, method: "GET", path: "/v1/webhooks", status: 500},

		// createWebhook
		{rule: "a minimal NewWebhook", method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, status: 201},
		{rule: "a NewWebhook with every field", method: "POST", path: "/v1/webhooks", body: `{"url":"http://example.com:8080/b?token=x","types":["pet.*","order.placed"],"description":"stock sheet"}`, status: 201},
		{rule: "a NewWebhook without url", method: "POST", path: "/v1/webhooks", body: `{"types":["*"]}`, status: 400, breaksDocument: true},
		{rule: "a webhook url with user info", method: "POST", path: "/v1/webhooks", body: `{"url":"https://user:pw@example.com/a"}`, status: 400, breaksDocument: true},
		{rule: "a webhook url that is not http", method: "POST", path: "/v1/webhooks", body: `{"url":"ftp://example.com/a"}`, status: 400, breaksDocument: true},
		{rule: "an unknown event type", method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a","types":["pet.sold"]}`, status: 400, breaksDocument: true},
		{rule: "createWebhook with a wrong key", method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, header: wrongKey, status: 401},
		{rule: "a NewWebhook over 1 MiB", method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}` + strings.Repeat(" ", maxBodyBytes), status: 413},
		{rule: "a NewWebhook that is not application/json", method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, header: textPlain, status: 415, breaksDocument: true},
		{rule: "createWebhook over the rate limit", server: serverRateLimited, method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, status: 429},
		{rule: "createWebhook when the database fails", server: serverDBClosed, method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, status: 500},
		{rule: "createWebhook when the disk cannot be written", server: serverReadOnly, method: "POST", path: "/v1/webhooks", body: `{"url":"https://example.com/a"}`, status: 503},

		// getWebhook
		{rule: "a subscription", method: "GET", path: "/v1/webhooks/" + d.webhook, status: 200},
		{rule: "getWebhook with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/v1/webhooks/" + d.webhook, secondAuthorization: twice, status: 400},
		{rule: "getWebhook with a wrong key", method: "GET", path: "/v1/webhooks/" + d.webhook, header: wrongKey, status: 401},
		{rule: "no such subscription", method: "GET", path: "/v1/webhooks/999999", status: 404},
		{rule: "a webhookId that cannot exist", method: "GET", path: "/v1/webhooks/0", status: 404, breaksDocument: true},
		{rule: "getWebhook over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/webhooks/1", status: 429},
		{rule: "getWebhook when the database fails", server: serverDBClosed, method: "GET", path: "/v1/webhooks/1", status: 500},

		// updateWebhook
		{rule: "a subscription paused with a merge patch", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch, body: `{"status":"paused","description":null}`, header: mergePatch, status: 200},
		{rule: "a subscription resumed, its types and url changed, as JSON", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch,
			body: `{"status":"active","types":["order.*"],"url":"https://example.com/c"}`, status: 200},
		{rule: "a subscription cannot be set failing", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch, body: `{"status":"failing"}`, status: 400, breaksDocument: true},
		{rule: "updateWebhook with a wrong key", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch, body: `{"status":"paused"}`, header: wrongKey, status: 401},
		{rule: "updateWebhook: no such subscription", method: "PATCH", path: "/v1/webhooks/999999", body: `{"status":"paused"}`, status: 404},
		{rule: "a WebhookPatch over 1 MiB", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch, body: `{"status":"paused"}` + strings.Repeat(" ", maxBodyBytes), status: 413},
		{rule: "a JSON Patch for a subscription", method: "PATCH", path: "/v1/webhooks/" + d.webhookToPatch, body: `[]`, header: jsonPatch, status: 415, breaksDocument: true},
		{rule: "updateWebhook over the rate limit", server: serverRateLimited, method: "PATCH", path: "/v1/webhooks/1", body: `{"status":"paused"}`, status: 429},
		{rule: "updateWebhook when the database fails", server: serverDBClosed, method: "PATCH", path: "/v1/webhooks/1", body: `{"status":"paused"}`, status: 500},
		{rule: "updateWebhook when the disk cannot be written", server: serverReadOnly, method: "PATCH", path: "/v1/webhooks/" + d.readOnlyWebhook, body: `{"status":"paused"}`, status: 503},

		// deleteWebhook
		{rule: "a subscription deleted", method: "DELETE", path: "/v1/webhooks/" + d.webhookToDelete, status: 204},
		{rule: "deleteWebhook with two Authorization headers, which the schema cannot refuse", method: "DELETE", path: "/v1/webhooks/" + d.webhook, secondAuthorization: twice, status: 400},
		{rule: "deleteWebhook with a wrong key", method: "DELETE", path: "/v1/webhooks/" + d.webhook, header: wrongKey, status: 401},
		{rule: "deleteWebhook: no such subscription", method: "DELETE", path: "/v1/webhooks/999999", status: 404},
		{rule: "deleteWebhook over the rate limit", server: serverRateLimited, method: "DELETE", path: "/v1/webhooks/1", status: 429},
		{rule: "deleteWebhook when the database fails", server: serverDBClosed, method: "DELETE", path: "/v1/webhooks/1", status: 500},
		{rule: "deleteWebhook when the disk cannot be written", server: serverReadOnly, method: "DELETE", path: "/v1/webhooks/" + d.readOnlyWebhook, status: 503},

		// rotateWebhookSecret
		{rule: "a secret rotated", method: "POST", path: "/v1/webhooks/" + d.webhook + "/secret", status: 200},
		{rule: "rotateWebhookSecret with two Authorization headers, which the schema cannot refuse", method: "POST", path: "/v1/webhooks/" + d.webhook + "/secret", secondAuthorization: twice, status: 400},
		{rule: "rotateWebhookSecret with a wrong key", method: "POST", path: "/v1/webhooks/" + d.webhook + "/secret", header: wrongKey, status: 401},
		{rule: "rotateWebhookSecret: no such subscription", method: "POST", path: "/v1/webhooks/999999/secret", status: 404},
		{rule: "rotateWebhookSecret over the rate limit", server: serverRateLimited, method: "POST", path: "/v1/webhooks/1/secret", status: 429},
		{rule: "rotateWebhookSecret when the database fails", server: serverDBClosed, method: "POST", path: "/v1/webhooks/1/secret", status: 500},
		{rule: "rotateWebhookSecret when the disk cannot be written", server: serverReadOnly, method: "POST", path: "/v1/webhooks/" + d.readOnlyWebhook + "/secret", status: 503},

		// listWebhookDeliveries
		{rule: "a subscription's delivery log", method: "GET", path: "/v1/webhooks/" + d.webhook + "/deliveries?limit=5&before=100", status: 200},
		{rule: "listWebhookDeliveries: limit above 100", method: "GET", path: "/v1/webhooks/" + d.webhook + "/deliveries?limit=101", status: 400, breaksDocument: true},
		{rule: "listWebhookDeliveries: an unknown parameter, which the schema cannot refuse", method: "GET", path: "/v1/webhooks/" + d.webhook + "/deliveries?after=1", status: 400},
		{rule: "listWebhookDeliveries with a wrong key", method: "GET", path: "/v1/webhooks/" + d.webhook + "/deliveries", header: wrongKey, status: 401},
		{rule: "listWebhookDeliveries: no such subscription", method: "GET", path: "/v1/webhooks/999999/deliveries", status: 404},
		{rule: "listWebhookDeliveries over the rate limit", server: serverRateLimited, method: "GET", path: "/v1/webhooks/1/deliveries", status: 429},
		{rule: "listWebhookDeliveries when the database fails", server: serverDBClosed, method: "GET", path: "/v1/webhooks/1/deliveries", status: 500},

		// getOpenAPIDocument
		{rule: "the document, without a key", method: "GET", path: "/v1/openapi.json", header: noKey, status: 200},
		{rule: "a stale copy gets the document", method: "GET", path: "/v1/openapi.json", header: map[string]string{"If-None-Match": `"0"`}, status: 200},
		{rule: "a current copy gets 304", method: "GET", path: "/v1/openapi.json", header: map[string]string{"If-None-Match": etag, "Authorization": ""}, status: 304},

		// health checks
		{rule: "liveness, without a key", method: "GET", path: "/healthz", header: noKey, status: 200},
		{rule: "liveness while the database fails", server: serverDBClosed, method: "GET", path: "/healthz", header: noKey, status: 200},
		{rule: "readiness, without a key", method: "GET", path: "/readyz", header: noKey, status: 200},
		{rule: "readiness when the database fails", server: serverDBClosed, method: "GET", path: "/readyz", header: noKey, status: 503},

		// getMetrics
		{rule: "the metrics, with the key", method: "GET", path: "/metrics", status: 200},
		{rule: "the metrics without a key", method: "GET", path: "/metrics", header: noKey, status: 401, breaksDocument: true},
		{rule: "the metrics with a wrong key", method: "GET", path: "/metrics", header: wrongKey, status: 401},
		{rule: "the metrics with two Authorization headers, which the schema cannot refuse", method: "GET", path: "/metrics", secondAuthorization: twice, status: 400},
		{rule: "the metrics over the rate limit", server: serverRateLimited, method: "GET", path: "/metrics", status: 429},
		{rule: "an unknown path over the rate limit: the key is checked and counted first", server: serverRateLimited, method: "GET", path: "/v1/cats", status: 429, breaksDocument: true},
		{rule: "health checks are never rate limited", server: serverRateLimited, method: "GET", path: "/readyz", header: noKey, status: 200},

		// requests outside every operation
		{rule: "an unknown path", method: "GET", path: "/v1/cats", status: 404, breaksDocument: true},
		{rule: "an unknown path with two Authorization headers", method: "GET", path: "/v1/cats", secondAuthorization: twice, status: 400, breaksDocument: true},
		{rule: "a trailing slash is not redirected", method: "GET", path: "/v1/pets/", status: 404, breaksDocument: true},
		{rule: "a path outside /v1", method: "GET", path: "/pets", status: 404, breaksDocument: true},
		{rule: "an unknown path without a key", method: "GET", path: "/v1/cats", header: noKey, status: 401, breaksDocument: true},
		{rule: "a path outside /v1 without a key", method: "GET", path: "/pets", header: noKey, status: 401, breaksDocument: true},
		{rule: "a method a health check does not take, without a key", method: "POST", path: "/healthz", header: noKey, status: 401, breaksDocument: true},
		{rule: "a method a health check does not take", method: "POST", path: "/healthz", status: 405, breaksDocument: true},
		{rule: "a method the collection does not take", method: "DELETE", path: "/v1/pets", status: 405, breaksDocument: true},
		{rule: "a method a pet does not take", method: "PUT", path: "/v1/pets/1", body: `{"name":"Rex","categoryId":1}`, status: 405, breaksDocument: true},
		{rule: "a method an order does not take", method: "DELETE", path: "/v1/store/orders/1", status: 405, breaksDocument: true},
		{rule: "a method the document does not take", method: "POST", path: "/v1/openapi.json", status: 405, breaksDocument: true},
		{rule: "a method the feed does not take", method: "DELETE", path: "/v1/events", status: 405, breaksDocument: true},
		{rule: "a method the tickets do not take", method: "GET", path: "/v1/events/tickets", status: 405, breaksDocument: true},
	}
}

// transportHeaders are the response headers net/http itself manages. Every
// other header the service sends must be documented on the response.
var transportHeaders = []string{"Connection", "Content-Length", "Content-Type", "Date"}

// loadContract loads the document the service serves and checks it is valid
// OpenAPI 3.1.
func loadContract(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData([]byte(openapiDocument))
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi.json is OpenAPI %q, want 3.1.x", doc.OpenAPI)
	}
	// doc.Validate applies the 3.1 rules (JSON Schema 2020-12 keywords,
	// type arrays, no 3.0-only forms) because the document says 3.1.
	if err := doc.Validate(t.Context(), documentValidation()...); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3.1 document:\n%v", err)
	}
	return doc
}

// documentValidation is how the document is validated: every check
// kin-openapi has, examples, defaults, formats and patterns included.
func documentValidation() []openapi3.ValidationOption {
	return []openapi3.ValidationOption{openapi3.EnableMultiError(), openapi3.EnableSchemaFormatValidation(),
		openapi3.EnableSchemaPatternValidation(), openapi3.EnableSchemaDefaultsValidation(), openapi3.EnableExamplesValidation()}
}

// unroutedResponses reads the x-unrouted-responses extension: status to its
// response, resolved. An entry is a response written out or a $ref to a
// component response. Loaders leave an extension alone, so the document is
// loaded, and validated like the document itself, a second time with each
// entry copied into components.responses, where the loader resolves it.
func unroutedResponses(t *testing.T) map[int]*openapi3.ResponseRef {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal([]byte(openapiDocument), &raw); err != nil {
		t.Fatalf("decode openapi.json: %v", err)
	}
	ext, ok := raw[unroutedKey].(map[string]any)
	if !ok {
		t.Fatalf("openapi.json has no %s object", unroutedKey)
	}
	components, _ := raw["components"].(map[string]any)
	responses, ok := components["responses"].(map[string]any)
	if !ok {
		t.Fatalf("openapi.json has no components.responses object")
	}
	for status, v := range ext {
		responses[unroutedKey+"-"+status] = v
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatalf("%s: load: %v", unroutedKey, err)
	}
	if err := doc.Validate(t.Context(), documentValidation()...); err != nil {
		t.Fatalf("%s: not valid:\n%v", unroutedKey, err)
	}
	out := map[int]*openapi3.ResponseRef{}
	for status := range ext {
		code, err := strconv.Atoi(status)
		if err != nil || code < 100 || code > 599 {
			t.Fatalf("%s: %q is not a status", unroutedKey, status)
		}
		out[code] = doc.Components.Responses[unroutedKey+"-"+status]
	}
	return out
}

// answerKey names a documented answer: an operation (or "unrouted") and a status.
type answerKey struct {
	Operation string
	Status    int
}

func (k answerKey) String() string { return fmt.Sprintf("%s %d", k.Operation, k.Status) }

// documentedAnswers lists every (operation, status) the document describes.
func documentedAnswers(t *testing.T, doc *openapi3.T) []answerKey {
	t.Helper()
	var keys []answerKey
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for status := range op.Responses.Map() {
				code, err := strconv.Atoi(status)
				if err != nil {
					t.Fatalf("%s: response %q is not a status; the contract lists every status", op.OperationID, status)
				}
				keys = append(keys, answerKey{op.OperationID, code})
			}
		}
	}
	for status := range unroutedResponses(t) {
		keys = append(keys, answerKey{"unrouted", status})
	}
	return sortedKeys(keys)
}

// sortedKeys sorts keys by operation, then status.
func sortedKeys(keys []answerKey) []answerKey {
	slices.SortFunc(keys, func(a, b answerKey) int {
		if c := strings.Compare(a.Operation, b.Operation); c != 0 {
			return c
		}
		return a.Status - b.Status
	})
	return keys
}

// routeByPath returns a copy of doc whose servers keep only their path (/v1,
// or / for the health checks): the hosts are placeholders a deployment fills
// in, so the contract routes requests by path alone.
func routeByPath(doc *openapi3.T) *openapi3.T {
	pathOnly := func(servers openapi3.Servers) openapi3.Servers {
		var out openapi3.Servers
		for _, s := range servers {
			_, rest, _ := strings.Cut(s.URL, "://")
			_, path, _ := strings.Cut(rest, "/")
			out = append(out, &openapi3.Server{URL: "/" + path})
		}
		return out
	}
	routed := *doc
	routed.Servers = pathOnly(doc.Servers)
	routed.Paths = openapi3.NewPaths()
	for p, item := range doc.Paths.Map() {
		copied := *item
		copied.Servers = pathOnly(item.Servers)
		routed.Paths.Set(p, &copied)
	}
	return &routed
}

// bearerForm is what the bearerAuth scheme of the document asks of a request:
// an Authorization header with the bearer scheme (any case) and a token.
// Whether the key is one the service accepts is no business of the document.
var bearerForm = regexp.MustCompile(`^(?i:bearer) +\S+$`)

// validationOptions returns the options of every request and response
// validation.
func validationOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		// A response status that the operation does not list is a failure.
		IncludeResponseStatus: true,
		// The request is validated, not rewritten: the service gets the request
		// as the row sends it.
		SkipSettingDefaults: true,
		MultiError:          true,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			req := in.RequestValidationInput.Request
			switch in.SecuritySchemeName {
			case "bearerAuth":
				if !bearerForm.MatchString(req.Header.Get("Authorization")) {
					return errors.New("no Authorization: Bearer <key> header")
				}
			case "eventTicket":
				// Whether the ticket is valid is no business of the
				// document, as for a key.
				if req.URL.Query().Get("ticket") == "" {
					return errors.New("no ticket query parameter")
				}
			default:
				return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
			}
			return nil
		},
	}
}

func TestContract(t *testing.T) {
	t.Parallel()
	doc := loadContract(t)
	router, err := gorillamux.NewRouter(routeByPath(doc))
	if err != nil {
		t.Fatalf("route openapi.json: %v", err)
	}
	unrouted := unroutedResponses(t)
	opts := validationOptions()

	healthy := newTestServer(t)
	readOnly := newTestServer(t)
	data := seedContract(t, healthy, readOnly)
	broken := newTestServer(t)
	broken.Store.Close()
	sunset := newTestServer(t, withClock(func() time.Time { return getPetSunset }))
	sunset.createPet(t, "Rex", 1, "")
	limited := newTestServer(t, withLimits(limits{idempotencyTTL: defaultIdempotencyTTL, rateLimit: 0.001, rateBurst: 1}))
	if res := limited.do(t, "GET", "/v1/pets", "", nil); res.Status != http.StatusOK { // spends the burst
		t.Fatalf("the rate-limited server's first request: status %d", res.Status)
	}
	throttled := newTestServer(t, withLimits(limits{idempotencyTTL: defaultIdempotencyTTL, authFailures: 1}))
	if res := throttled.do(t, "GET", "/v1/pets", "", map[string]string{"Authorization": ""}); res.Status != http.StatusUnauthorized { // spends the budget
		t.Fatalf("the throttled server's first failure: status %d", res.Status)
	}
	full := newTestServer(t, withFeed(feedConfig{heartbeat: defaultEventsHeartbeat, retention: defaultEventsRetention, maxStreams: 1}))
	holdStreams(t, full, 1)
	// The test key there holds only webhooks:write, which no other
	// operation needs; the second key only events:read, which no webhook
	// operation needs.
	narrow := newServerWithKeyFile(t, testKey+" narrow scopes=webhooks:write\n"+otherTestKey+" narrow2 scopes=events:read\n", time.Now)
	servers := map[string]string{serverHealthy: healthy.URL, serverDBClosed: broken.URL, serverSunset: sunset.URL,
		serverRateLimited: limited.URL, serverReadOnly: readOnly.URL, serverThrottled: throttled.URL,
		serverPruned: prunedServer(t).URL, serverStreamsFull: full.URL, serverNarrowKey: narrow.URL}
	unreachable, haveUnreachable := unreachableServer(t)
	if haveUnreachable {
		servers[serverUnreachable] = unreachable.URL
	}

	sum := sha256.Sum256([]byte(openapiDocument))
	produced := map[answerKey]bool{}
	for _, tt := range contractTable(`"`+hex.EncodeToString(sum[:])+`"`, data) {
		if tt.server == serverUnreachable && !haveUnreachable {
			continue // recorded by unreachableServer, for the end of the run
		}
		t.Run(tt.rule, func(t *testing.T) {
			base, ok := servers[tt.server]
			if tt.server == serverInFlight {
				// Made for this row, just before it runs: the held
				// request waits for the write lock at most busy_timeout.
				base, ok = holdInFlightCreate(t, tt.path, tt.header[idempotencyHeader], tt.body).URL, true
			}
			if !ok {
				t.Fatalf("unknown server %q", tt.server)
			}
			path := tt.path
			if strings.Contains(path, ticketPlaceholder) {
				path = strings.ReplaceAll(path, ticketPlaceholder, newTicket(t, base))
			}
			vreq := newRequest(t, base, tt.method, path, tt.body, tt.header)
			if tt.secondAuthorization != "" {
				vreq.Header.Add("Authorization", tt.secondAuthorization)
			}
			route, pathParams, routeErr := router.FindRoute(vreq)
			var reqIn *openapi3filter.RequestValidationInput
			var opName string
			switch {
			case errors.Is(routeErr, routers.ErrPathNotFound) || errors.Is(routeErr, routers.ErrMethodNotAllowed):
				// Outside every operation: the answer must be one of the
				// unrouted responses, validated like an operation's.
				opName = "unrouted"
				op := openapi3.NewOperation()
				op.Responses = openapi3.NewResponses()
				for status, ref := range unrouted {
					op.Responses.Set(strconv.Itoa(status), ref)
				}
				reqIn = &openapi3filter.RequestValidationInput{Request: vreq, Options: opts,
					Route: &routers.Route{Spec: doc, Method: tt.method, Operation: op}}
				if !tt.breaksDocument {
					t.Errorf("no operation takes %s %s (%v), but the row says the request is in the document", tt.method, tt.path, routeErr)
				}
			case routeErr != nil:
				t.Fatalf("route %s %s: %v", tt.method, tt.path, routeErr)
			default:
				opName = route.Operation.OperationID
				reqIn = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: pathParams, Route: route, Options: opts}
				reqErr := openapi3filter.ValidateRequest(t.Context(), reqIn)
				if tt.breaksDocument && reqErr == nil {
					t.Errorf("the document accepts the request, but the row says it breaks the document")
				}
				if !tt.breaksDocument && reqErr != nil {
					t.Errorf("the document refuses the request: %v", reqErr)
				}
			}

			req := newRequest(t, base, tt.method, path, tt.body, tt.header)
			if tt.secondAuthorization != "" {
				req.Header.Add("Authorization", tt.secondAuthorization)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			var got response
			if tt.stream && res.StatusCode == http.StatusOK {
				got = readFirstFrame(t, res)
			} else {
				got = readResponse(t, res)
			}
			if got.Status != tt.status {
				t.Fatalf("status %d, want %d; body %s", got.Status, tt.status, got.Body)
			}
			key := answerKey{opName, got.Status}
			produced[key] = true

			described := reqIn.Route.Operation.Responses.Status(got.Status)
			if described == nil {
				t.Fatalf("the document does not describe %v", key)
			}
			resOpts := opts
			if tt.stream {
				// The frame read is checked below; the validator has no
				// decoder for a stream.
				o := *opts
				o.ExcludeResponseBody = true
				resOpts = &o
				if want := fmt.Sprintf("retry: %d\n\n", streamRetry); string(got.Body) != want {
					t.Errorf("the stream's first frame is %q, want %q", got.Body, want)
				}
			}
			resIn := &openapi3filter.ResponseValidationInput{RequestValidationInput: reqIn,
				Status: got.Status, Header: got.Header, Options: resOpts}
			resIn.SetBodyBytes(got.Body)
			if err := openapi3filter.ValidateResponse(t.Context(), resIn); err != nil {
				t.Errorf("the response does not match the document's %v:\n%v\nheaders %v\nbody %s", key, err, got.Header, got.Body)
			}
			checkDescribedExactly(t, described.Value, got)
		})
	}

	t.Run("every documented answer is produced by a row", func(t *testing.T) {
		documented := documentedAnswers(t, doc)
		if !haveUnreachable {
			// Only an unreachable PostgreSQL answers 503 to a read.
			documented = slices.DeleteFunc(documented, func(k answerKey) bool {
				return k.Status == http.StatusServiceUnavailable && slices.Contains([]string{"listPets", "getPet", "listOrders", "getOrder"}, k.Operation)
			})
		}
		if diff := cmp.Diff(documented, sortedKeys(slices.Collect(maps.Keys(produced)))); diff != "" {
			t.Errorf("documented answers (-) that no row produces, and produced ones (+) the document lacks:\n%s", diff)
		}
	})
}

// checkDescribedExactly checks what the validator lets through: a header the
// service sends but the response does not document (ValidateResponse only
// checks the documented ones), and a body on a response without content
// (ValidateResponse skips 304 answers, for one).
func checkDescribedExactly(t *testing.T, described *openapi3.Response, got response) {
	t.Helper()
	for name := range got.Header {
		if slices.Contains(transportHeaders, name) && (name != "Content-Type" || len(described.Content) > 0) {
			continue
		}
		documented := false
		for d := range described.Headers {
			documented = documented || http.CanonicalHeaderKey(d) == name
		}
		if !documented {
			t.Errorf("header %s: %q is not documented on this response", name, got.Header.Values(name))
		}
	}
	for name, h := range described.Headers {
		v := got.Header.Values(name)
		if h.Value.Required && len(v) == 0 {
			t.Errorf("header %s is required, got none", name)
		}
		if len(v) == 0 {
			continue
		}
		// A field sent on several lines is one value: the lines joined by
		// commas (RFC 9110, section 5.3), such as getPet's two Links. The
		// schema describes that value, so a field that may appear once
		// (X-Request-Id, Location) fails it when sent twice. ValidateResponse
		// reads the first line only. Every header of the document is a
		// string; checking its value here also covers the answers
		// ValidateResponse skips (304).
		value := strings.Join(v, ", ")
		if err := h.Value.Schema.Value.VisitJSON(value, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("header %s: %q does not match its schema: %v", name, value, err)
		}
	}
	if len(described.Content) == 0 && len(got.Body) > 0 {
		t.Errorf("the document describes no body, got %q", got.Body)
	}
}

// holdInFlightCreate starts a server on which a create (a POST of body to
// path) with Idempotency-Key key is in flight until the test ends: another
// connection holds the writes (holdWrites), two such creates are sent, and the
// first answer (the repeat's 409) shows the other is registered and
// waiting. The waiting create gives up after 5 s (see holdWrites), so the
// server must be used at once.
func holdInFlightCreate(t *testing.T, path, key, body string) *testServer {
	t.Helper()
	ts := newTestServer(t)
	release := ts.holdWrites(t)
	// The creates outlive t.Context(), which ends before the cleanup that
	// releases them, so they run on a context of their own.
	statuses := make(chan int, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), "POST", ts.URL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set(idempotencyHeader, key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			res.Body.Close()
			statuses <- res.StatusCode
		})
	}
	if first := <-statuses; first != http.StatusConflict {
		t.Fatalf("holding a create in flight: the first answer is %d, want the repeat's 409", first)
	}
	t.Cleanup(func() {
		release()
		wg.Wait()
	})
	return ts
}

// readFirstFrame reads an event stream's first frame (up to its blank
// line) and hangs up: the stream itself never ends.
func readFirstFrame(t *testing.T, res *http.Response) response {
	t.Helper()
	defer res.Body.Close()
	var frame []byte
	rd := bufio.NewReader(res.Body)
	for !bytes.HasSuffix(frame, []byte("\n\n")) {
		line, err := rd.ReadBytes('\n')
		frame = append(frame, line...)
		if err != nil {
			t.Fatalf("reading the stream's first frame: %v; read %q", err, frame)
		}
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: frame}
}

// newTicket asks the server at base for a stream ticket with the test key.
func newTicket(t *testing.T, base string) string {
	t.Helper()
	res := doRequest(t, base, "POST", "/v1/events/tickets", "", nil)
	var tk struct {
		Ticket string `json:"ticket"`
	}
	if res.Status != http.StatusCreated || json.Unmarshal(res.Body, &tk) != nil || tk.Ticket == "" {
		t.Fatalf("createEventTicket: status %d, body %s", res.Status, res.Body)
	}
	return tk.Ticket
}

// prunedServer starts a server whose feed has pruned its first three events
// (three pets added two hours before the fourth, pruned with a retention of
// one hour), so that a cursor below 3 is 410 cursor_expired.
func prunedServer(t *testing.T) *testServer {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	ts := newTestServer(t, withClock(clock.now))
	ts.Store.now = clock.now
	for range 3 {
		ts.createPet(t, "Old", 1, "")
	}
	clock.set(clock.now().Add(2 * time.Hour))
	ts.createPet(t, "New", 1, "")
	if n, err := ts.Store.pruneEvents(t.Context(), clock.now().Add(-time.Hour)); err != nil || n != 3 {
		t.Fatalf("pruning the feed: %d events pruned, %v; want 3", n, err)
	}
	return ts
}

// holdStreams opens n event streams with the test key on ts and holds them
// open until the test ends: with n the server's cap, the next is 429.
func holdStreams(t *testing.T, ts *testServer, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range n {
		req := newRequest(t, ts.URL, "GET", "/v1/events", "", map[string]string{"Accept": eventStreamType}).WithContext(ctx)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("opening a stream: %v", err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != http.StatusOK {
			t.Fatalf("opening a stream: status %d, body %s", res.StatusCode, readResponse(t, res).Body)
		}
	}
}

// idList is an id filter of n ids: 1,2,...,n.
func idList(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(ids, ",")
}

// longIDList is n distinct ids of 19 digits separated by commas, as the id
// filter takes them.
func longIDList(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.FormatInt(math.MaxInt64-int64(i), 10)
	}
	return strings.Join(ids, ",")
}
