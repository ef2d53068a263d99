package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The writes a client makes.
const (
	opCreate = iota
	opPatch
	opDelete
	opPlace
	opDeliver
	opCancel
	opCount
)

// pet is the API's Pet.
type pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// order is the API's Order, with its body as the service sent it.
type order struct {
	ID     int64  `json:"id"`
	PetID  int64  `json:"petId"`
	Status string `json:"status"`
	body   []byte
}

// ownedPet is a pet one client created and alone changes, as the client
// was last told it is.
type ownedPet struct {
	pet
	hadOrder bool   // an order was ever placed: the pet can no longer be deleted
	open     *order // its placed order, if any
}

// client is one client's state, kept across restarts: the pets it owns
// (and their open orders), whose state it knows exactly because every
// change to them was acknowledged to it. A write that got no answer makes
// the state of what it touched uncertain: the client gives those resources
// up (the checks keep checking them).
type client struct {
	id, seq int
	pets    []*ownedPet
}

// keyedCreate is a create sent with an Idempotency-Key.
type keyedCreate struct {
	name, body, key string
	answered        bool
}

// soak is the state of one soak run: the replicas, what was sent, and what
// was acknowledged.
type soak struct {
	apiKey  string
	http    *http.Client
	reps    []*replica
	clients []*client

	requests atomic.Int64
	fivexx   atomic.Int64
	netErrs  atomic.Int64 // failures of requests to a replica that stayed up
	refused  atomic.Int64 // 4xx answers to writes the soak's model says are valid

	mu         sync.Mutex
	res        map[string]*resource // by subject (/v1/pets/7, /v1/store/orders/3)
	keyed      []keyedCreate
	keyedCount int
	retried    int // keyed creates retried after a stop cut them off
	unanswered int
	acks       [opCount]int
}

// newSoak is a soak with n clients using apiKey, each request bounded by
// timeout.
func newSoak(apiKey string, n int, timeout time.Duration) *soak {
	s := &soak{
		apiKey: apiKey,
		http:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: timeout},
		res:    map[string]*resource{},
	}
	for i := range n {
		s.clients = append(s.clients, &client{id: i})
	}
	return s
}

// answer is what one request got: an HTTP answer, or none.
type answer struct {
	status int
	body   []byte
	header http.Header
	err    error // no answer (connection refused or cut, timeout)
}

// ok reports whether the request was answered with want.
func (a answer) ok(want int) bool { return a.err == nil && a.status == want }

// lost reports whether the request may or may not have been carried out:
// it got no answer, or a 5xx.
func (a answer) lost() bool { return a.err != nil || a.status >= 500 }

// do sends one request to the replica the client prefers (c % replicas),
// or to another one that is up when it is down, waiting for one to be up.
// A failure while the replica stayed up is counted. When none comes up
// within the request timeout (a restart failed), it gives up.
func (s *soak) do(c int, method, path, contentType, body, idemKey string) answer {
	for deadline := time.Now().Add(s.http.Timeout); time.Now().Before(deadline); {
		for i := range s.reps {
			r := s.reps[(c+i)%len(s.reps)]
			url, epoch, up := r.target()
			if !up {
				continue
			}
			a := s.send(url, method, path, contentType, body, idemKey)
			if a.err != nil {
				if _, now, up := r.target(); up && now == epoch {
					s.netErrs.Add(1)
				}
			}
			return a
		}
		time.Sleep(10 * time.Millisecond) // every replica is down: one is being restarted
	}
	return answer{err: errors.New("no replica up")}
}

// send sends one request to the service at url and counts it.
func (s *soak) send(url, method, path, contentType, body, idemKey string) answer {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	s.requests.Add(1)
	res, err := s.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode >= 500 {
		s.fivexx.Add(1)
	}
	return answer{status: res.StatusCode, body: b, header: res.Header, err: err}
}

// runClient is one client until stop is closed: three requests in four are
// reads, the others writes of every kind on the client's own pets.
func (s *soak) runClient(c *client, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if mrand.IntN(4) != 0 {
			s.read(c)
			continue
		}
		c.seq++
		var available, deletable, open []*ownedPet
		for _, p := range c.pets {
			switch {
			case p.open != nil:
				open = append(open, p)
			case p.Status == "available":
				available = append(available, p)
			}
			if !p.hadOrder {
				deletable = append(deletable, p)
			}
		}
		switch n := mrand.IntN(10); {
		case n < 2 && len(c.pets) > 0:
			s.patchPet(c, c.pets[mrand.IntN(len(c.pets))])
		case n < 3 && len(deletable) > 0 && len(c.pets) > 5:
			s.deletePet(c, deletable[mrand.IntN(len(deletable))])
		case n < 5 && len(available) > 0:
			s.placeOrder(c, available[mrand.IntN(len(available))])
		case n < 7 && len(open) > 0:
			to := "delivered"
			if mrand.IntN(2) == 0 {
				to = "cancelled"
			}
			s.updateOrder(c, open[mrand.IntN(len(open))], to)
		default:
			s.createPet(c)
		}
	}
}

