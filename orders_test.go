package main

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// orderJSON is an order as a client decodes it.
type orderJSON struct {
	ID        int64  `json:"id"`
	PetID     int64  `json:"petId"`
	Status    string `json:"status"`
	PlacedAt  string `json:"placedAt"`
	UpdatedAt string `json:"updatedAt"`
}

// placeOrder orders the pet through the API; anything but a 201 fails the
// test.
func (ts *testServer) placeOrder(t testing.TB, petID int64) orderJSON {
	t.Helper()
	res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, petID), nil)
	if res.Status != http.StatusCreated {
		t.Errorf("placeOrder for pet %d: status %d, body %s", petID, res.Status, res.Body)
		return orderJSON{}
	}
	return decode[orderJSON](t, res)
}

// setOrder changes an order's status through the API and returns the answer.
func (ts *testServer) setOrder(t testing.TB, id int64, status string) response {
	t.Helper()
	return ts.do(t, "PATCH", fmt.Sprintf("/v1/store/orders/%d", id), fmt.Sprintf(`{"status":%q}`, status), nil)
}

// petNow reads a pet through listPets' id filter.
func (ts *testServer) petNow(t testing.TB, id int64) []Pet {
	t.Helper()
	return decode[[]Pet](t, ts.do(t, "GET", fmt.Sprintf("/v1/pets?id=%d", id), "", nil))
}

// apiTime is an instant as the API writes it.
func apiTime(at time.Time) string { return at.UTC().Format(timeLayout) }

func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, time.May, 4, 10, 30, 0, 123_000_000, time.UTC)
	clock := &fakeClock{t: at}
	ts := newTestServer(t, withClock(clock.now))
	rex := ts.createPet(t, "Rex", 1, "available")

	res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, rex.ID), nil)
	if res.Status != http.StatusCreated {
		t.Fatalf("status %d, body %s", res.Status, res.Body)
	}
	got := decode[orderJSON](t, res)
	want := orderJSON{ID: got.ID, PetID: rex.ID, Status: "placed", PlacedAt: "2027-05-04T10:30:00.123Z", UpdatedAt: "2027-05-04T10:30:00.123Z"}
	if diff := cmp.Diff(want, got); diff != "" || got.ID < 1 {
		t.Errorf("placed order mismatch (-want +got):\n%s", diff)
	}
	if loc := res.Header.Get("Location"); loc != fmt.Sprintf("/v1/store/orders/%d", got.ID) {
		t.Errorf("Location = %q", loc)
	}
	t.Run("the pet is pending in the same transaction", func(t *testing.T) {
		if diff := cmp.Diff([]Pet{{rex.ID, "Rex", 1, "pending"}}, ts.petNow(t, rex.ID)); diff != "" {
			t.Errorf("pet after the order mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("getOrder returns it", func(t *testing.T) {
		if diff := cmp.Diff(want, decode[orderJSON](t, ts.do(t, "GET", res.Header.Get("Location"), "", nil))); diff != "" {
			t.Errorf("getOrder mismatch (-want +got):\n%s", diff)
		}
	})

	pending := ts.createPet(t, "Kit", 1, "pending")
	sold := ts.createPet(t, "Bo", 1, "sold")
	refusals := []struct {
		rule    string
		body    string
		header  map[string]string
		status  int
		code    string
		mention []string
	}{
		{"a pet already ordered is not available", fmt.Sprintf(`{"petId":%d}`, rex.ID), nil, 409, codePetNotAvailable, []string{fmt.Sprint("pet ", rex.ID), "pending"}},
		{"a pending pet is not available", fmt.Sprintf(`{"petId":%d}`, pending.ID), nil, 409, codePetNotAvailable, []string{"pending"}},
		{"a sold pet is not available", fmt.Sprintf(`{"petId":%d}`, sold.ID), nil, 409, codePetNotAvailable, []string{"sold"}},
		{"no pet has the id", `{"petId":999999}`, nil, 422, codeUnknownPet, []string{"999999"}},
		{"petId missing", `{}`, nil, 400, codeInvalidField, []string{"petId", "required"}},
		{"petId null", `{"petId":null}`, nil, 400, codeInvalidField, []string{"petId", "null"}},
		{"petId as a string", `{"petId":"1"}`, nil, 400, codeInvalidField, []string{"petId", "string"}},
		{"petId 0", `{"petId":0}`, nil, 400, codeInvalidField, []string{"petId"}},
		{"petId as a fraction", `{"petId":1.0}`, nil, 400, codeInvalidField, []string{"petId", "fraction"}},
		{"petId with a leading zero is not JSON", `{"petId":06}`, nil, 400, codeInvalidBody, []string{"not valid JSON"}},
		{"petId in hexadecimal is not JSON", `{"petId":0x6}`, nil, 400, codeInvalidBody, []string{"not valid JSON"}},
		{"an id sent by the client", `{"id":5,"petId":1}`, nil, 400, codeInvalidField, []string{"id", "assigns"}},
		{"an unknown field", `{"petId":1,"quantity":2}`, nil, 400, codeInvalidField, []string{`"quantity"`, "NewOrder", "petId"}},
		{"petId twice", `{"petId":1,"petId":2}`, nil, 400, codeInvalidField, []string{"more than once"}},
		{"not an object", `[1]`, nil, 400, codeInvalidBody, []string{"NewOrder"}},
		{"an empty body", ``, nil, 400, codeInvalidBody, []string{"empty"}},
		{"a body over 1 MiB", `{"petId":1}` + strings.Repeat(" ", maxBodyBytes), nil, 413, codePayloadTooLarge, []string{"1 MiB"}},
		{"a body that is not JSON", `petId=1`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, codeUnsupportedMediaType, []string{"application/json"}},
	}
	for _, tt := range refusals {
		t.Run(tt.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "POST", "/v1/store/orders", tt.body, tt.header), tt.status, tt.code, tt.mention...)
		})
	}
	t.Run("a refused order changes nothing", func(t *testing.T) {
		want := []Pet{{rex.ID, "Rex", 1, "pending"}, pending, sold}
		if diff := cmp.Diff(want, listAll[Pet](t, ts.URL, "/v1/pets", nil, nil)); diff != "" {
			t.Errorf("pets after refused orders mismatch (-want +got):\n%s", diff)
		}
		if orders := listAll[orderJSON](t, ts.URL, "/v1/store/orders", nil, nil); len(orders) != 1 {
			t.Errorf("orders after refusals: %v, want only the first", orders)
		}
	})
}

