-- 0003: the store area. An order sells one pet: placing it takes the pet
-- from available to pending, delivering it makes the pet sold, cancelling it
-- makes the pet available again, each in the transaction that changes the
-- order (store_orders.go).
CREATE TABLE orders (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- No ON DELETE: a pet that an order names cannot be deleted, so the sales
    -- history stays whole (the API answers 409 before the database would).
    pet_id     INTEGER NOT NULL REFERENCES pets (id),
    status     TEXT    NOT NULL CHECK (status IN ('placed', 'delivered', 'cancelled')),
    -- Unix milliseconds, UTC.
    placed_at  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (updated_at >= placed_at)
) STRICT;

-- A pet is never sold twice: at most one placed order per pet, held by the
-- database itself whatever the code above it does.
CREATE UNIQUE INDEX orders_one_placed_per_pet ON orders (pet_id) WHERE status = 'placed';

-- The orders of a pet: whether a pet may be deleted, and the foreign key
-- check when one is, without scanning every order.
CREATE INDEX orders_pet ON orders (pet_id);

-- orders_status_listing serves the filtered keyset list
-- (WHERE status = ? AND id > ? ORDER BY id LIMIT ?) from the index alone,
-- as pets_status_listing does for pets.
CREATE INDEX orders_status_listing ON orders (status, id, pet_id, placed_at, updated_at);
