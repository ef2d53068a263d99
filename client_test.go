package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"petstore/client"
)

// TestGeneratedClient drives the service with the Go client generated from
// the document (./client): that it compiles at all is half the proof, and
// create -> get -> list completing against a live server is the other half.
func TestGeneratedClient(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	ctx := t.Context()
	c := newGeneratedClient(t, ts.URL)

	var created []client.Pet
	for _, np := range []client.NewPet{
		{Name: "Rex", CategoryId: 1},
		{Name: "Tom", CategoryId: 2, Status: ptr(client.PetStatus("sold"))},
	} {
		// An Idempotency-Key makes the create safe to retry: the retry
		// gets the same pet back instead of a second one.
		params := &client.CreatePetParams{IdempotencyKey: ptr("client-test-" + np.Name)}
		res, err := c.CreatePetWithResponse(ctx, params, np)
		if err != nil {
			t.Fatalf("createPet %+v: %v", np, err)
		}
		if res.JSON201 == nil {
			t.Fatalf("createPet %+v: status %d, body %s", np, res.StatusCode(), res.Body)
		}
		retry, err := c.CreatePetWithResponse(ctx, params, np)
		if err != nil || retry.JSON201 == nil || *retry.JSON201 != *res.JSON201 {
			t.Fatalf("retried createPet %+v: %v, status %d, body %s; want the first pet again", np, err, retry.StatusCode(), retry.Body)
		}
		created = append(created, *res.JSON201)
		if loc, want := res.Headers201.Location, "/v1/pets/"+strconv.FormatInt(res.JSON201.Id, 10); loc != want {
			t.Errorf("createPet Location = %q, want %q", loc, want)
		}
	}
	wantCreated := []client.Pet{
		{Id: created[0].Id, Name: "Rex", CategoryId: 1, Status: "available"},
		{Id: created[1].Id, Name: "Tom", CategoryId: 2, Status: "sold"},
	}
	if diff := cmp.Diff(wantCreated, created); diff != "" {
		t.Errorf("createPet mismatch (-want +got):\n%s", diff)
	}

	got, err := c.GetPetWithResponse(ctx, created[0].Id)
	if err != nil {
		t.Fatalf("getPet: %v", err)
	}
	if got.JSON200 == nil {
		t.Fatalf("getPet: status %d, body %s", got.StatusCode(), got.Body)
	}
	if diff := cmp.Diff(created[0], *got.JSON200); diff != "" {
		t.Errorf("getPet mismatch (-want +got):\n%s", diff)
	}
	if got.Headers200.Sunset != "Thu, 05 Dec 2030 00:00:00 GMT" {
		t.Errorf("getPet Sunset = %q", got.Headers200.Sunset)
	}

	list, err := c.ListPetsWithResponse(ctx, &client.ListPetsParams{Limit: ptr(int32(1))})
	if err != nil {
		t.Fatalf("listPets: %v", err)
	}
	if list.JSON200 == nil {
		t.Fatalf("listPets: status %d, body %s", list.StatusCode(), list.Body)
	}
	if diff := cmp.Diff(created[:1], *list.JSON200); diff != "" {
		t.Errorf("listPets first page mismatch (-want +got):\n%s", diff)
	}
	next, err := c.ListPetsWithResponse(ctx, &client.ListPetsParams{Limit: ptr(int32(1)), After: &created[0].Id})
	if err != nil {
		t.Fatalf("listPets after %d: %v", created[0].Id, err)
	}
	if next.JSON200 == nil {
		t.Fatalf("listPets after %d: status %d, body %s", created[0].Id, next.StatusCode(), next.Body)
	}
	if diff := cmp.Diff(created[1:], *next.JSON200); diff != "" {
		t.Errorf("listPets second page mismatch (-want +got):\n%s", diff)
	}

	missing, err := c.GetPetWithResponse(ctx, created[1].Id+1000)
	if err != nil {
		t.Fatalf("getPet of a missing pet: %v", err)
	}
	if missing.JSON404 == nil {
		t.Fatalf("getPet of a missing pet: status %d, body %s", missing.StatusCode(), missing.Body)
	}
	if missing.JSON404.Code != "not_found" || missing.JSON404.Status != http.StatusNotFound {
		t.Errorf("getPet of a missing pet: error %+v, want not_found 404", *missing.JSON404)
	}
}