func TestPlaceOrderIdempotency(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	rex := ts.createPet(t, "Rex", 1, "")
	tom := ts.createPet(t, "Tom", 1, "")
	body := fmt.Sprintf(`{"petId":%d}`, rex.ID)
	first := ts.do(t, "POST", "/v1/store/orders", body, withIdempotencyKey("order-1"))
	if first.Status != http.StatusCreated {
		t.Fatalf("status %d, body %s", first.Status, first.Body)
	}
	t.Run("a retry replays the first 201", func(t *testing.T) {
		again := ts.do(t, "POST", "/v1/store/orders", body, withIdempotencyKey("order-1"))
		if diff := cmp.Diff(createdOf(first), createdOf(again)); diff != "" || again.Header.Get(idempotencyReplayedHdr) != "true" {
			t.Errorf("replay mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the same key for another pet is 422", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, tom.ID), withIdempotencyKey("order-1")), 422, codeIdempotencyMismatch)
	})
	t.Run("the same key on the other create operation is another request: 422", func(t *testing.T) {
		wantError(t, ts.do(t, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, withIdempotencyKey("order-1")), 422, codeIdempotencyMismatch)
		if res := ts.do(t, "POST", "/v1/pets", `{"name":"Max","categoryId":1}`, withIdempotencyKey("pet-1")); res.Status != http.StatusCreated {
			t.Fatalf("createPet: status %d", res.Status)
		}
		wantError(t, ts.do(t, "POST", "/v1/store/orders", body, withIdempotencyKey("pet-1")), 422, codeIdempotencyMismatch)
	})
	t.Run("a refused order records nothing: a retry is judged afresh", func(t *testing.T) {
		tomBody := fmt.Sprintf(`{"petId":%d}`, tom.ID)
		held := ts.placeOrder(t, tom.ID) // tom is now pending
		wantError(t, ts.do(t, "POST", "/v1/store/orders", tomBody, withIdempotencyKey("later")), 409, codePetNotAvailable)
		if res := ts.setOrder(t, held.ID, "cancelled"); res.Status != http.StatusOK {
			t.Fatalf("cancel: status %d", res.Status)
		}
		if res := ts.do(t, "POST", "/v1/store/orders", tomBody, withIdempotencyKey("later")); res.Status != http.StatusCreated || res.Header.Get(idempotencyReplayedHdr) != "" {
			t.Errorf("retry once the pet is available: status %d, replayed %q, want a fresh 201", res.Status, res.Header.Get(idempotencyReplayedHdr))
		}
	})
}

func TestUpdateOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, time.May, 4, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	ts := newTestServer(t, withClock(clock.now))
	// order returns an order in the given status, placed at start and, when
	// not placed, changed at start plus a minute.
	order := func(t *testing.T, status string) (orderJSON, Pet) {
		t.Helper()
		clock.set(start)
		pet := ts.createPet(t, "pet", 1, "")
		o := ts.placeOrder(t, pet.ID)
		if status != "placed" {
			clock.set(start.Add(time.Minute))
			if res := ts.setOrder(t, o.ID, status); res.Status != http.StatusOK {
				t.Fatalf("set up a %s order: status %d, body %s", status, res.Status, res.Body)
			}
			o = decode[orderJSON](t, ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", o.ID), "", nil))
		}
		pet.Status = ts.petNow(t, pet.ID)[0].Status
		return o, pet
	}
	tests := []struct {
		from, to string
		ok       bool   // 200; 409 invalid_transition otherwise
		petAfter string // the pet's status after a 200
		changes  bool   // updatedAt moves
	}{
		{"placed", "delivered", true, "sold", true},
		{"placed", "cancelled", true, "available", true},
		{"placed", "placed", true, "pending", false},
		{"delivered", "delivered", true, "sold", false},
		{"cancelled", "cancelled", true, "available", false},
		{"delivered", "cancelled", false, "", false},
		{"delivered", "placed", false, "", false},
		{"cancelled", "placed", false, "", false},
		{"cancelled", "delivered", false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.from+" to "+tt.to, func(t *testing.T) {
			o, pet := order(t, tt.from)
			clock.set(start.Add(time.Hour))
			res := ts.setOrder(t, o.ID, tt.to)
			if !tt.ok {
				wantError(t, res, 409, codeInvalidTransition, tt.from, tt.to)
				if diff := cmp.Diff([]Pet{pet}, ts.petNow(t, pet.ID)); diff != "" {
					t.Errorf("a refused transition changed the pet (-want +got):\n%s", diff)
				}
				return
			}
			want := o
			want.Status = tt.to
			if tt.changes {
				want.UpdatedAt = apiTime(start.Add(time.Hour))
			}
			if res.Status != http.StatusOK {
				t.Fatalf("status %d, body %s", res.Status, res.Body)
			}
			if diff := cmp.Diff(want, decode[orderJSON](t, res)); diff != "" {
				t.Errorf("order after PATCH mismatch (-want +got):\n%s", diff)
			}
			pet.Status = tt.petAfter
			if diff := cmp.Diff([]Pet{pet}, ts.petNow(t, pet.ID)); diff != "" {
				t.Errorf("pet after PATCH mismatch (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a cancelled order's pet can be ordered anew", func(t *testing.T) {
		o, pet := order(t, "cancelled")
		again := ts.placeOrder(t, pet.ID)
		if again.ID <= o.ID || again.Status != "placed" {
			t.Errorf("second order %+v, want a new placed order after %d", again, o.ID)
		}
	})
	t.Run("a delivered order is history: its pet may change later, the order does not", func(t *testing.T) {
		o, pet := order(t, "delivered")
		res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", pet.ID), `{"status":"available"}`, nil)
		if res.Status != http.StatusOK {
			t.Fatalf("returning the pet: status %d, body %s", res.Status, res.Body)
		}
		if diff := cmp.Diff(o, decode[orderJSON](t, ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", o.ID), "", nil))); diff != "" {
			t.Errorf("the delivered order changed (-want +got):\n%s", diff)
		}
	})
	t.Run("a clock stepped back never dates a change before the order", func(t *testing.T) {
		o, _ := order(t, "placed")
		clock.set(start.Add(-time.Hour))
		got := decode[orderJSON](t, ts.setOrder(t, o.ID, "delivered"))
		if got.UpdatedAt != o.PlacedAt {
			t.Errorf("updatedAt = %s, want the placing instant %s", got.UpdatedAt, o.PlacedAt)
		}
	})

	o, _ := order(t, "placed")
	path := fmt.Sprintf("/v1/store/orders/%d", o.ID)
	bad := []struct {
		rule    string
		path    string
		body    string
		header  map[string]string
		status  int
		code    string
		mention []string
	}{
		{"an empty patch", path, `{}`, nil, 400, codeInvalidField, []string{"status", "required"}},
		{"an unknown status", path, `{"status":"shipped"}`, nil, 400, codeInvalidField, []string{"placed, delivered, cancelled"}},
		{"status null", path, `{"status":null}`, nil, 400, codeInvalidField, []string{"status", "null"}},
		{"another field", path, `{"status":"delivered","petId":3}`, nil, 400, codeInvalidField, []string{`"petId"`, "an OrderUpdate has"}},
		{"the id", path, `{"id":3,"status":"delivered"}`, nil, 400, codeInvalidField, []string{"id"}},
		{"not JSON", path, `status=delivered`, map[string]string{"Content-Type": "text/plain"}, 415, codeUnsupportedMediaType, []string{"application/json or application/merge-patch+json"}},
		{"no such order", "/v1/store/orders/999999", `{"status":"delivered"}`, nil, 404, codeNotFound, []string{"no order has id 999999"}},
		{"an id that cannot exist", "/v1/store/orders/0", `{"status":"delivered"}`, nil, 404, codeNotFound, []string{"order ids"}},
		{"an id that is not a number", "/v1/store/orders/abc", `{"status":"delivered"}`, nil, 404, codeNotFound, []string{"order ids"}},
		{"an id past the int64 range", "/v1/store/orders/9223372036854775808", `{"status":"delivered"}`, nil, 404, codeNotFound, []string{"from 1 to 9223372036854775807"}},
	}
	for _, tt := range bad {
		t.Run(tt.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "PATCH", tt.path, tt.body, tt.header), tt.status, tt.code, tt.mention...)
		})
	}
	t.Run("a JSON Merge Patch media type is accepted", func(t *testing.T) {
		res := ts.do(t, "PATCH", path, `{"status":"delivered"}`, map[string]string{"Content-Type": "application/merge-patch+json"})
		if res.Status != http.StatusOK || decode[orderJSON](t, res).Status != "delivered" {
			t.Errorf("status %d, body %s", res.Status, res.Body)
		}
	})
}

func TestGetAndListOrders(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	var all []orderJSON
	for i := range 7 {
		pet := ts.createPet(t, fmt.Sprint("pet-", i), 1, "")
		o := ts.placeOrder(t, pet.ID)
		if i%3 == 1 {
			o = decode[orderJSON](t, ts.setOrder(t, o.ID, "delivered"))
		}
		all = append(all, o)
	}
	byStatus := func(status string) []orderJSON {
		var out []orderJSON
		for _, o := range all {
			if o.Status == status {
				out = append(out, o)
			}
		}
		return out
	}
	t.Run("walking every page lists every order once, in id order", func(t *testing.T) {
		if diff := cmp.Diff(all, listAll[orderJSON](t, ts.URL, "/v1/store/orders?limit=3", nil, nil)); diff != "" {
			t.Errorf("orders mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the status filter is carried from page to page", func(t *testing.T) {
		if diff := cmp.Diff(byStatus("placed"), listAll[orderJSON](t, ts.URL, "/v1/store/orders?status=placed&limit=2", nil, nil)); diff != "" {
			t.Errorf("placed orders mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("the Link names the next page", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/store/orders?limit=1&status=delivered", "", nil)
		want := fmt.Sprintf(`</v1/store/orders?limit=1&status=delivered&after=%d>; rel="next"`, byStatus("delivered")[0].ID)
		if got := res.Header.Get("Link"); got != want {
			t.Errorf("Link = %q, want %q", got, want)
		}
	})
	t.Run("no order yet is an empty array", func(t *testing.T) {
		res := ts.do(t, "GET", "/v1/store/orders?status=cancelled", "", nil)
		if res.Status != http.StatusOK || string(res.Body) != "[]\n" || res.Header.Get("Link") != "" {
			t.Errorf("status %d, Link %q, body %q; want 200, no Link, []", res.Status, res.Header.Get("Link"), res.Body)
		}
	})
	for _, tt := range []struct{ rule, query, mention string }{
		{"limit above 100", "limit=101", "limit"},
		{"limit 0", "limit=0", "limit"},
		{"a pet status is not an order status", "status=sold", "placed, delivered, cancelled"},
		{"after not a number", "after=x", "an order id"},
		{"the id filter is listPets'", "id=1", "listOrders takes limit, status and after"},
		{"an unknown parameter", "page=2", "listOrders takes"},
		{"a parameter twice", "limit=1&limit=2", "2 times"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "GET", "/v1/store/orders?"+tt.query, "", nil), 400, codeInvalidParameter, tt.mention)
		})
	}
	t.Run("getOrder of each order", func(t *testing.T) {
		for _, o := range all {
			if diff := cmp.Diff(o, decode[orderJSON](t, ts.do(t, "GET", fmt.Sprintf("/v1/store/orders/%d", o.ID), "", nil))); diff != "" {
				t.Errorf("getOrder %d mismatch (-want +got):\n%s", o.ID, diff)
			}
		}
	})
	for _, id := range []string{"999999", "0", "-1", "x", "9223372036854775808"} {
		t.Run("getOrder "+id+" is 404", func(t *testing.T) {
			wantError(t, ts.do(t, "GET", "/v1/store/orders/"+id, "", nil), 404, codeNotFound, "order")
		})
	}
}

func TestUpdatePet(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	tests := []struct {
		rule  string
		patch string
		want  func(p Pet) Pet
	}{
		{"an empty patch changes nothing", `{}`, func(p Pet) Pet { return p }},
		{"the name", `{"name":"Rexy"}`, func(p Pet) Pet { p.Name = "Rexy"; return p }},
		{"the category", `{"categoryId":9223372036854775807}`, func(p Pet) Pet { p.CategoryID = 9223372036854775807; return p }},
		{"the status", `{"status":"sold"}`, func(p Pet) Pet { p.Status = "sold"; return p }},
		{"every field", `{"status":"pending","categoryId":3,"name":"Kit"}`, func(p Pet) Pet { return Pet{p.ID, "Kit", 3, "pending"} }},
		{"the same values", `{"name":"Rex","categoryId":1,"status":"available"}`, func(p Pet) Pet { return p }},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			p := ts.createPet(t, "Rex", 1, "available")
			for _, ct := range []string{"application/json", "application/merge-patch+json"} {
				res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), tt.patch, map[string]string{"Content-Type": ct})
				if res.Status != http.StatusOK {
					t.Fatalf("%s: status %d, body %s", ct, res.Status, res.Body)
				}
				want := tt.want(p)
				if diff := cmp.Diff(want, decode[Pet](t, res)); diff != "" {
					t.Errorf("%s: answer mismatch (-want +got):\n%s", ct, diff)
				}
				if diff := cmp.Diff([]Pet{want}, ts.petNow(t, p.ID)); diff != "" {
					t.Errorf("%s: stored pet mismatch (-want +got):\n%s", ct, diff)
				}
			}
		})
	}

	rex := ts.createPet(t, "Rex", 1, "available")
	path := fmt.Sprintf("/v1/pets/%d", rex.ID)
	bad := []struct {
		rule    string
		path    string
		patch   string
		header  map[string]string
		status  int
		code    string
		mention []string
	}{
		{"a null field", path, `{"name":null}`, nil, 400, codeInvalidField, []string{"name", "null", "cannot remove"}},
		{"a null status", path, `{"status":null}`, nil, 400, codeInvalidField, []string{"status", "null"}},
		{"the id", path, `{"id":9}`, nil, 400, codeInvalidField, []string{"id", "assigns"}},
		{"an unknown field", path, `{"colour":"red"}`, nil, 400, codeInvalidField, []string{`"colour"`, "PetPatch"}},
		{"a categoryId with a leading zero is not JSON", path, `{"categoryId":01}`, nil, 400, codeInvalidBody, []string{"not valid JSON"}},
		{"a blank name", path, `{"name":"  "}`, nil, 400, codeInvalidField, []string{"name"}},
		{"a name of 101 characters", path, `{"name":"` + strings.Repeat("x", 101) + `"}`, nil, 400, codeInvalidField, []string{"100"}},
		{"category 0", path, `{"categoryId":0}`, nil, 400, codeInvalidField, []string{"categoryId"}},
		{"an unknown status", path, `{"status":"lost"}`, nil, 400, codeInvalidField, []string{"available, pending, sold"}},
		{"not an object", path, `"sold"`, nil, 400, codeInvalidBody, []string{"PetPatch"}},
		{"a body over 1 MiB", path, `{}` + strings.Repeat(" ", maxBodyBytes), nil, 413, codePayloadTooLarge, []string{"1 MiB"}},
		{"another media type", path, `{}`, map[string]string{"Content-Type": "application/json-patch+json"}, 415, codeUnsupportedMediaType, []string{"merge-patch"}},
		{"no such pet", "/v1/pets/999999", `{}`, nil, 404, codeNotFound, []string{"no pet has id 999999"}},
		{"an id that cannot exist", "/v1/pets/0", `{}`, nil, 404, codeNotFound, []string{"pet ids"}},
	}
	for _, tt := range bad {
		t.Run(tt.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "PATCH", tt.path, tt.patch, tt.header), tt.status, tt.code, tt.mention...)
			if diff := cmp.Diff([]Pet{rex}, ts.petNow(t, rex.ID)); diff != "" {
				t.Errorf("a refused patch changed the pet (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("a pet with a placed order", func(t *testing.T) {
		p := ts.createPet(t, "Ordered", 1, "")
		o := ts.placeOrder(t, p.ID)
		for _, status := range []string{"available", "sold"} {
			wantError(t, ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), fmt.Sprintf(`{"status":%q}`, status), nil),
				409, codePetHasOpenOrder, fmt.Sprint("order ", o.ID))
		}
		res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), `{"name":"Renamed","categoryId":2,"status":"pending"}`, nil)
		if diff := cmp.Diff(Pet{p.ID, "Renamed", 2, "pending"}, decode[Pet](t, res)); diff != "" || res.Status != http.StatusOK {
			t.Errorf("its name and category can change (status %d) (-want +got):\n%s", res.Status, diff)
		}
	})
}

