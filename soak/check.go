package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
)

// change is one acknowledged change of a resource: the event it must have
// (its type and data) and the state it leaves (nil: the resource is gone).
type change struct {
	subject string
	typ     string
	data    []byte
	state   []byte
}

// resource is what the soak knows of one pet or order: its acknowledged
// changes in order, and the states it may be stored in (the last
// acknowledged one, and those that writes left without an answer would
// have made).
type resource struct {
	subject  string
	changes  []change
	allowed  [][]byte // nil: absent
	allowAny bool     // an unexpected refusal left the model knowing nothing
}

// allow adds state to the states the resource may be stored in.
func (r *resource) allow(state []byte) { r.allowed = append(r.allowed, state) }

// resource is the resource subject, made on first use; s.mu is held.
func (s *soak) resource(subject string) *resource {
	r, ok := s.res[subject]
	if !ok {
		r = &resource{subject: subject, allowed: [][]byte{nil}}
		s.res[subject] = r
	}
	return r
}

// findings are what the checks found, each failure counted once.
type findings struct {
	checks, resources, events                  int
	lost, missingEvents, replayDiffs, disorder int
	seen                                       map[string]bool
	feed                                       []event // as read at the last check, its data canonical
	examples                                   []string
}

// failures is the number of failures found so far.
func (f *findings) failures() int { return f.lost + f.missingEvents + f.replayDiffs + f.disorder }

// fail records the failure key once in the count n, with msg as an example
// for the first few.
func (f *findings) fail(n *int, key, msg string) {
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	if f.seen[key] {
		return
	}
	f.seen[key] = true
	*n++
	if len(f.examples) < 20 {
		f.examples = append(f.examples, msg)
	}
}

