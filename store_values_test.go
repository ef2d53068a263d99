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