func TestDeletePet(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	a := ts.createPet(t, "A", 1, "")
	b := ts.createPet(t, "B", 1, "")
	res := ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", a.ID), "", nil)
	if res.Status != http.StatusNoContent || len(res.Body) != 0 {
		t.Fatalf("status %d, body %q; want 204 and no body", res.Status, res.Body)
	}
	t.Run("then getPet is 404", func(t *testing.T) {
		wantError(t, ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", a.ID), "", nil), 404, codeNotFound)
	})
	t.Run("no list shows it", func(t *testing.T) {
		for _, path := range []string{"/v1/pets", "/v1/pets?status=available", fmt.Sprintf("/v1/pets?id=%d,%d", a.ID, b.ID)} {
			if diff := cmp.Diff([]Pet{b}, listAll[Pet](t, ts.URL, path, nil, nil)); diff != "" {
				t.Errorf("GET %s after DELETE mismatch (-want +got):\n%s", path, diff)
			}
		}
	})
	t.Run("again is 404", func(t *testing.T) {
		wantError(t, ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", a.ID), "", nil), 404, codeNotFound, fmt.Sprint("no pet has id ", a.ID))
	})
	t.Run("an id that cannot exist is 404", func(t *testing.T) {
		wantError(t, ts.do(t, "DELETE", "/v1/pets/x", "", nil), 404, codeNotFound)
	})
	t.Run("its id is never given again", func(t *testing.T) {
		if c := ts.createPet(t, "C", 1, ""); c.ID <= b.ID {
			t.Errorf("new pet id %d, want above %d", c.ID, b.ID)
		}
	})
	for _, status := range []string{"placed", "delivered", "cancelled"} {
		t.Run("a pet named by a "+status+" order is kept: 409", func(t *testing.T) {
			p := ts.createPet(t, "Sold", 1, "")
			o := ts.placeOrder(t, p.ID)
			if status != "placed" {
				ts.setOrder(t, o.ID, status)
			}
			before := ts.petNow(t, p.ID)
			hint := "can be given another status with PATCH" // a sold or returned pet's way out
			if status == "placed" {
				hint = fmt.Sprintf("deliver or cancel that order (PATCH /v1/store/orders/%d)", o.ID)
			}
			wantError(t, ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), "", nil), 409, codePetHasOrders, "1 order", hint)
			if diff := cmp.Diff(before, ts.petNow(t, p.ID)); diff != "" {
				t.Errorf("the pet changed (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("an idempotent create of a deleted pet still replays its first answer", func(t *testing.T) {
		first := ts.do(t, "POST", "/v1/pets", `{"name":"Gone","categoryId":1}`, withIdempotencyKey("gone"))
		ts.do(t, "DELETE", first.Header.Get("Location"), "", nil)
		again := ts.do(t, "POST", "/v1/pets", `{"name":"Gone","categoryId":1}`, withIdempotencyKey("gone"))
		if diff := cmp.Diff(createdOf(first), createdOf(again)); diff != "" {
			t.Errorf("replay after delete mismatch (-want +got):\n%s", diff)
		}
		if got := listAll[Pet](t, ts.URL, "/v1/pets?id="+strings.TrimPrefix(first.Header.Get("Location"), "/v1/pets/"), nil, nil); len(got) != 0 {
			t.Errorf("the replay brought the pet back: %v", got)
		}
	})
}

func TestListPetsByID(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	var pets []Pet
	for i := range 12 {
		pets = append(pets, ts.createPet(t, fmt.Sprint("p", i), 1, petStatuses[i%3]))
	}
	id := func(i int) int64 { return pets[i].ID }
	// longIDs are n ids of 19 digits that no pet has.
	longIDs := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, ",%d", int64(math.MaxInt64)-int64(i))
		}
		return b.String()
	}
	tests := []struct {
		rule     string
		query    string
		want     []Pet
		wantLink string
	}{
		{"the pets with those ids, ascending", fmt.Sprintf("id=%d,%d,%d", id(9), id(1), id(5)), []Pet{pets[1], pets[5], pets[9]}, ""},
		{"ids no pet has are left out", fmt.Sprintf("id=%d,999999", id(2)), []Pet{pets[2]}, ""},
		{"one id", fmt.Sprintf("id=%d", id(3)), []Pet{pets[3]}, ""},
		{"no pet has any of them: []", "id=999998,999999", []Pet{}, ""},
		{"a repeated id lists its pet once", fmt.Sprintf("id=%d,%d", id(4), id(4)), []Pet{pets[4]}, ""},
		{"combined with status", fmt.Sprintf("id=%d,%d,%d&status=available", id(0), id(1), id(3)), []Pet{pets[0], pets[3]}, ""},
		{"a limit pages them and the Link carries the ids after the page", fmt.Sprintf("id=%d,%d,%d&limit=2", id(7), id(6), id(8)), []Pet{pets[6], pets[7]},
			fmt.Sprintf(`</v1/pets?limit=2&id=%d&after=%d>; rel="next"`, id(8), id(7))},
		{"after continues", fmt.Sprintf("id=%d,%d,%d&limit=2&after=%d", id(6), id(7), id(8), id(7)), []Pet{pets[8]}, ""},
		{"100 ids", "id=" + strings.Repeat("1,", 99) + "2", []Pet{pets[0], pets[1]}, ""},
		{"long ids in one page, which needs no Link", fmt.Sprintf("limit=30&id=%d%s", id(0), longIDs(29)), []Pet{pets[0]}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			res := ts.do(t, "GET", "/v1/pets?"+tt.query, "", nil)
			if diff := cmp.Diff(tt.want, decode[[]Pet](t, res)); diff != "" {
				t.Errorf("GET /v1/pets?%s mismatch (-want +got):\n%s", tt.query, diff)
			}
			if got := res.Header.Get("Link"); got != tt.wantLink {
				t.Errorf("Link = %q, want %q", got, tt.wantLink)
			}
		})
	}
	for _, tt := range []struct{ rule, query, mention string }{
		{"an empty id", "id=", "item 1"},
		{"an empty item", "id=1,,2", "item 2"},
		{"a trailing comma", "id=1,2,", "item 3"},
		{"id 0", "id=0", "item 1"},
		{"a negative id", "id=-3", "item 1"},
		{"not a number", "id=1,rex", `"rex"`},
		{"beyond int64", "id=9223372036854775808", "item 1"},
		{"101 ids", "id=" + strings.Repeat("1,", 100) + "1", "101 ids"},
		{"id given twice", "id=1&id=2", "2 times"},
		{"spaces", "id=1,%202", "item 2"},
		{"long ids paged: the Link could pass 512 bytes", fmt.Sprintf("limit=5&id=%d%s", id(0), longIDs(29)), "limit=30"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			wantError(t, ts.do(t, "GET", "/v1/pets?"+tt.query, "", nil), 400, codeInvalidParameter, "id", tt.mention)
		})
	}
}