// TestGeneratedClientSellsPets sells pets through the generated client
// against a live server, as a shop would: place -> deliver sells a pet, place
// -> cancel gives it back and it can be ordered again. The pets' statuses
// follow, read through the id filter (getPet's successor), and a sold pet
// that comes back is made available again with a merge patch.
func TestGeneratedClientSellsPets(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	ctx := t.Context()
	c := newGeneratedClient(t, ts.URL)

	var rex, tom client.Pet
	for _, p := range []struct {
		dst  *client.Pet
		name string
	}{{&rex, "Rex"}, {&tom, "Tom"}} {
		res, err := c.CreatePetWithResponse(ctx, nil, client.NewPet{Name: p.name, CategoryId: 1})
		answered(t, "createPet "+p.name, res, err, http.StatusCreated)
		*p.dst = *res.JSON201
	}
	// wantPet checks a pet's status, read through listPets' id filter.
	wantPet := func(step string, id int64, want client.PetStatus) {
		t.Helper()
		res, err := c.ListPetsWithResponse(ctx, &client.ListPetsParams{Id: &[]int64{id}})
		answered(t, "listPets id="+strconv.FormatInt(id, 10), res, err, http.StatusOK)
		if len(*res.JSON200) != 1 || (*res.JSON200)[0].Status != want {
			t.Errorf("%s: listPets id=%d is %+v, want the pet %s", step, id, *res.JSON200, want)
		}
	}
	// place places an order for the pet, with an Idempotency-Key, and
	// checks the 201, its Location and the order: placed, stamped once.
	place := func(petID int64, key string) client.Order {
		t.Helper()
		res, err := c.PlaceOrderWithResponse(ctx, &client.PlaceOrderParams{IdempotencyKey: &key}, client.NewOrder{PetId: petID})
		answered(t, "placeOrder", res, err, http.StatusCreated)
		o := *res.JSON201
		want := client.Order{Id: o.Id, PetId: petID, Status: "placed", PlacedAt: o.PlacedAt, UpdatedAt: o.PlacedAt}
		if diff := cmp.Diff(want, o); diff != "" {
			t.Errorf("placeOrder pet %d mismatch (-want +got):\n%s", petID, diff)
		}
		if loc, want := res.Headers201.Location, "/v1/store/orders/"+strconv.FormatInt(o.Id, 10); loc != want {
			t.Errorf("placeOrder Location = %q, want %q", loc, want)
		}
		return o
	}
	// change moves the order to status, as a merge patch or as plain
	// JSON, and checks the order it gets back.
	change := func(o client.Order, status client.OrderStatus, mergePatch bool) client.Order {
		t.Helper()
		update := client.OrderUpdate{Status: status}
		var res *client.UpdateOrderResponse
		var err error
		if mergePatch {
			res, err = c.UpdateOrderWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, o.Id, update)
		} else {
			res, err = c.UpdateOrderWithResponse(ctx, o.Id, update)
		}
		answered(t, "updateOrder to "+string(status), res, err, http.StatusOK)
		got := *res.JSON200
		want := client.Order{Id: o.Id, PetId: o.PetId, Status: status, PlacedAt: o.PlacedAt, UpdatedAt: got.UpdatedAt}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("updateOrder %d to %s mismatch (-want +got):\n%s", o.Id, status, diff)
		}
		if got.UpdatedAt.Before(o.PlacedAt) {
			t.Errorf("updateOrder %d: updatedAt %v is before placedAt %v", o.Id, got.UpdatedAt, o.PlacedAt)
		}
		return got
	}

	// place -> deliver: the pet is sold, and cannot be ordered again.
	sale := place(rex.Id, "client-sale")
	wantPet("placed", rex.Id, "pending")
	sale = change(sale, "delivered", false)
	wantPet("delivered", rex.Id, "sold")
	again, err := c.PlaceOrderWithResponse(ctx, nil, client.NewOrder{PetId: rex.Id})
	answered(t, "placeOrder of a sold pet", again, err, http.StatusConflict)
	if again.JSON409.Code != client.ErrorCodePetNotAvailable {
		t.Errorf("placeOrder of a sold pet: %+v, want pet_not_available", *again.JSON409)
	}
	undo, err := c.UpdateOrderWithResponse(ctx, sale.Id, client.OrderUpdate{Status: "cancelled"})
	answered(t, "cancelling a delivered order", undo, err, http.StatusConflict)
	if undo.JSON409.Code != client.ErrorCodeInvalidTransition {
		t.Errorf("cancelling a delivered order: %+v, want invalid_transition", *undo.JSON409)
	}

	// place -> cancel -> place again: the pet is back, and sells anew.
	first := place(tom.Id, "client-first")
	cancelled := change(first, "cancelled", true)
	wantPet("cancelled", tom.Id, "available")
	second := place(tom.Id, "client-second")
	if second.Id <= first.Id {
		t.Errorf("the second order of pet %d has id %d, not after the first's %d", tom.Id, second.Id, first.Id)
	}
	wantPet("placed again", tom.Id, "pending")

	// Every order as the service keeps it, in id order.
	list, err := c.ListOrdersWithResponse(ctx, nil)
	answered(t, "listOrders", list, err, http.StatusOK)
	if diff := cmp.Diff([]client.Order{sale, cancelled, second}, *list.JSON200); diff != "" {
		t.Errorf("listOrders mismatch (-want +got):\n%s", diff)
	}
	got, err := c.GetOrderWithResponse(ctx, second.Id)
	answered(t, "getOrder", got, err, http.StatusOK)
	if diff := cmp.Diff(second, *got.JSON200); diff != "" {
		t.Errorf("getOrder mismatch (-want +got):\n%s", diff)
	}

	// A sold pet that comes back is made available again; its order stays
	// delivered, and the sales history keeps the pet from being deleted.
	back, err := c.UpdatePetWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, rex.Id, client.PetPatch{Status: ptr(client.PetStatus("available"))})
	answered(t, "updatePet", back, err, http.StatusOK)
	if diff := cmp.Diff(client.Pet{Id: rex.Id, Name: "Rex", CategoryId: 1, Status: "available"}, *back.JSON200); diff != "" {
		t.Errorf("updatePet mismatch (-want +got):\n%s", diff)
	}
	history, err := c.GetOrderWithResponse(ctx, sale.Id)
	answered(t, "getOrder of the sale", history, err, http.StatusOK)
	if diff := cmp.Diff(sale, *history.JSON200); diff != "" {
		t.Errorf("the sale after its pet came back (-want +got):\n%s", diff)
	}
	del, err := c.DeletePetWithResponse(ctx, rex.Id)
	answered(t, "deletePet of a pet with orders", del, err, http.StatusConflict)
	if del.JSON409.Code != client.ErrorCodePetHasOrders {
		t.Errorf("deletePet of a pet with orders: %+v, want pet_has_orders", *del.JSON409)
	}
}

