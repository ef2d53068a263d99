package main

import (
	"fmt"
	"strings"
)

// The domain's scopes: what an API key may do, declared once in scopeTable.

// scope is a permission an API key may hold. A write scope includes the
// read of the same resource; "*" is every scope, and is also a scope of its
// own that /metrics needs (it shows the traffic of every key), which a key
// listing all the others does not hold.
type scope string

// The scopes, as the key file and the API document name them. Each is a
// row of scopeTable, which says what it grants and what it is for.
const (
	scopePetsRead      scope = "pets:read"
	scopePetsWrite     scope = "pets:write"
	scopeOrdersRead    scope = "orders:read"
	scopeOrdersWrite   scope = "orders:write"
	scopeEventsRead    scope = "events:read"
	scopeWebhooksWrite scope = "webhooks:write"
	scopeAll           scope = "*"
	// noKey is the scope of a route that needs no key at all (the health
	// checks, the API document): declared, so that a route without a
	// scope is an omission a test finds. It is no row of scopeTable.
	noKey scope = "none"
)

// scopeRow declares one scope: its name, the other scopes it includes, and
// what it lets a key do, as `petstore keys new -h` and docs/keys.md say.
type scopeRow struct {
	name        scope
	includes    []scope // besides itself; every scope for "*"
	description string
}

// scopeTable is every scope a key may hold, in the order the documentation
// lists them; a scope's bit in a scopeSet is its row's index. Adding a scope
// is one row here (and its constant above); the checks, the sets, their
// names and the help follow from it.
var scopeTable = []scopeRow{
	{scopePetsRead, nil, "read the catalogue (listPets, getPet)"},
	{scopePetsWrite, []scope{scopePetsRead}, "change the catalogue (createPet, updatePet, deletePet); includes pets:read"},
	{scopeOrdersRead, nil, "read orders (listOrders, getOrder)"},
	{scopeOrdersWrite, []scope{scopeOrdersRead}, "place and change orders (placeOrder, updateOrder); includes orders:read"},
	{scopeEventsRead, nil, "read the change feed (listEvents, createEventTicket), of the resources the key may read"},
	{scopeWebhooksWrite, nil, "manage webhook subscriptions, those whose every type the key may read"},
	{scopeAll, nil, "everything, now and later, and GET /metrics, which needs * itself"},
}

// knownScopes lists the scopes a key may hold, in the order of scopeTable.
func knownScopes() []scope {
	names := make([]scope, len(scopeTable))
	for i, row := range scopeTable {
		names[i] = row.name
	}
	return names
}

// scopeSet is a set of scopes, one bit each, in the order of scopeTable.
type scopeSet uint64

// everyScope is the set a key holds with "*", without scopes= or from
// PETSTORE_API_KEYS: every row of scopeTable.
var everyScope = scopeSet(1)<<len(scopeTable) - 1

// bit is the scope's bit in a scopeSet; 0 for a name that is not a scope.
func (s scope) bit() scopeSet {
	for i, row := range scopeTable {
		if row.name == s {
			return 1 << i
		}
	}
	return 0
}

// grants is the set that holding s gives: s itself and what its row
// includes, or every scope for "*"; 0 for a name that is not a scope.
func (s scope) grants() scopeSet {
	if s == scopeAll {
		return everyScope
	}
	g := s.bit()
	if g == 0 {
		return 0
	}
	for _, row := range scopeTable {
		if row.name == s {
			for _, inc := range row.includes {
				g |= inc.bit()
			}
		}
	}
	return g
}

// has reports whether the set holds s.
func (ss scopeSet) has(s scope) bool { b := s.bit(); return b != 0 && ss&b == b }

// String lists the set as scopes= writes it: "*" alone for every scope,
// otherwise each scope held in the order of scopeTable, a scope left out
// when another one held includes it.
func (ss scopeSet) String() string {
	if ss.has(scopeAll) {
		return string(scopeAll)
	}
	var names []string
	for _, s := range knownScopes() {
		if !ss.has(s) || ss.includedByAnother(s) {
			continue
		}
		names = append(names, string(s))
	}
	return strings.Join(names, ",")
}

// includedByAnother reports whether a scope of the set other than s
// includes s (pets:write includes pets:read).
func (ss scopeSet) includedByAnother(s scope) bool {
	for _, row := range scopeTable {
		if row.name != s && row.name != scopeAll && ss.has(row.name) && row.name.grants()&s.bit() != 0 {
			return true
		}
	}
	return false
}

// scopeHelp lists the scopes with what each lets a key do, one per line,
// for `petstore keys new -h`.
func scopeHelp() string {
	var b strings.Builder
	for _, row := range scopeTable {
		fmt.Fprintf(&b, "\n  %-15s %s", row.name, row.description)
	}
	return b.String()
}

// parseScopes reads a comma-separated list of scopes. An unknown name is an
// error that lists the known ones, without repeating the name.
func parseScopes(list string) (scopeSet, error) {
	var ss scopeSet
	for name := range strings.SplitSeq(list, ",") {
		g := scope(name).grants()
		if g == 0 {
			var known []string
			for _, k := range knownScopes() {
				known = append(known, string(k))
			}
			return 0, fmt.Errorf("scopes= takes a comma-separated list of %s, without spaces", strings.Join(known, ", "))
		}
		ss |= g
	}
	return ss, nil
}