// TestConcurrentOrdersForOnePetPlaceExactlyOne sends many concurrent orders
// for each of a few pets: exactly one per pet is placed, every other is 409,
// and each pet is pending with its one order (see also TestWhatHoldsOfASale).
func TestConcurrentOrdersForOnePetPlaceExactlyOne(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	const pets, clients = 4, 25
	var ids []int64
	for i := range pets {
		ids = append(ids, ts.createPet(t, fmt.Sprint("pet-", i), 1, "").ID)
	}
	statuses := make([][]int, pets)
	for i := range statuses {
		statuses[i] = make([]int, clients)
	}
	var wg sync.WaitGroup
	for c := range clients {
		for p, id := range ids {
			wg.Go(func() {
				statuses[p][c] = ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, id), nil).Status
			})
		}
	}
	wg.Wait()
	for p, id := range ids {
		counts := map[int]int{}
		for _, s := range statuses[p] {
			counts[s]++
		}
		if diff := cmp.Diff(map[int]int{201: 1, 409: clients - 1}, counts); diff != "" {
			t.Errorf("pet %d: statuses mismatch (-want +got):\n%s", id, diff)
		}
		if got := ts.petNow(t, id); len(got) != 1 || got[0].Status != "pending" {
			t.Errorf("pet %d after the orders: %v, want pending", id, got)
		}
	}
	if got := listAll[orderJSON](t, ts.URL, "/v1/store/orders?status=placed", nil, nil); len(got) != pets {
		t.Errorf("%d placed orders, want %d (one per pet)", len(got), pets)
	}
}

