package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// blockWriter makes the writer run a job that waits until the returned
// release is called, so that a test can queue jobs behind it and know they
// will form one batch. The blocking job itself writes nothing.
func blockWriter(t *testing.T, st *store) (release func()) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := write(context.Background(), st, func(*txn) (struct{}, error) {
			close(started)
			<-unblock
			return struct{}{}, nil
		})
		done <- err
	}()
	<-started
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(unblock)
			if err := <-done; err != nil {
				t.Errorf("blocking job: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// waitQueued waits until n jobs wait for the writer.
func waitQueued(t *testing.T, st *store, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d jobs wait for the writer", n), func() bool { return len(st.jobs) >= n })
}

// storedPets reads every pet straight from the database.
func storedPets(t *testing.T, st *store) []Pet {
	t.Helper()
	page, err := st.listPets(t.Context(), "", pageRequest{limit: maxLimit})
	if err != nil {
		t.Fatal(err)
	}
	return page.items
}

func TestGroupCommit(t *testing.T) {
	t.Parallel()
	t.Run("creates waiting together share one commit", func(t *testing.T) {
		ts := newTestServer(t)
		release := blockWriter(t, ts.Store)
		const n = 10
		results := make([]response, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				results[i] = ts.do(t, "POST", "/v1/pets", fmt.Sprintf(`{"name":"p%d","categoryId":1}`, i), nil)
			})
		}
		waitQueued(t, ts.Store, n)
		commitsBefore := petAppends(ts.Store)
		release()
		wg.Wait()
		for i, res := range results {
			if res.Status != http.StatusCreated {
				t.Fatalf("create %d: status %d, body %s", i, res.Status, res.Body)
			}
		}
		// The blocking job's commit, then one for all ten.
		if got := petAppends(ts.Store) - commitsBefore; got != 1 {
			t.Errorf("%d creates queued together took %d commits, want 1", n, got)
		}
		if got := len(storedPets(t, ts.Store)); got != n {
			t.Errorf("%d pets stored, want %d", got, n)
		}
	})

	t.Run("a failing job is undone alone and the others in its batch commit", func(t *testing.T) {
		ts := newTestServer(t)
		release := blockWriter(t, ts.Store)
		errBoom := errors.New("boom")
		var wg sync.WaitGroup
		var created [2]Pet
		var createErrs [2]error
		wg.Go(func() { created[0], createErrs[0] = ts.Store.createPet(t.Context(), newPet{"before", 1, "sold"}) })
		waitQueued(t, ts.Store, 1)
		var failed error
		wg.Go(func() {
			// Two steps, as an idempotency key recorded with its pet would
			// be: the first succeeds, then the job fails.
			_, failed = write(t.Context(), ts.Store, func(tx *txn) (Pet, error) {
				if _, err := tx.insertPet(newPet{"ghost", 1, "sold"}); err != nil {
					return Pet{}, err
				}
				return Pet{}, errBoom
			})
		})
		waitQueued(t, ts.Store, 2)
		wg.Go(func() { created[1], createErrs[1] = ts.Store.createPet(t.Context(), newPet{"after", 2, "pending"}) })
		waitQueued(t, ts.Store, 3)
		release()
		wg.Wait()
		if !errors.Is(failed, errBoom) {
			t.Errorf("failing job returned %v, want its own error", failed)
		}
		for i, err := range createErrs {
			if err != nil {
				t.Errorf("create %d in the same batch failed: %v", i, err)
			}
		}
		if diff := cmp.Diff(created[:], storedPets(t, ts.Store)); diff != "" {
			t.Errorf("stored pets mismatch, the failed job's insert must be undone (-want +got):\n%s", diff)
		}
	})

	t.Run("staged creates are in the table before the next job of their batch, and ids go on after them", func(t *testing.T) {
		ts := newTestServer(t)
		release := blockWriter(t, ts.Store)
		var wg sync.WaitGroup
		var first, second Pet
		var firstErr, secondErr, readErr error
		var seen Pet
		wg.Go(func() { first, firstErr = ts.Store.createPet(t.Context(), newPet{"first", 1, "sold"}) })
		waitQueued(t, ts.Store, 1)
		wg.Go(func() {
			// Not insert-only: it reads what the staged create wrote.
			seen, readErr = write(t.Context(), ts.Store, func(tx *txn) (Pet, error) {
				var p Pet
				err := scanPet(tx.queryRow(tx.st.petStmts.selectOneTx, 1), &p)
				return p, err
			})
		})
		waitQueued(t, ts.Store, 2)
		wg.Go(func() { second, secondErr = ts.Store.createPet(t.Context(), newPet{"second", 2, "pending"}) })
		waitQueued(t, ts.Store, 3)
		commitsBefore := petAppends(ts.Store)
		release()
		wg.Wait()
		if firstErr != nil || secondErr != nil || readErr != nil {
			t.Fatalf("first create: %v; read: %v; second create: %v", firstErr, readErr, secondErr)
		}
		if got := petAppends(ts.Store) - commitsBefore; got != 1 {
			t.Errorf("the three jobs took %d commits, want 1 (one batch)", got)
		}
		want := []Pet{{1, "first", 1, "sold"}, {2, "second", 2, "pending"}}
		if diff := cmp.Diff(want, []Pet{first, second}); diff != "" {
			t.Errorf("created pets mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want[0], seen); diff != "" {
			t.Errorf("the job after a staged create read (-want +got):\n%s", diff)
		}
		// An insert of its own statement (a job that is not insert-only)
		// takes the next id: the ids' sequence moved past the staged ones.
		third, err := write(t.Context(), ts.Store, func(tx *txn) (Pet, error) { return tx.insertPet(newPet{"third", 3, "available"}) })
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, Pet{3, "third", 3, "available"})
		if diff := cmp.Diff(want, storedPets(t, ts.Store)); diff != "" {
			t.Errorf("stored pets mismatch (-want +got):\n%s", diff)
		}
		if third.ID != 3 {
			t.Errorf("the insert after the staged ones got id %d, want 3", third.ID)
		}
	})

	t.Run("a database error fails only its own request", func(t *testing.T) {
		ts := newTestServer(t)
		release := blockWriter(t, ts.Store)
		var wg sync.WaitGroup
		var good Pet
		var goodErr, badErr error
		wg.Go(func() { good, goodErr = ts.Store.createPet(t.Context(), newPet{"ok", 1, "sold"}) })
		waitQueued(t, ts.Store, 1)
		// The schema's CHECK refuses category 0: the statement fails in the
		// database, inside the shared transaction.
		wg.Go(func() { _, badErr = ts.Store.createPet(t.Context(), newPet{"bad", 0, "sold"}) })
		waitQueued(t, ts.Store, 2)
		release()
		wg.Wait()
		if goodErr != nil || badErr == nil {
			t.Fatalf("good create: %v; bad create: %v; want nil and an error", goodErr, badErr)
		}
		if diff := cmp.Diff([]Pet{good}, storedPets(t, ts.Store)); diff != "" {
			t.Errorf("stored pets mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("a job failing alone in its batch writes nothing", func(t *testing.T) {
		ts := newTestServer(t)
		if _, err := ts.Store.createPet(t.Context(), newPet{"bad", 0, "sold"}); err == nil {
			t.Errorf("createPet with category 0 = nil error, want the CHECK failure")
		}
		if got := storedPets(t, ts.Store); len(got) != 0 {
			t.Errorf("pets stored: %v, want none", got)
		}
	})

	t.Run("a request that ends while queued writes nothing", func(t *testing.T) {
		ts := newTestServer(t)
		release := blockWriter(t, ts.Store)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := ts.Store.createPet(ctx, newPet{"gone", 1, "sold"})
			errc <- err
		}()
		waitQueued(t, ts.Store, 1)
		cancel()
		release()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("createPet = %v, want context.Canceled", err)
		}
		if got := storedPets(t, ts.Store); len(got) != 0 {
			t.Errorf("pets stored: %v, want none", got)
		}
	})

	t.Run("writes after Close fail with errStoreClosed", func(t *testing.T) {
		ts := newTestServer(t)
		ts.Store.Close()
		if _, err := ts.Store.createPet(t.Context(), newPet{"late", 1, "sold"}); !errors.Is(err, errStoreClosed) {
			t.Errorf("createPet after Close = %v, want errStoreClosed", err)
		}
	})
}

