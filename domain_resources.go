package main

import (
	"strconv"
	"strings"
)

// The domain's resources: each is declared once, and the layers above
// follow from the declaration.

// resource names a kind of row the API serves: each has its generations in
// the response caches (store_generations.go), its change records
// (store_changes.go) and its events (domain_events.go).
type resource int

const (
	petsResource resource = iota
	ordersResource
	numResources
)

// resourceSpec is a resource's declaration: what the layers around its own
// files (its API file, its store file, its migrations) need to know of it,
// once. The feed, the scopes of its events, the response caches and
// `petstore copy` follow from it; docs/development.md counts what adding a
// resource touches.
type resourceSpec struct {
	name       string // singular, as events and messages name it: "pet"
	collection string // the path of its collection: an item is at collection/{id}
	// readScope is the scope that reads the resource, and so its events.
	readScope scope
	// events are the types of its events, each "name." and a word; its
	// row type's eventType (an eventRow) says which one a change makes.
	events []string
	// listCache and itemCache are the budgets of its response caches
	// (http_cache.go): its list's pages and its rows found by id.
	listCache, itemCache cacheBudget
	// tables are its tables, in an order that keeps references valid, as
	// `petstore copy` moves them (store_tables.go).
	tables []tableSpec
}

// cacheBudget bounds one response cache: its slots, and the bytes of the
// answers it holds (see http_cache.go).
type cacheBudget struct {
	slots int
	bytes int64
}

// resourceSpecs declares every resource. The caches' budgets add up to
// 10 MiB, whatever the size of the tables and whatever the answers hold: a
// pet's answer with its bookkeeping weighs about 200 bytes, an order's about
// 260, a page of 20 pets about 1.5 KB and one of 100 pets 7 to 65 KB.
var resourceSpecs = [numResources]resourceSpec{
	petsResource: {
		name: "pet", collection: "/v1/pets", readScope: scopePetsRead,
		events:    []string{eventPetCreated, eventPetUpdated, eventPetDeleted},
		listCache: cacheBudget{slots: 1 << 10, bytes: 4 << 20},
		itemCache: cacheBudget{slots: 1 << 14, bytes: 4 << 20},
		tables: []tableSpec{
			{name: "pets", columns: []string{"id", "name", "category_id", "status"}, hasID: true, noun: "pets"},
			{name: "pet_counts", notCopied: "kept by triggers: the destination's count the pets as the copy inserts them"},
		},
	},
	ordersResource: {
		name: "order", collection: "/v1/store/orders", readScope: scopeOrdersRead,
		events:    []string{eventOrderPlaced, eventOrderDelivered, eventOrderCancelled},
		listCache: cacheBudget{slots: 1 << 8, bytes: 1 << 20},
		itemCache: cacheBudget{slots: 1 << 12, bytes: 1 << 20},
		tables: []tableSpec{
			{name: "orders", columns: []string{"id", "pet_id", "status", "placed_at", "updated_at"}, hasID: true, noun: "orders"},
		},
	},
}

// String is the resource's singular name: "pet", "order".
func (r resource) String() string {
	if r >= 0 && r < numResources {
		return resourceSpecs[r].name
	}
	return "resource" + strconv.Itoa(int(r))
}

// pathOf is the path of the item id of r: "/v1/pets/7".
func (r resource) pathOf(id int64) string {
	return resourceSpecs[r].collection + "/" + strconv.FormatInt(id, 10)
}

// resourceOfEventType is the resource whose changes events of typ describe,
// and false for a type that is no resource's.
func resourceOfEventType(typ string) (resource, bool) {
	for r, spec := range resourceSpecs {
		if strings.HasPrefix(typ, spec.name+".") {
			return resource(r), true
		}
	}
	return 0, false
}

// tableSpec declares one table of the migrated schema: what `petstore copy`
// moves of it, or why it moves nothing. Every table the migrations create is
// declared once, in its resource's declaration (resourceSpecs) or here
// (TestEveryTableIsDeclared fails otherwise), so a table added by a
// migration cannot be forgotten by the copy.
type tableSpec struct {
	// name is the table's name, the same on both backends.
	name string
	// columns are the columns the copy moves, all of the table's
	// (TestEveryTableIsDeclared checks that too); none for a table the
	// copy leaves alone.
	columns []string
	// hasID says the table's rows have ids from a sequence, which the copy
	// moves past the source's, so that no id is ever handed out twice.
	hasID bool
	// singleton says the migrations create the table's rows (bookkeeping
	// such as a mark of how far something was pruned): the copy replaces
	// the destination's rows with the source's, and a destination counts
	// as empty whatever they hold.
	singleton bool
	// noun is what the copy's summary calls the table's rows: those it
	// copied or, for a table it does not copy, those it left behind, which
	// the summary counts with the reason (notCopied), so that nothing a
	// client made is dropped without a word. A table it does not copy
	// has none when its rows are the destination's own or remade by it.
	noun string
	// notCopied says why the copy leaves a table alone; "" for a table it
	// copies.
	notCopied string
}