// TestGeneratedClientReadsTheFeed reads the change feed through the
// generated client, as a stock sheet would poll it: each event decoded into
// its own type by the discriminator, the resource in data as the client got
// it from its own calls, and the next page found from the Link header.
func TestGeneratedClientReadsTheFeed(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	ctx := t.Context()
	c := newGeneratedClient(t, ts.URL)

	created, err := c.CreatePetWithResponse(ctx, nil, client.NewPet{Name: "Rex", CategoryId: 1})
	answered(t, "createPet", created, err, http.StatusCreated)
	rex := *created.JSON201
	placed, err := c.PlaceOrderWithResponse(ctx, nil, client.NewOrder{PetId: rex.Id})
	answered(t, "placeOrder", placed, err, http.StatusCreated)
	order := *placed.JSON201

	// feedEvent is what the test compares of an event: its id, type and
	// subject, and its data decoded by the type the discriminator names.
	type feedEvent struct {
		Id      int64
		Type    string
		Subject string
		Data    any
	}
	read := func(step string, params *client.ListEventsParams) ([]feedEvent, string) {
		t.Helper()
		res, err := c.ListEventsWithResponse(ctx, params)
		answered(t, step, res, err, http.StatusOK)
		var out []feedEvent
		for _, ev := range *res.JSON200 {
			v, err := ev.ValueByDiscriminator()
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			var fe feedEvent
			switch e := v.(type) {
			case client.PetCreatedEvent:
				fe = feedEvent{e.Id, string(e.Type), e.Subject, e.Data}
			case client.PetUpdatedEvent:
				fe = feedEvent{e.Id, string(e.Type), e.Subject, e.Data}
			case client.OrderPlacedEvent:
				fe = feedEvent{e.Id, string(e.Type), e.Subject, e.Data}
			case client.OrderDeliveredEvent:
				fe = feedEvent{e.Id, string(e.Type), e.Subject, e.Data}
			default:
				t.Fatalf("%s: an event of type %T", step, v)
			}
			out = append(out, fe)
		}
		if res.Headers200 == nil || res.Headers200.Link == nil {
			t.Fatalf("%s: no Link header", step)
		}
		return out, *res.Headers200.Link
	}

	pending := rex
	pending.Status = "pending"
	petPath := "/v1/pets/" + strconv.FormatInt(rex.Id, 10)
	orderPath := "/v1/store/orders/" + strconv.FormatInt(order.Id, 10)
	got, link := read("listEvents", nil)
	want := []feedEvent{
		{1, "pet.created", petPath, rex},
		{2, "order.placed", orderPath, order},
		{3, "pet.updated", petPath, pending},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listEvents mismatch (-want +got):\n%s", diff)
	}
	if want := `</v1/events?after=3&limit=100>; rel="next"`; link != want {
		t.Errorf("Link = %q, want %q", link, want)
	}

	// Polling on with the cursor and a type filter: nothing yet, then the
	// delivery, without the pet's event that comes with it.
	orders := &client.ListEventsParams{After: ptr(int64(3)), Type: &[]client.EventTypeFilter{"order.*"}}
	if got, _ := read("listEvents after 3, orders only", orders); len(got) != 0 {
		t.Errorf("listEvents after 3, orders only: %+v, want none", got)
	}
	delivered, err := c.UpdateOrderWithResponse(ctx, order.Id, client.OrderUpdate{Status: "delivered"})
	answered(t, "updateOrder", delivered, err, http.StatusOK)
	got, link = read("listEvents after 3, orders only, after the delivery", orders)
	if diff := cmp.Diff([]feedEvent{{4, "order.delivered", orderPath, *delivered.JSON200}}, got); diff != "" {
		t.Errorf("listEvents after the delivery mismatch (-want +got):\n%s", diff)
	}
	if want := `</v1/events?after=4&limit=100&type=order.%2A>; rel="next"`; link != want {
		t.Errorf("Link = %q, want %q", link, want)
	}

	// Once every event is pruned, a cursor before them is 410
	// cursor_expired.
	if _, err := ts.Store.pruneEvents(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	expired, err := c.ListEventsWithResponse(ctx, &client.ListEventsParams{After: ptr(int64(1))})
	answered(t, "listEvents after a pruned cursor", expired, err, http.StatusGone)
	if expired.JSON410.Code != client.ErrorCodeCursorExpired {
		t.Errorf("listEvents after a pruned cursor: %+v, want cursor_expired", *expired.JSON410)
	}

	ticket, err := c.CreateEventTicketWithResponse(ctx)
	answered(t, "createEventTicket", ticket, err, http.StatusCreated)
	if ticket.JSON201.Ticket == "" || ticket.Headers201.CacheControl != "no-store" {
		t.Errorf("createEventTicket: %+v, Cache-Control %q; want a ticket, not to be stored", *ticket.JSON201, ticket.Headers201.CacheControl)
	}
}

// newGeneratedClient returns the generated client for the server at base,
// sending the test key.
func newGeneratedClient(t *testing.T, base string) *client.ClientWithResponses {
	t.Helper()
	withKey := client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+testKey)
		return nil
	})
	c, err := client.NewClientWithResponses(base+"/v1", withKey)
	if err != nil {
		t.Fatalf("NewClientWithResponses: %v", err)
	}
	return c
}

