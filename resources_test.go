package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEveryResourceIsDeclaredWhole holds each resource's declaration
// (resourceSpecs) to what the layers built on it need: the feed's types and
// patterns, the scope that reads its events, its caches within the 10 MiB
// the caches may hold in all, its tables for petstore copy, and the API
// document's lists of event types, which follow from the declarations.
func TestEveryResourceIsDeclaredWhole(t *testing.T) {
	t.Parallel()
	var total int64
	seen := map[string]bool{}
	for r, spec := range resourceSpecs {
		res := resource(r)
		if spec.name == "" || !strings.HasPrefix(spec.collection, "/v1/") {
			t.Errorf("resource %d: name %q, collection %q: both are needed, the collection under /v1/", r, spec.name, spec.collection)
		}
		if !slices.Contains(knownScopes(), spec.readScope) {
			t.Errorf("%s: read scope %q is not a scope a key may hold", res, spec.readScope)
		}
		if len(spec.events) == 0 {
			t.Errorf("%s: no event types: its changes would make events of no declared type", res)
		}
		for _, typ := range spec.events {
			if !strings.HasPrefix(typ, spec.name+".") || seen[typ] {
				t.Errorf("%s: event type %q must start with %q and be declared once", res, typ, spec.name+".")
			}
			seen[typ] = true
			if got, ok := resourceOfEventType(typ); !ok || got != res {
				t.Errorf("resourceOfEventType(%q) = %v, %v; want %v", typ, got, ok, res)
			}
		}
		for _, c := range []cacheBudget{spec.listCache, spec.itemCache} {
			if c.slots <= 0 || c.bytes <= 0 {
				t.Errorf("%s: cache budget %+v: slots and bytes are both needed", res, c)
			}
			total += c.bytes
		}
		if len(spec.tables) == 0 || !spec.tables[0].hasID {
			t.Errorf("%s: its first table must be the one its ids come from: %+v", res, spec.tables)
		}
	}
	if total > 10<<20 {
		t.Errorf("the caches' budgets add up to %.1f MiB, more than 10 MiB", float64(total)/(1<<20))
	}

	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	filter := slices.Concat(eventTypes, eventPatterns)
	if diff := cmp.Diff(filter, doc.Components.Schemas["EventTypeFilter"].Enum); diff != "" {
		t.Errorf("EventTypeFilter's enum in openapi.json differs from the declared types and patterns (-declared +document):\n%s", diff)
	}
	if diff := cmp.Diff(append(filter, "*"), doc.Components.Schemas["WebhookTypePattern"].Enum); diff != "" {
		t.Errorf("WebhookTypePattern's enum in openapi.json differs from the declared types and patterns (-declared +document):\n%s", diff)
	}
}