// TestCacheNeverServesStaleAnswers checks the rules of http_cache.go through the
// API: after a write's answer, every read sees it.
func TestCacheNeverServesStaleAnswers(t *testing.T) {
	t.Parallel()
	getList := func(t *testing.T, ts *testServer, path string) ([]Pet, string) {
		t.Helper()
		res := ts.do(t, "GET", path, "", nil)
		if res.Status != http.StatusOK {
			t.Fatalf("GET %s: status %d, body %s", path, res.Status, res.Body)
		}
		return decode[[]Pet](t, res), res.Header.Get("Link")
	}

	t.Run("a page with room shows a pet created after it was cached", func(t *testing.T) {
		ts := newTestServer(t)
		a := ts.createPet(t, "a", 1, "sold")
		for range 2 { // the second read is served from the cache
			if got, _ := getList(t, ts, "/v1/pets?status=sold"); !cmp.Equal([]Pet{a}, got) {
				t.Fatalf("list = %v, want [%v]", got, a)
			}
		}
		b := ts.createPet(t, "b", 1, "sold")
		if diff := cmp.Diff([]Pet{a, b}, petsOf(getList(t, ts, "/v1/pets?status=sold"))); diff != "" {
			t.Errorf("list after create mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("a full page keeps its Link and content across creates", func(t *testing.T) {
		ts := newTestServer(t)
		a := ts.createPet(t, "a", 1, "sold")
		b := ts.createPet(t, "b", 1, "sold")
		ts.createPet(t, "c", 1, "sold")
		got, link := getList(t, ts, "/v1/pets?limit=2")
		ts.createPet(t, "d", 1, "sold")
		got2, link2 := getList(t, ts, "/v1/pets?limit=2")
		want := []Pet{a, b}
		wantLink := fmt.Sprintf(`</v1/pets?limit=2&after=%d>; rel="next"`, b.ID)
		if diff := cmp.Diff([][]Pet{want, want}, [][]Pet{got, got2}); diff != "" {
			t.Errorf("pages mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{wantLink, wantLink}, []string{link, link2}); diff != "" {
			t.Errorf("Link mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("a pet that was not found is found once created", func(t *testing.T) {
		ts := newTestServer(t)
		if res := ts.do(t, "GET", "/v1/pets/1", "", nil); res.Status != http.StatusNotFound {
			t.Fatalf("GET /v1/pets/1 before any create: status %d", res.Status)
		}
		p := ts.createPet(t, "a", 1, "sold")
		res := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", p.ID), "", nil)
		if diff := cmp.Diff(p, decode[Pet](t, res)); diff != "" {
			t.Errorf("getPet after create mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("a write that changes pets drops every cached answer", func(t *testing.T) {
		ts := newTestServer(t)
		a := ts.createPet(t, "a", 1, "sold")
		ts.createPet(t, "b", 1, "sold")
		path := fmt.Sprintf("/v1/pets/%d", a.ID)
		ts.do(t, "GET", path, "", nil) // cached: a found pet survives appends
		getList(t, ts, "/v1/pets?limit=1")
		renamePet(t, ts.Store, a.ID, "renamed")
		want := Pet{ID: a.ID, Name: "renamed", CategoryID: 1, Status: "sold"}
		if diff := cmp.Diff(want, decode[Pet](t, ts.do(t, "GET", path, "", nil))); diff != "" {
			t.Errorf("getPet after change mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]Pet{want}, petsOf(getList(t, ts, "/v1/pets?limit=1"))); diff != "" {
			t.Errorf("listPets after change mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("a closed store serves nothing from its caches", func(t *testing.T) {
		ts := newTestServer(t)
		p := ts.createPet(t, "a", 1, "sold")
		paths := []string{"/v1/pets", fmt.Sprintf("/v1/pets/%d", p.ID)}
		for _, path := range paths {
			ts.do(t, "GET", path, "", nil) // now cached
		}
		ts.Store.Close()
		for _, path := range paths {
			wantError(t, ts.do(t, "GET", path, "", nil), http.StatusInternalServerError, codeInternal)
		}
	})

	t.Run("reads racing creates always see every acknowledged pet", func(t *testing.T) {
		ts := newTestServer(t)
		// Keep the caches filling while pets are created.
		const sold = "/v1/pets?status=sold&limit=100"
		stopReading := keepReading(t, []*testServer{ts}, sold, sold, sold, sold)
		var writers sync.WaitGroup
		for w := range 4 {
			writers.Go(func() {
				var mine []Pet
				for i := range 10 {
					p := ts.createPet(t, fmt.Sprintf("w%d-%d", w, i), 1, "sold")
					mine = append(mine, p)
					got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?status=sold&limit=100", "", nil))
					for _, m := range mine {
						if !slices.Contains(got, m) {
							t.Errorf("pet %v acknowledged but missing from the list read after it", m)
						}
					}
					if res := ts.do(t, "GET", fmt.Sprintf("/v1/pets/%d", p.ID), "", nil); res.Status != http.StatusOK {
						t.Errorf("getPet %d after its 201: status %d", p.ID, res.Status)
					}
				}
			})
		}
		writers.Wait()
		stopReading()
	})
}

// petsOf returns the pets of a getList result, dropping its Link.
func petsOf(pets []Pet, _ string) []Pet { return pets }

// petAppends is the pets' appends generation: how many commits added pets.
func petAppends(st *store) uint64 { return st.generations.resources[petsResource].appends.Load() }

// renamePet changes a pet's name through the store's write methods, as an
// operation that changes pets would.
func renamePet(t *testing.T, st *store, id int64, name string) {
	t.Helper()
	_, err := write(t.Context(), st, func(tx *txn) (outcome[Pet], error) {
		return tx.updatePet(id, petPatch{Name: &name})
	})
	if err != nil {
		t.Fatal(err)
	}
}