// answered fails the test unless a call of the generated client got an
// answer with status want; what names the call. Every response type of the
// client has these two methods.
func answered(t *testing.T, what string, res interface {
	StatusCode() int
	GetBody() []byte
}, err error, want int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.StatusCode() != want {
		t.Fatalf("%s: status %d, want %d; body %s", what, res.StatusCode(), want, res.GetBody())
	}
}

// TestGeneratedClientIsUpToDate regenerates the client from the document the
// service serves, exactly as docs/api.md shows, and fails when the committed
// client differs: run `go generate` after changing openapi.json.
func TestGeneratedClientIsUpToDate(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	res := ts.do(t, "GET", "/v1/openapi.json", "", map[string]string{"Authorization": ""})
	if res.Status != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: status %d", res.Status)
	}
	dir := t.TempDir()
	served := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(served, res.Body, 0o644); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join("client", "oapi-codegen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "client.gen.go")
	config = bytes.Replace(config, []byte("output: client/client.gen.go"), []byte("output: "+out), 1)
	if !bytes.Contains(config, []byte(out)) {
		t.Fatalf("client/oapi-codegen.yaml has no line 'output: client/client.gen.go' to redirect")
	}
	configPath := filepath.Join(dir, "oapi-codegen.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		t.Fatal(err)
	}
	// `go tool` runs the generator at the version go.mod pins.
	cmd := exec.CommandContext(t.Context(), "go", "tool", "oapi-codegen", "-config", configPath, served)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool oapi-codegen: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("client", "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(committed), "\n")); diff != "" {
		t.Errorf("client/client.gen.go is stale; run `go generate` (-generated from the served document +committed):\n%s", diff)
	}
}

// ptr returns a pointer to v, for the optional fields of the generated client.
func ptr[T any](v T) *T { return &v }
