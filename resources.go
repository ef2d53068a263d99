package main

import "strconv"

// resource names a kind of row the API serves: each has its generations in
// the response caches (http_cache.go), its change records (store_changes.go) and
// its events (events.go).
type resource int

const (
	petsResource resource = iota
	ordersResource
	numResources
)

// resourceSpec is what the layers above the store need to know of a
// resource, declared once per resource in resourceSpecs.
type resourceSpec struct {
	name       string // singular, as events and messages name it: "pet"
	collection string // the path of its collection: an item is at collection/{id}
}

// resourceSpecs declares every resource.
var resourceSpecs = [numResources]resourceSpec{
	petsResource:   {name: "pet", collection: "/v1/pets"},
	ordersResource: {name: "order", collection: "/v1/store/orders"},
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
