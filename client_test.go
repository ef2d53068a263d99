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

	"github.com/google/go-cmp/cmp"

	"petstore/client"
)

// TestGeneratedClient drives the service with the Go client generated from
// the document (./client): that it compiles at all is half the proof, and
// create -> get -> list completing against a live server is the other half.
func TestGeneratedClient(t *testing.T) {
	ts := newTestServer(t)
	ctx := t.Context()
	withKey := client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+testKey)
		return nil
	})
	c, err := client.NewClientWithResponses(ts.URL+"/v1", withKey)
	if err != nil {
		t.Fatalf("NewClientWithResponses: %v", err)
	}

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

// TestGeneratedClientIsUpToDate regenerates the client from the document the
// service serves, exactly as README.md shows, and fails when the committed
// client differs: run `go generate` after changing openapi.json.
func TestGeneratedClientIsUpToDate(t *testing.T) {
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
