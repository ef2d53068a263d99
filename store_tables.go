package main

// serviceTables are the tables of the schema that are no resource's: the
// service's own bookkeeping. A resource's tables are in its declaration
// (resourceSpecs). Adding a table of the service is one line here.
var serviceTables = []tableSpec{
	{name: "idempotency_keys", columns: []string{"api_key_hmac", "idempotency_key", "operation", "fingerprint", "resource_id", "body", "created_at"}, noun: "idempotency records"},
	{name: "idempotency_record_counts", notCopied: "kept by triggers: the destination's count the records as the copy inserts them"},
	{name: "event_types", notCopied: "the destination's own: its migrations fill it with the types this binary knows, as they filled the source's (the copy opens both, and so migrates both)"},
	{name: "events", columns: []string{"id", "type", "occurred_at", "subject", "data"}, hasID: true, noun: "events"},
	{name: "event_marks", columns: []string{"one", "pruned_through"}, singleton: true, noun: "prune marks"},
	{name: "event_tickets", notCopied: "single-use stream tickets that live 60 s: a client asks the destination for a new one"},
	{name: "key_identity_secret", notCopied: "the destination's own: on PostgreSQL its replicas key identities with it, and SQLite keeps its secret in a file (copying an empty SQLite table would wipe PostgreSQL's)"},
	{name: "webhooks", noun: "webhook subscriptions", notCopied: "a subscription's signing secret and delivery state (its lease, its retries) belong to the service that runs it, and a copy would deliver beside the source while the source serves: create them again on the destination once it serves (docs/webhooks.md)"},
	{name: "webhook_deliveries", notCopied: "the delivery log of the subscriptions, which are not copied"},
	{name: "acme_storage", columns: []string{"key", "value", "modified"}, noun: "ACME entries"},
	{name: "acme_locks", notCopied: "the locks of orders in progress, which belong to the processes that hold them"},
	{name: "schema_migrations", notCopied: "the destination's own: opening it applies the migrations this binary has"},
}

// allTables are the tables of the schema, those the copy moves first, in an
// order that keeps every reference valid: the resources' in the order they
// are declared (pets before the orders that name them), then the
// service's.
func allTables() []tableSpec {
	var all []tableSpec
	for _, spec := range resourceSpecs {
		all = append(all, spec.tables...)
	}
	return append(all, serviceTables...)
}

// copiedTables are the tables the copy moves, in the order of allTables.
func copiedTables() []tableSpec {
	var copied []tableSpec
	for _, t := range allTables() {
		if t.notCopied == "" {
			copied = append(copied, t)
		}
	}
	return copied
}
