package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// refusalWordings are the refusals of the store, each type at least once,
// and what a client is told of each, whole.
var refusalWordings = []struct {
	rule string
	err  refusal
	want apiError
}{
	{"a pet's status follows its placed order",
		&petHasOpenOrder{petID: 2, orderID: 1, status: "pending"},
		apiError{codePetHasOpenOrder, "pet 2 has order 1 placed, so its status (pending) follows that order: deliver or cancel the order (PATCH /v1/store/orders/1) instead; its name and category can change", http.StatusConflict}},
	{"a pet that orders name is kept, and a sold one can change status",
		&petHasOrders{petID: 2, orders: 1},
		apiError{codePetHasOrders, "pet 2 is named by 1 order, its sales history, so it cannot be deleted; a sold or returned pet can be given another status with PATCH instead", http.StatusConflict}},
	{"a pet that orders name is kept, and its placed order decides its status",
		&petHasOrders{petID: 7, orders: 3, placedOrder: 12},
		apiError{codePetHasOrders, "pet 7 is named by 3 orders, its sales history, so it cannot be deleted; its order 12 is placed and decides its status: deliver or cancel that order (PATCH /v1/store/orders/12)", http.StatusConflict}},
	{"an order names an existing pet",
		&unknownPet{petID: 9},
		apiError{codeUnknownPet, "no pet has id 9; an order names an existing pet (see GET /v1/pets)", http.StatusUnprocessableEntity}},
	{"only an available pet is ordered",
		&petNotAvailable{petID: 2, status: "pending"},
		apiError{codePetNotAvailable, "pet 2 is pending, not available: only an available pet can be ordered", http.StatusConflict}},
	{"only a placed order changes",
		&invalidTransition{orderID: 1, from: "delivered", to: "cancelled"},
		apiError{codeInvalidTransition, "order 1 is delivered and cannot become cancelled: only a placed order changes, to delivered or to cancelled", http.StatusConflict}},
}

// TestEachRefusalIsWordedForTheClient holds what a client is told of each
// refusal of the store, whole: the code, the status and the message, which
// says what is so and what the client can do about it. A refusal reaches
// apiErrorOf wrapped, as a job's error does. Every type of the package
// that is a refusal (has the method isRefusal) must have a row: one that
// errors.go does not word would be a 500.
func TestEachRefusalIsWordedForTheClient(t *testing.T) {
	t.Parallel()
	inTable := map[string]bool{}
	for _, tt := range refusalWordings {
		inTable[reflect.TypeOf(tt.err).Elem().Name()] = true
	}
	if diff := cmp.Diff(refusalTypes(t), inTable); diff != "" {
		t.Errorf("the refusal types (-declared in the package +in refusalWordings):\n%s", diff)
	}
	for _, tt := range refusalWordings {
		t.Run(tt.rule, func(t *testing.T) {
			got := apiErrorOf(fmt.Errorf("job: %w", tt.err))
			if got == nil {
				t.Fatalf("apiErrorOf(%v) = nil, a failure of ours", tt.err)
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("apiErrorOf(%v) mismatch (-want +got):\n%s", tt.err, diff)
			}
		})
	}
}

// refusalTypes are the types on which the package's files (not its tests)
// declare the method isRefusal: the store's refusals.
func refusalTypes(t *testing.T) map[string]bool {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "isRefusal" {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok {
				types[id.Name] = true
			}
		}
	}
	return types
}
