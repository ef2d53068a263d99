package main

// The domain of webhook subscriptions: their statuses (the subscriptions
// themselves are the store's, webhooks.go and store_webhooks.go).

// The subscription statuses: active ones are delivered; paused ones wait
// for a PATCH; failing ones stopped by themselves (see statusReason).
const (
	webhookActive  = "active"
	webhookPaused  = "paused"
	webhookFailing = "failing"
)

// webhookStatuses are the values of WebhookStatus; a client may set the
// first two.
var webhookStatuses = []string{webhookActive, webhookPaused, webhookFailing}