// TestTheDatabaseRefusesASecondPlacedOrder shows the rule held below the
// code: even a write that skips the store's checks cannot place a second
// order for a pet.
func TestTheDatabaseRefusesASecondPlacedOrder(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	p := ts.createPet(t, "Rex", 1, "")
	ts.placeOrder(t, p.ID)
	if err := ts.exec(t, "INSERT INTO orders (pet_id, status, placed_at, updated_at) VALUES (?, 'placed', 0, 0)", p.ID); err == nil {
		t.Errorf("the database accepted a second placed order for pet %d", p.ID)
	}
	if err := ts.exec(t, "DELETE FROM pets WHERE id = ?", p.ID); err == nil {
		t.Errorf("the database deleted a pet that an order names")
	}
}

// salesRule is the sentence of docs/api.md that says what holds of a sale;
// TestWhatHoldsOfASale holds the service to it, and the docs to the test.
const salesRule = "of any number of concurrent orders for one pet, exactly one is placed and the others get 409 " +
	"`pet_not_available`; the database itself holds at most one placed order per pet; and a sold pet that " +
	"updatePet makes `available` again (a returned animal) can be ordered and delivered again, so a pet may " +
	"have several delivered orders, one per sale."

// TestWhatHoldsOfASale checks each part of salesRule on one pet: concurrent
// orders place exactly one; the database refuses a second placed order; and
// a pet sold, returned (PATCHed to available) and sold again has two
// delivered orders.
func TestWhatHoldsOfASale(t *testing.T) {
	t.Parallel()
	if !strings.Contains(strings.Join(strings.Fields(readFile(t, "docs/api.md")), " "), salesRule) {
		t.Errorf("docs/api.md does not say, word for word: %s", salesRule)
	}
	ts := newTestServer(t)
	p := ts.createPet(t, "Rex", 1, "")

	const clients = 16
	statuses := make([]int, clients)
	orders := make([]orderJSON, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			res := ts.do(t, "POST", "/v1/store/orders", fmt.Sprintf(`{"petId":%d}`, p.ID), nil)
			statuses[c] = res.Status
			if res.Status == http.StatusCreated {
				orders[c] = decode[orderJSON](t, res)
			}
		})
	}
	wg.Wait()
	counts := map[int]int{}
	var first orderJSON
	for c, s := range statuses {
		counts[s]++
		if s == http.StatusCreated {
			first = orders[c]
		}
	}
	if diff := cmp.Diff(map[int]int{http.StatusCreated: 1, http.StatusConflict: clients - 1}, counts); diff != "" {
		t.Fatalf("concurrent orders for one pet: statuses mismatch (-want +got):\n%s", diff)
	}
	if err := ts.exec(t, "INSERT INTO orders (pet_id, status, placed_at, updated_at) VALUES (?, 'placed', 0, 0)", p.ID); err == nil {
		t.Errorf("the database accepted a second placed order for pet %d", p.ID)
	}

	if res := ts.setOrder(t, first.ID, "delivered"); res.Status != http.StatusOK {
		t.Fatalf("deliver order %d: status %d %s", first.ID, res.Status, res.Body)
	}
	// The animal comes back: its status is free again once no order is
	// placed.
	if res := ts.do(t, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), `{"status":"available"}`, nil); res.Status != http.StatusOK {
		t.Fatalf("PATCH the sold pet to available: status %d %s", res.Status, res.Body)
	}
	second := ts.placeOrder(t, p.ID)
	if res := ts.setOrder(t, second.ID, "delivered"); res.Status != http.StatusOK {
		t.Fatalf("deliver order %d: status %d %s", second.ID, res.Status, res.Body)
	}
	var delivered []int64
	for _, o := range listAll[orderJSON](t, ts.URL, "/v1/store/orders?status=delivered", nil, nil) {
		if o.PetID == p.ID {
			delivered = append(delivered, o.ID)
		}
	}
	if diff := cmp.Diff([]int64{first.ID, second.ID}, delivered); diff != "" {
		t.Errorf("delivered orders of pet %d (-want +got):\n%s", p.ID, diff)
	}
	if got := ts.petNow(t, p.ID); len(got) != 1 || got[0].Status != "sold" {
		t.Errorf("pet %d after its second sale: %v, want sold", p.ID, got)
	}
}
