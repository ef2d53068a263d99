package main

// Events: every change the service commits is one event, derived from the
// change's record (store_changes.go) in the transaction of the change. The
// feed (events_feed.go) serves them in id order, which is commit order.

// eventsBody is the response body of a list of events.
func eventsBody(events []Event) []byte { return listBody(events, 256, appendEvent) }
