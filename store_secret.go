package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sqlSelectSecret reads the secret of key identities that migration 8 made
// in a PostgreSQL database.
const sqlSelectSecret = `SELECT secret FROM key_identity_secret WHERE id = 1`

// storedSecret returns the secret of key identities kept in the database:
// on PostgreSQL, the one migration 8 made for every replica to share. A
// SQLite database keeps none (its secret is the file beside it), and says
// so.
func (s *store) storedSecret(ctx context.Context) ([]byte, error) {
	var secret string
	err := s.reader.QueryRowContext(ctx, sqlSelectSecret).Scan(&secret)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, errors.New("the database holds no secret of key identities (table key_identity_secret is empty)")
	case err != nil:
		return nil, fmt.Errorf("read the secret of key identities: %w", err)
	case len(secret) < minSecretLen:
		// The table's CHECK refuses it; this guards a table edited by hand
		// without it.
		return nil, fmt.Errorf("the secret in table key_identity_secret has %d characters; at least %d are needed", len(secret), minSecretLen)
	}
	return []byte(secret), nil
}

// minSecretLen is the shortest secret accepted, in bytes: 256 bits when it is
// random, as the generated one is.
const minSecretLen = 32
