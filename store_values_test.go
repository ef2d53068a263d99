package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestManyRowsInOneBatchKeepTheirOrder writes 600 events in one batch: on
// SQLite that is five statements of VALUES (256, 256, 64, 16 and 8 rows),
// on PostgreSQL one of JSON. Each must be stored as given, with ids growing
// in the order given, which is the order the feed serves.
func TestManyRowsInOneBatchKeepTheirOrder(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t)
	events := make([]Event, 600)
	for i := range events {
		events[i] = Event{
			Type:       eventTypes[i%len(eventTypes)],
			OccurredAt: time.UnixMilli(1_764_000_000_000 + int64(i)).UTC(),
			Subject:    fmt.Sprintf("/v1/pets/%d", i+1),
			Data:       fmt.Appendf(nil, `{"id":%d,"name":"quote \" and é %d"}`, i+1, i),
		}
	}
	written, err := write(t.Context(), ts.Store, func(tx *txn) ([]eventWritten, error) {
		return tx.insertEvents(events)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]Event, len(events))
	for i, ev := range events {
		ev.ID = written[i].id
		want[i] = ev
	}
	got, err := ts.Store.listEvents(t.Context(), 0, len(events)+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the events read back differ from those written (-want +got):\n%s", diff)
	}
}

// TestStatementsOfManyRowsArePreparedOnceNeeded opens a store with only the
// one-row statement of the events' VALUES, writes 37 events in one batch
// (run as one-row statements, and asking for 32 and 4), and 37 more once the
// writer has prepared those: both batches stored as given.
func TestStatementsOfManyRowsArePreparedOnceNeeded(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, onSQLite())
	v := &ts.Store.eventStmts.insertRows
	sizes := func() []int {
		var out []int
		for k, stmt := range v.stmts {
			if stmt != nil {
				out = append(out, 1<<k)
			}
		}
		return out
	}
	if diff := cmp.Diff([]int{1}, sizes()); diff != "" {
		t.Errorf("statements of the events' VALUES prepared with the store (-want +got):\n%s", diff)
	}
	var want []Event
	for batch, wantSizes := range [][]int{{1, 4, 32}, {1, 4, 32}} {
		events := make([]Event, 37)
		for i := range events {
			events[i] = Event{Type: "pet.created", OccurredAt: time.UnixMilli(1_764_000_000_000 + int64(i)).UTC(),
				Subject: fmt.Sprintf("/v1/pets/%d", batch*100+i), Data: fmt.Appendf(nil, `{"batch":%d,"row":%d}`, batch, i)}
		}
		written, err := write(t.Context(), ts.Store, func(tx *txn) ([]eventWritten, error) { return tx.insertEvents(events) })
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range events {
			ev.ID = written[i].id
			want = append(want, ev)
		}
		// The writer prepares between batches: once the next one is
		// answered, this one's wanted statements are there.
		if _, err := write(t.Context(), ts.Store, func(*txn) (struct{}, error) { return struct{}{}, nil }); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantSizes, sizes()); diff != "" {
			t.Errorf("after batch %d, statements of the events' VALUES prepared (-want +got):\n%s", batch+1, diff)
		}
	}
	got, err := ts.Store.listEvents(t.Context(), 0, len(want)+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the events read back differ from those written (-want +got):\n%s", diff)
	}
}
