package main

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Events: every change the service commits is one event, derived from the
// change's record (store_changes.go) in the transaction of the change. The
// feed (events_feed.go) serves them in id order, which is commit order.

// The event types.
const (
	eventPetCreated     = "pet.created"
	eventPetUpdated     = "pet.updated"
	eventPetDeleted     = "pet.deleted"
	eventOrderPlaced    = "order.placed"
	eventOrderDelivered = "order.delivered"
	eventOrderCancelled = "order.cancelled"
)

// eventTypes are every event type, in the order the metrics list them.
var eventTypes = [...]string{eventPetCreated, eventPetUpdated, eventPetDeleted, eventOrderPlaced, eventOrderDelivered, eventOrderCancelled}

// eventTypeIndex is the index of typ in eventTypes, -1 when it is none.
func eventTypeIndex(typ string) int { return slices.Index(eventTypes[:], typ) }

// Event is one committed change, as the feed and webhooks send it.
type Event struct {
	ID         int64
	Type       string
	OccurredAt time.Time
	Subject    string // the path of the resource that changed
	Data       []byte // the resource as GET returned it right after the change (before it, for a delete), as JSON
}

// eventOf is the event of the change ch, made at the instant at (its id is
// the database's to give).
func eventOf(ch change, at time.Time) Event {
	ev := Event{OccurredAt: at.UTC().Truncate(time.Millisecond), Subject: ch.resource.pathOf(ch.id)}
	switch row := ch.row.(type) {
	case Pet:
		ev.Type = "pet." + ch.kind.String()
		ev.Data = appendPet(make([]byte, 0, 96), row)
	case Order:
		// An order is never deleted; its events name what became of it.
		ev.Type = "order." + row.Status
		ev.Data = appendOrder(make([]byte, 0, 128), row)
	}
	return ev
}

// appendEvent appends ev as a JSON object.
func appendEvent(dst []byte, ev Event) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, ev.ID, 10)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, ev.Type)
	dst = append(dst, `,"occurredAt":"`...)
	dst = ev.OccurredAt.UTC().AppendFormat(dst, timeLayout)
	dst = append(dst, `","subject":`...)
	dst = appendJSONString(dst, ev.Subject)
	dst = append(dst, `,"data":`...)
	dst = append(dst, ev.Data...)
	return append(dst, '}')
}

// eventsBody is the response body of a list of events.
func eventsBody(events []Event) []byte {
	dst := append(make([]byte, 0, 256*len(events)+3), '[')
	for i, ev := range events {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendEvent(dst, ev)
	}
	return append(dst, ']', '\n')
}

// eventPatterns are the type patterns a filter may name besides the types
// themselves: a resource's every type.
var eventPatterns = [...]string{"pet.*", "order.*"}

// expandEventTypes turns a list of type patterns into the types it names,
// in eventTypes' order, without repeats. ok is false, with the first
// pattern it does not know, when one is neither a type nor a pattern
// (allowStar also allows "*", every type).
func expandEventTypes(patterns []string, allowStar bool) (types []string, unknown string, ok bool) {
	want := [len(eventTypes)]bool{}
	for _, p := range patterns {
		switch {
		case p == "*" && allowStar:
			for i := range want {
				want[i] = true
			}
		case slices.Contains(eventPatterns[:], p):
			prefix := strings.TrimSuffix(p, "*")
			for i, t := range eventTypes {
				if strings.HasPrefix(t, prefix) {
					want[i] = true
				}
			}
		case eventTypeIndex(p) >= 0:
			want[eventTypeIndex(p)] = true
		default:
			return nil, p, false
		}
	}
	for i, t := range eventTypes {
		if want[i] {
			types = append(types, t)
		}
	}
	return types, "", true
}

// resourceOfEventType is the resource whose changes events of typ describe.
func resourceOfEventType(typ string) resource {
	if strings.HasPrefix(typ, "order.") {
		return ordersResource
	}
	return petsResource
}
