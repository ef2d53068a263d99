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

// eventTypes are every event type, each resource's (resourceSpecs) in turn:
// the order in which the metrics and messages list them.
var eventTypes = func() []string {
	var types []string
	for _, spec := range resourceSpecs {
		types = append(types, spec.events...)
	}
	return types
}()

// eventPatterns are the type patterns a filter may name besides the types
// themselves: a resource's every type, "pet.*".
var eventPatterns = func() []string {
	var patterns []string
	for _, spec := range resourceSpecs {
		patterns = append(patterns, spec.name+".*")
	}
	return patterns
}()

// eventReadScopes says which scope reads which events, as messages do:
// "pet.* needs the scope pets:read, order.* orders:read".
func eventReadScopes() string {
	var b strings.Builder
	for r, spec := range resourceSpecs {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteString(spec.name + ".* ")
		if r == 0 {
			b.WriteString("needs the scope ")
		}
		b.WriteString(string(spec.readScope))
	}
	return b.String()
}

// eventTypeIndex is the index of typ in eventTypes, -1 when it is none.
func eventTypeIndex(typ string) int { return slices.Index(eventTypes, typ) }

// eventRow is a resource's row as its events carry it: the type of the
// event a change of each kind makes, and the row as GET returns it.
type eventRow interface {
	eventType(kind changeKind) string
	appendJSON(dst []byte) []byte
}

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
	row := ch.row.(eventRow) // every resource's row is one: a row that is not fails the first test that writes it
	return Event{
		Type:       row.eventType(ch.kind),
		OccurredAt: at.UTC().Truncate(time.Millisecond),
		Subject:    ch.resource.pathOf(ch.id),
		Data:       row.appendJSON(make([]byte, 0, 128)),
	}
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

// expandEventTypes turns a list of type patterns into the types it names,
// in eventTypes' order, without repeats. ok is false, with the first
// pattern it does not know, when one is neither a type nor a pattern
// (allowStar also allows "*", every type).
func expandEventTypes(patterns []string, allowStar bool) (types []string, unknown string, ok bool) {
	want := make([]bool, len(eventTypes))
	for _, p := range patterns {
		switch {
		case p == "*" && allowStar:
			for i := range want {
				want[i] = true
			}
		case slices.Contains(eventPatterns, p):
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
