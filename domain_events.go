package main

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// The domain of events: every event type, the Event, and the typed change
// record an event is made from (store_changes.go records them).

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
	row := ch.row
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

// changeKind is what a write did to a row.
type changeKind int

const (
	rowCreated changeKind = iota + 1
	rowUpdated
	rowDeleted
)

// String names the kind as events do: "created", "updated", "deleted".
func (k changeKind) String() string {
	switch k {
	case rowCreated:
		return "created"
	case rowUpdated:
		return "updated"
	case rowDeleted:
		return "deleted"
	}
	return "kind" + strconv.Itoa(int(k))
}

// change is the record of one row that a write changed.
type change struct {
	resource resource
	kind     changeKind
	id       int64
	row      eventRow // a Pet or an Order: after the change, or before a delete
}