// read is one read: a page of pets, of orders, or of the feed.
func (s *soak) read(c *client) {
	switch mrand.IntN(3) {
	case 0:
		s.do(c.id, "GET", fmt.Sprintf("/v1/pets?limit=20&after=%d", mrand.IntN(1000)), "", "", "")
	case 1:
		s.do(c.id, "GET", fmt.Sprintf("/v1/store/orders?limit=20&after=%d", mrand.IntN(300)), "", "", "")
	default:
		s.do(c.id, "GET", fmt.Sprintf("/v1/events?limit=20&after=%d", mrand.IntN(3000)), "", "", "")
	}
}

// createPet creates a pet, half the time with an Idempotency-Key.
func (s *soak) createPet(c *client) {
	name := fmt.Sprintf("soak-%d-%d", c.id, c.seq)
	body := fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, c.seq%10+1)
	key := ""
	if c.seq%2 == 0 {
		key = "key-" + name
	}
	a := s.do(c.id, "POST", "/v1/pets", "application/json", body, key)
	if key != "" {
		s.mu.Lock()
		s.keyed = append(s.keyed, keyedCreate{name: name, body: body, key: key, answered: !a.lost()})
		s.keyedCount++
		s.mu.Unlock()
	}
	var p pet
	switch {
	case a.lost():
		s.noAnswer()
	case a.status != http.StatusCreated || json.Unmarshal(a.body, &p) != nil:
		s.refusedWrite("createPet", a)
	default:
		s.acked(opCreate, change{subject: petSubject(p.ID), typ: "pet.created", data: a.body, state: a.body})
		c.pets = append(c.pets, &ownedPet{pet: p})
	}
}

// patchPet renames p (and moves it to another category).
func (s *soak) patchPet(c *client, p *ownedPet) {
	next := p.pet
	next.Name = fmt.Sprintf("soak-%d-%d-renamed", c.id, c.seq)
	next.CategoryID = p.CategoryID%10 + 1
	body := fmt.Sprintf(`{"name":%q,"categoryId":%d}`, next.Name, next.CategoryID)
	ct := "application/json"
	if c.seq%2 == 0 {
		ct = "application/merge-patch+json"
	}
	a := s.do(c.id, "PATCH", fmt.Sprintf("/v1/pets/%d", p.ID), ct, body, "")
	var got pet
	switch {
	case a.lost():
		s.uncertain(c, p, petSubject(p.ID), mustJSON(next))
	case a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil:
		s.refusedWrite("updatePet", a)
		s.uncertain(c, p, "", nil)
	default:
		s.acked(opPatch, change{subject: petSubject(p.ID), typ: "pet.updated", data: a.body, state: a.body})
		p.pet = got
	}
}

// deletePet deletes p, which never had an order.
func (s *soak) deletePet(c *client, p *ownedPet) {
	a := s.do(c.id, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), "", "", "")
	switch {
	case a.lost():
		s.uncertain(c, p, petSubject(p.ID), nil)
	case a.status != http.StatusNoContent:
		s.refusedWrite("deletePet", a)
		s.uncertain(c, p, "", nil)
	default:
		// The event of a delete carries the pet as it was.
		s.acked(opDelete, change{subject: petSubject(p.ID), typ: "pet.deleted", data: mustJSON(p.pet), state: nil})
		c.drop(p)
	}
}

// placeOrder orders p, which makes it pending.
func (s *soak) placeOrder(c *client, p *ownedPet) {
	a := s.do(c.id, "POST", "/v1/store/orders", "application/json", fmt.Sprintf(`{"petId":%d}`, p.ID), "")
	pending := p.pet
	pending.Status = "pending"
	var o order
	switch {
	case a.lost():
		// An order may have been placed, under an id nobody was told.
		s.uncertain(c, p, petSubject(p.ID), mustJSON(pending))
	case a.status != http.StatusCreated || json.Unmarshal(a.body, &o) != nil:
		s.refusedWrite("placeOrder", a)
		s.uncertain(c, p, "", nil)
	default:
		o.body = a.body
		s.acked(opPlace,
			change{subject: orderSubject(o.ID), typ: "order.placed", data: a.body, state: a.body},
			change{subject: petSubject(p.ID), typ: "pet.updated", data: mustJSON(pending), state: mustJSON(pending)})
		p.pet, p.hadOrder, p.open = pending, true, &o
	}
}

