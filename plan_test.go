package main

import (
	"strings"
	"testing"
)

// TestListQueriesUseAnIndexRange guards the query plans the list's speed
// depends on: the store's list statements are a range of the table or of an
// index, never a scan of every pet, and the filtered one reads only its
// covering index. The counts of the metrics read only their shards, so that
// a scrape costs the same whatever the size of the catalogue. The events'
// type filter merges the ranges of its types' indexes, in id order, so that
// a rare type's page never reads the events of the others.
func TestListQueriesUseAnIndexRange(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, onSQLite())
	tests := []struct {
		rule  string
		query string
		args  []any
		want  string
	}{
		{"the unfiltered list is a range of the table by id", sqlListPets, []any{5, 21},
			"SEARCH pets USING INTEGER PRIMARY KEY (rowid>?)"},
		{"the filtered list is a range of the covering index", sqlListPetsByStatus, []any{"sold", 5, 21},
			"SEARCH pets USING COVERING INDEX pets_status_listing (status=? AND id>?)"},
		{"a pet by id is one row of the table", sqlSelectPet, []any{5},
			"SEARCH pets USING INTEGER PRIMARY KEY (rowid=?)"},
		{"the pets' counts read their 48 shards, never the pets", sqlCountPets, nil,
			"SCAN pet_counts"},
		{"the idempotency records' count reads its 16 shards, never the records", sqlCountIdempotencyRecords, nil,
			"SCAN idempotency_record_counts"},
		{"the events' type filter merges a range of each type's index by id, without sorting",
			sqliteDialect.listEventsOfTypes(), append(typeFilterArgs(sqliteDialect, 5, []string{eventPetDeleted}, 21, false), 21),
			"MERGE (UNION ALL); LEFT; MERGE (UNION ALL); LEFT; MERGE (UNION ALL); LEFT; " +
				"SEARCH events USING INDEX events_pet_created (id>?); RIGHT; " +
				"SEARCH events USING INDEX events_pet_updated (id>?); RIGHT; " +
				"SEARCH events USING INDEX events_pet_deleted (id>?); RIGHT; " +
				"MERGE (UNION ALL); LEFT; MERGE (UNION ALL); LEFT; " +
				"SEARCH events USING INDEX events_order_placed (id>?); RIGHT; " +
				"SEARCH events USING INDEX events_order_delivered (id>?); RIGHT; " +
				"SEARCH events USING INDEX events_order_cancelled (id>?)"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			rows, err := ts.Store.reader.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+tt.query, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(plan, "; "); got != tt.want {
				t.Errorf("query plan = %q, want %q", got, tt.want)
			}
		})
	}
}