// event is one event of the feed.
type event struct {
	ID      int64           `json:"id"`
	Type    string          `json:"type"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// check runs the checks with no load running: every acknowledged change is
// stored, every acknowledged change has its event, and replaying the feed
// gives exactly what the API lists (on every replica, which must all serve
// the same feed).
func (s *soak) check(ctx context.Context, f *findings, final bool) error {
	f.checks++
	stored, feed, err := s.readReplicas(ctx, f, final)
	if err != nil {
		return err
	}
	f.feed = feed
	f.events = len(feed)
	checkOrder(f, feed)
	checkReplay(f, feed, stored)
	s.checkAcknowledged(f, stored, eventsBySubject(feed))
	return nil
}

// readReplicas reads what every replica lists and its feed, and checks
// that they all serve the same as replica 0, whose list and feed it
// returns. The feed is read whole at the first check, every tenth and the
// last (final), and in between only past the newest event already read:
// the events read before must still be there, unchanged, at the whole
// reads.
func (s *soak) readReplicas(ctx context.Context, f *findings, final bool) (stored map[string][]byte, feed []event, err error) {
	whole := final || f.checks%10 == 1
	after := int64(0)
	if !whole && len(f.feed) > 0 {
		after = f.feed[len(f.feed)-1].ID
	}
	for i := range s.reps {
		st, fd, err := s.readReplica(ctx, f, i, whole, after)
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			stored, feed = st, fd
			continue
		}
		start := len(f.feed) // the events compared already, when not whole
		if whole {
			start = 0
		}
		if len(fd) != len(feed) || len(fd) < start || string(mustJSON(fd[start:])) != string(mustJSON(feed[start:])) {
			f.fail(&f.replayDiffs, fmt.Sprintf("feeds differ %d", f.checks), fmt.Sprintf("check %d: replica %d serves another feed (%d events) than replica 0 (%d)", f.checks, i, len(fd), len(feed)))
		}
		if a, b := string(mustJSON(st)), string(mustJSON(stored)); a != b {
			f.fail(&f.replayDiffs, fmt.Sprintf("lists differ %d", f.checks), fmt.Sprintf("check %d: replica %d lists other pets or orders than replica 0", f.checks, i))
		}
	}
	return stored, feed, nil
}

// readReplica reads what replica i lists and its feed past after. Read
// whole, the feed must begin with the events read before; read past them,
// they are put before what was read.
func (s *soak) readReplica(ctx context.Context, f *findings, i int, whole bool, after int64) (map[string][]byte, []event, error) {
	base, _, up := s.reps[i].target()
	if !up {
		return nil, nil, fmt.Errorf("replica %d is down at a check", i)
	}
	st, err := s.listAll(ctx, base)
	if err != nil {
		return nil, nil, fmt.Errorf("replica %d: %w", i, err)
	}
	fd, err := s.readFeed(ctx, base, after)
	if err != nil {
		return nil, nil, fmt.Errorf("replica %d: %w", i, err)
	}
	if !whole {
		return st, append(f.feed[:len(f.feed):len(f.feed)], fd...), nil
	}
	if len(fd) < len(f.feed) || string(mustJSON(fd[:len(f.feed)])) != string(mustJSON(f.feed)) {
		f.fail(&f.replayDiffs, fmt.Sprintf("feed changed %d %d", f.checks, i), fmt.Sprintf("check %d: replica %d no longer serves the events read before (%d then, %d now)", f.checks, i, len(f.feed), len(fd)))
	}
	return st, fd, nil
}

// checkOrder checks that the feed's ids only grow.
func checkOrder(f *findings, feed []event) {
	for i := 1; i < len(feed); i++ {
		if feed[i].ID <= feed[i-1].ID {
			f.fail(&f.disorder, fmt.Sprintf("order %d %d", feed[i-1].ID, feed[i].ID), fmt.Sprintf("event %d follows event %d", feed[i].ID, feed[i-1].ID))
		}
	}
}

// checkReplay checks that replaying the feed gives exactly what the API
// lists, stored.
func checkReplay(f *findings, feed []event, stored map[string][]byte) {
	replay := map[string][]byte{}
	for _, e := range feed {
		if e.Type == "pet.deleted" {
			delete(replay, e.Subject)
		} else {
			replay[e.Subject] = e.Data
		}
	}
	for _, subject := range union(replay, stored) {
		r, st := replay[subject], stored[subject]
		if !bytes.Equal(r, st) {
			f.fail(&f.replayDiffs, "replay "+subject+string(r)+string(st), fmt.Sprintf("%s: the feed's replay gives %s, the API lists %s", subject, orAbsent(r), orAbsent(st)))
		}
	}
}

// eventsBySubject is the feed's events of each subject, in the feed's
// order.
func eventsBySubject(feed []event) map[string][]event {
	bySubject := map[string][]event{}
	for _, e := range feed {
		bySubject[e.Subject] = append(bySubject[e.Subject], e)
	}
	return bySubject
}

// checkAcknowledged checks every resource the soak changed against what
// the API lists, stored, and the feed's events of each subject.
func (s *soak) checkAcknowledged(f *findings, stored map[string][]byte, bySubject map[string][]event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.resources = len(s.res)
	for subject, r := range s.res {
		checkStored(f, r, stored[subject])
		checkEvents(f, r, bySubject[subject])
	}
}

// checkStored checks that r's acknowledged state is stored as got (or a
// later one, which a write left without an answer may have made). From
// then on, r must stay as it is: nothing changes it any more.
func checkStored(f *findings, r *resource, got []byte) {
	ok := r.allowAny
	for _, want := range r.allowed {
		ok = ok || bytes.Equal(project(want), project(got))
	}
	if !ok {
		f.fail(&f.lost, "lost "+r.subject+string(got), fmt.Sprintf("%s: stored %s, acknowledged %s", r.subject, orAbsent(got), orAbsent(r.allowed[0])))
	}
	if len(r.allowed) > 1 || r.allowAny || !ok {
		r.allowed, r.allowAny = [][]byte{got}, false
	}
}

// checkEvents checks that every acknowledged change of r has its event, in
// the order of the changes: they are a subsequence of events, the
// subject's events.
func checkEvents(f *findings, r *resource, events []event) {
	next := 0
	for i, ch := range r.changes {
		want := canon(ch.data)
		for next < len(events) && (events[next].Type != ch.typ || !bytes.Equal(events[next].Data, want)) {
			next++
		}
		if next == len(events) {
			f.fail(&f.missingEvents, fmt.Sprintf("event %s %d", r.subject, i), fmt.Sprintf("%s: no %s event with data %s (after the events of its earlier changes)", r.subject, ch.typ, bytes.TrimSpace(ch.data)))
			break
		}
		next++
	}
}

// listAll is every pet and order the service at base lists, by subject, as
// canonical JSON.
func (s *soak) listAll(ctx context.Context, base string) (map[string][]byte, error) {
	all := map[string][]byte{}
	for _, list := range []struct{ path, prefix string }{{"/v1/pets", "/v1/pets/"}, {"/v1/store/orders", "/v1/store/orders/"}} {
		after := int64(0)
		for {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			a := s.send(base, "GET", fmt.Sprintf("%s?limit=100&after=%d", list.path, after), "", "", "")
			var page []json.RawMessage
			if !a.ok(http.StatusOK) || json.Unmarshal(a.body, &page) != nil {
				return nil, fmt.Errorf("list %s after %d: status %d, %v", list.path, after, a.status, a.err)
			}
			for _, raw := range page {
				var item struct{ ID int64 }
				if err := json.Unmarshal(raw, &item); err != nil {
					return nil, err
				}
				all[fmt.Sprintf("%s%d", list.prefix, item.ID)] = canon(raw)
				after = item.ID
			}
			if len(page) < 100 {
				break
			}
		}
	}
	return all, nil
}

// nextLink is the target of a Link header's rel="next".
var nextLink = regexp.MustCompile(`<([^>]*)>;\s*rel="next"`)

// readFeed reads the feed of the service at base: from after,
// following each page's next link until a page is empty.
func (s *soak) readFeed(ctx context.Context, base string, after int64) ([]event, error) {
	var feed []event
	path := fmt.Sprintf("/v1/events?after=%d&limit=1000", after)
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		a := s.send(base, "GET", path, "", "", "")
		var page []event
		if !a.ok(http.StatusOK) || json.Unmarshal(a.body, &page) != nil {
			return nil, fmt.Errorf("feed %s: status %d, %v: %s", path, a.status, a.err, a.body)
		}
		if len(page) == 0 {
			return feed, nil
		}
		for i := range page {
			page[i].Data = canon(page[i].Data)
		}
		feed = append(feed, page...)
		m := nextLink.FindStringSubmatch(a.header.Get("Link"))
		if m == nil {
			return nil, fmt.Errorf("feed %s: no next link in %q", path, a.header.Get("Link"))
		}
		u, err := url.Parse(m[1])
		if err != nil {
			return nil, fmt.Errorf("feed %s: next link %q: %w", path, m[1], err)
		}
		path = u.RequestURI()
	}
}

// duplicates counts names stored more than once: a retried key that made a
// second pet.
func (s *soak) duplicates(ctx context.Context) (int, error) {
	base, _, _ := s.reps[0].target()
	all, err := s.listAll(ctx, base)
	if err != nil {
		return 0, err
	}
	seen := map[string]int{}
	dups := 0
	for _, raw := range all {
		var p pet
		if json.Unmarshal(raw, &p) != nil || p.Name == "" {
			continue // an order
		}
		if seen[p.Name]++; seen[p.Name] == 2 {
			dups++
		}
	}
	return dups, nil
}

// canon is the JSON raw with its object keys sorted and no spaces, nil
// for nil, so that equal values have equal bytes.
func canon(raw []byte) []byte {
	if raw == nil {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return raw
	}
	return mustJSON(v)
}

// project is what of a stored state the soak can know: a pet whole, an
// order without its times (a write left without an answer may have
// stamped it).
func project(raw []byte) []byte {
	if raw == nil {
		return nil
	}
	var v map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return raw
	}
	delete(v, "placedAt")
	delete(v, "updatedAt")
	return mustJSON(v)
}

// union is the keys of a and b, sorted.
func union(a, b map[string][]byte) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// orAbsent is raw, or "absent" for nil.
func orAbsent(raw []byte) string {
	if raw == nil {
		return "absent"
	}
	return string(raw)
}