// updateOrder moves p's open order to delivered (the pet is sold) or
// cancelled (the pet is available again).
func (s *soak) updateOrder(c *client, p *ownedPet, to string) {
	o := p.open
	ct := "application/json"
	if c.seq%2 == 0 {
		ct = "application/merge-patch+json"
	}
	a := s.do(c.id, "PATCH", fmt.Sprintf("/v1/store/orders/%d", o.ID), ct, fmt.Sprintf(`{"status":%q}`, to), "")
	settled := p.pet
	settled.Status = map[string]string{"delivered": "sold", "cancelled": "available"}[to]
	var got order
	switch {
	case a.lost():
		moved := *o
		moved.Status = to
		s.mu.Lock()
		s.resource(orderSubject(o.ID)).allow(mustJSON(moved))
		s.mu.Unlock()
		s.uncertain(c, p, petSubject(p.ID), mustJSON(settled))
	case a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil:
		s.refusedWrite("updateOrder", a)
		s.uncertain(c, p, "", nil)
	default:
		op := map[string]int{"delivered": opDeliver, "cancelled": opCancel}[to]
		s.acked(op,
			change{subject: orderSubject(o.ID), typ: "order." + to, data: a.body, state: a.body},
			change{subject: petSubject(p.ID), typ: "pet.updated", data: mustJSON(settled), state: mustJSON(settled)})
		p.pet, p.open = settled, nil
	}
}

// drop gives up the pet p.
func (c *client) drop(p *ownedPet) {
	for i, q := range c.pets {
		if q == p {
			c.pets = append(c.pets[:i], c.pets[i+1:]...)
			return
		}
	}
}

// noAnswer counts a write left without an answer.
func (s *soak) noAnswer() {
	s.mu.Lock()
	s.unanswered++
	s.mu.Unlock()
}

// uncertain records that a write on p got no answer (or an unexpected one):
// subject's stored state may also be alt (nil: absent) when subject is not
// empty. The client gives p up.
func (s *soak) uncertain(c *client, p *ownedPet, subject string, alt []byte) {
	s.mu.Lock()
	if subject != "" {
		s.unanswered++
		s.resource(subject).allow(alt)
	} else {
		// An unexpected refusal: whatever the service did, the model no
		// longer knows; the stored state is read at the next check.
		s.resource(petSubject(p.ID)).allowAny = true
		if p.open != nil {
			s.resource(orderSubject(p.open.ID)).allowAny = true
		}
	}
	s.mu.Unlock()
	c.drop(p)
}

// refusedWrite counts a write the model says is valid that the service
// refused, and keeps a few as examples.
func (s *soak) refusedWrite(op string, a answer) {
	if s.refused.Add(1) <= 5 {
		fmt.Printf("soak: %s refused: %d %s\n", op, a.status, strings.TrimSpace(string(a.body)))
	}
}

// acked records acknowledged changes.
func (s *soak) acked(op int, changes ...change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acks[op]++
	for _, ch := range changes {
		r := s.resource(ch.subject)
		r.changes = append(r.changes, ch)
		r.allowed = [][]byte{ch.state}
	}
}

// retryKeyed retries every keyed create that got no answer, as a client
// would: each must now succeed, once. The pets it creates are checked but
// no client changes them.
func (s *soak) retryKeyed(ctx context.Context) error {
	s.mu.Lock()
	var pending []int
	for i, k := range s.keyed {
		if !k.answered {
			pending = append(pending, i)
		}
	}
	s.mu.Unlock()
	for _, i := range pending {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k := s.keyed[i]
		a := s.do(0, "POST", "/v1/pets", "application/json", k.body, k.key)
		var p pet
		if !a.ok(http.StatusCreated) || json.Unmarshal(a.body, &p) != nil {
			return fmt.Errorf("retry of %s: status %d, %v", k.name, a.status, a.err)
		}
		s.acked(opCreate, change{subject: petSubject(p.ID), typ: "pet.created", data: a.body, state: a.body})
		s.mu.Lock()
		s.keyed[i].answered = true
		s.retried++
		s.mu.Unlock()
	}
	return nil
}

// petSubject is the subject of the pet id.
func petSubject(id int64) string { return fmt.Sprintf("/v1/pets/%d", id) }

// orderSubject is the subject of the order id.
func orderSubject(id int64) string { return fmt.Sprintf("/v1/store/orders/%d", id) }

// mustJSON is v as JSON; v is one of the soak's own types.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
