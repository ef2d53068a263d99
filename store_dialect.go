package main

import (
	"strconv"
	"strings"
)

// dialect is what the store's SQL differs in between the two databases it
// can keep its data in. The statements are written once, with ? for their
// parameters, in the SQL that SQLite and PostgreSQL share; a dialect
// supplies the few pieces that differ.
type dialect struct {
	name       string // "sqlite" or "postgres", for logs
	migrations string // the directory of its migrations, in migrationFiles
	// numbered says parameters are $1, $2... (PostgreSQL) rather than ?.
	numbered bool
	// idsOfJSONArray is a subquery of the ids in a parameter holding a JSON
	// array of integers.
	idsOfJSONArray string
}

var (
	sqliteDialect = dialect{
		name:           "sqlite",
		migrations:     "migrations/sqlite",
		idsOfJSONArray: "SELECT value FROM json_each(?)",
	}
	postgresDialect = dialect{
		name:           "postgres",
		migrations:     "migrations/postgres",
		numbered:       true,
		idsOfJSONArray: "SELECT value::bigint FROM jsonb_array_elements_text(?::jsonb)",
	}
)

// sql returns query in the dialect: each ? becomes $1, $2... on PostgreSQL.
// The store's statements hold no ? inside a string literal or a comment,
// so every ? is a parameter.
func (d dialect) sql(query string) string {
	if !d.numbered || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	n := 0
	for _, part := range strings.SplitAfter(query, "?") {
		if p, ok := strings.CutSuffix(part, "?"); ok {
			n++
			b.WriteString(p)
			b.WriteString("$")
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteString(part)
	}
	return b.String()
}
