-- 0011: an index of each event type's events, by id, that a type filter of
-- the change feed reads (see the SQLite migration of the same number, and
-- listEventsOfTypes in store_events.go).
CREATE INDEX events_pet_created ON events (id) WHERE type = 'pet.created';
CREATE INDEX events_pet_updated ON events (id) WHERE type = 'pet.updated';
CREATE INDEX events_pet_deleted ON events (id) WHERE type = 'pet.deleted';
CREATE INDEX events_order_placed ON events (id) WHERE type = 'order.placed';
CREATE INDEX events_order_delivered ON events (id) WHERE type = 'order.delivered';
CREATE INDEX events_order_cancelled ON events (id) WHERE type = 'order.cancelled';
