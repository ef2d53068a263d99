package main

import "strconv"

// The domain of pets: the Pet, its statuses and rules, its events and its
// wire form. It uses nothing but the other domain files.

// Rules of pets; the decision table of docs/api.md states each of them.
const (
	maxNameRunes    = 100
	statusAvailable = "available"
)

// petStatuses are the values of PetStatus.
var petStatuses = []string{"available", "pending", "sold"}

// Pet is an animal as the API returns it.
type Pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// The events of pets: one per change, named after what the change did.
const (
	eventPetCreated = "pet.created"
	eventPetUpdated = "pet.updated"
	eventPetDeleted = "pet.deleted"
)

// eventType is the type of the event a change of this kind to p makes.
func (p Pet) eventType(kind changeKind) string { return "pet." + kind.String() }

// appendJSON appends p as GET returns it, for its events.
func (p Pet) appendJSON(dst []byte) []byte { return appendPet(dst, p) }

// newPet is a validated createPet request body (a NewPet, with the default
// status filled in).
type newPet struct {
	Name       string
	CategoryID int64
	Status     string
}

// appendPet appends p as a JSON object.
func appendPet(dst []byte, p Pet) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, p.ID, 10)
	dst = append(dst, `,"name":`...)
	dst = appendJSONString(dst, p.Name)
	dst = append(dst, `,"categoryId":`...)
	dst = strconv.AppendInt(dst, p.CategoryID, 10)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, p.Status)
	return append(dst, '}')
}

// rowID is the id of p, as the change records take it.
func (p Pet) rowID() int64 { return p.ID }
