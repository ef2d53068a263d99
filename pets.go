package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// getPet is deprecated: these are the instants in its Deprecation and Sunset
// headers. From sunset on, it answers 410 Gone.
var (
	getPetDeprecated = time.Date(2026, time.November, 21, 0, 0, 0, 0, time.UTC)
	getPetSunset     = time.Date(2030, time.December, 5, 0, 0, 0, 0, time.UTC)
)

// listPetsSpec is what listPets accepts.
var listPetsSpec = listSpec{operation: "listPets", item: "pet", path: "/v1/pets", statuses: petStatuses, idFilter: true}

// handleListPets serves listPets: GET /v1/pets?limit=&status=&id=&after=.
// Pages are cached encoded (see http_cache.go), except those of the id filter.
func handleListPets(log *slog.Logger, st *store) http.Handler {
	return handleList(log, listPetsSpec, st.responseCache(petsResource, resourceSpecs[petsResource].listCache),
		func(ctx context.Context, q listQuery) (page[Pet], error) {
			if q.ids != nil {
				return st.listPetsByID(ctx, q.ids, q.status, q.page)
			}
			return st.listPets(ctx, q.status, q.page)
		},
		petsBody, func(p Pet) int64 { return p.ID })
}

// createPet is the createPet operation, POST /v1/pets with a NewPet body,
// as the create handler runs it (see idempotent).
func createPet() creator {
	return creator{operation: "createPet", path: "/v1/pets", decode: func(body []byte) (creation, error) {
		np, err := decodeNewPet(body)
		if err != nil {
			return creation{}, err
		}
		return creation{
			fingerprint: func() [sha256.Size]byte { return fingerprintOf(np.Name, np.CategoryID, np.Status) },
			write: func(tx *txn) (outcome[created], error) {
				pet, err := tx.insertPet(np)
				return outcome[created]{value: created{id: pet.ID, body: petBody(pet)}}, err
			},
			insertOnly: true,
		}, nil
	}}
}

// decodeNewPet parses and validates a NewPet, filling in the default status.
func decodeNewPet(body []byte) (newPet, error) {
	np := newPet{Status: statusAvailable}
	err := decodeObject(body, object{name: "NewPet", example: `{"name": "Rex", "categoryId": 1}`, fields: []field{
		{name: "name", required: true, decode: func(raw json.RawMessage) error { return decodeName(raw, &np.Name) }},
		{name: "categoryId", required: true, decode: func(raw json.RawMessage) error { return decodeCategoryID(raw, &np.CategoryID) }},
		{name: "status", decode: func(raw json.RawMessage) error { return decodeStatus(raw, &np.Status) }},
	}})
	return np, err
}

// handleUpdatePet serves updatePet: PATCH /v1/pets/{petId} with a JSON Merge
// Patch (RFC 7396) of name, categoryId and status, sent as JSON or as
// application/merge-patch+json. Every field follows the rules of createPet;
// none may be null, since none can be removed.
func handleUpdatePet(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := petIDs.of(w, r, log)
		if !ok {
			return
		}
		body, err := readJSONBody(w, r, mergePatchType)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		patch, err := decodePetPatch(body)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		pet, err := st.updatePet(r.Context(), id, patch)
		if err != nil {
			writeError(w, r, log, err)
			return
		}
		writeBody(w, http.StatusOK, petBody(pet))
	})
}

// decodePetPatch parses and validates a PetPatch.
func decodePetPatch(body []byte) (petPatch, error) {
	var p petPatch
	var name, status string
	var category int64
	err := decodeObject(body, object{
		name: "PetPatch", example: `{"status": "sold"}`,
		null: "a patch cannot remove a field (every field of a pet is required): leave it out to keep its value",
		fields: []field{
			{name: "name", decode: func(raw json.RawMessage) error { p.Name = &name; return decodeName(raw, &name) }},
			{name: "categoryId", decode: func(raw json.RawMessage) error { p.CategoryID = &category; return decodeCategoryID(raw, &category) }},
			{name: "status", decode: func(raw json.RawMessage) error { p.Status = &status; return decodeStatus(raw, &status) }},
		},
	})
	return p, err
}

// handleDeletePet serves deletePet: DELETE /v1/pets/{petId}, answering 204.
func handleDeletePet(log *slog.Logger, st *store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := petIDs.of(w, r, log)
		if !ok {
			return
		}
		if err := st.deletePet(r.Context(), id); err != nil {
			writeError(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// decodeName accepts a JSON string of 1 to 100 code points that a person can
// see and read on one line: no control characters, no line or paragraph
// separators, no invisible format characters but the joiners, and at least
// one letter, digit, punctuation mark or symbol (see nameFormatOK).
func decodeName(raw json.RawMessage, dst *string) error {
	if kind := jsonKind(raw); kind != "string" {
		return errorf(codeInvalidField, "field name must be a JSON string, not %s", withArticle(kind))
	}
	s, ok := jsonString(raw)
	if !ok {
		return errorf(codeInvalidField, "field name must be a JSON string")
	}
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0 || strings.TrimSpace(s) == "":
		return errorf(codeInvalidField, "field name must not be empty or blank")
	case n > maxNameRunes:
		return errorf(codeInvalidField, "field name must be at most %d characters; it has %d", maxNameRunes, n)
	}
	visible := false
	prev := rune(-1)
	for _, r := range s {
		switch {
		case unicode.IsControl(r):
			return errorf(codeInvalidField, "field name must not contain control characters (found U+%04X)", r)
		case r == utf8.RuneError:
			// encoding/json turns an unpaired surrogate escape (\ud800) into
			// U+FFFD; storing it would record a name the client never sent.
			return errorf(codeInvalidField, "field name must not contain U+FFFD or an unpaired surrogate escape")
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return errorf(codeInvalidField, "field name must be one line: no line or paragraph separator (found U+%04X)", r)
		case unicode.Is(unicode.Cf, r) && !nameFormatOK(prev, r):
			return errorf(codeInvalidField, "field name must not contain the invisible format character U+%04X; only U+200C and U+200D (joiners), and the tags of a flag emoji, are allowed", r)
		case prev >= tagFirst && prev < tagCancel && !(r >= tagFirst && r <= tagCancel):
			return errorf(codeInvalidField, "field name has an emoji tag sequence that does not end with U+E007F")
		}
		visible = visible || unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S)
		prev = r
	}
	switch {
	case prev >= tagFirst && prev < tagCancel:
		return errorf(codeInvalidField, "field name has an emoji tag sequence that does not end with U+E007F")
	case !visible:
		return errorf(codeInvalidField, "field name must hold at least one letter, digit, punctuation mark or symbol, not only spaces, marks or joiners")
	}
	*dst = s
	return nil
}

// The tag characters of an emoji tag sequence (Unicode TS #51): a flag of a
// subdivision is U+1F3F4, tags U+E0020 to U+E007E spelling its code, then
// U+E007F.
const (
	tagBase   = '\U0001F3F4'
	tagFirst  = '\U000E0020'
	tagCancel = '\U000E007F'
)

// nameFormatOK reports whether the format character r (Unicode category Cf),
// following prev, may be part of a name. Format characters are invisible and
// change how the text around them is shown: U+202E turns "gpj.exe" into what
// reads as "exe.jpg", and zero-width ones make names that look alike, or
// empty, differ. Only what real text needs passes: the zero-width joiner
// and non-joiner (emoji sequences such as 👩‍💻 and the scripts of Persian and
// India need them), and the tags of a subdivision flag (🏴󠁧󠁢󠁳󠁣󠁴󠁿), which are
// allowed only in that sequence, since tags elsewhere can smuggle hidden
// text.
func nameFormatOK(prev, r rune) bool {
	switch {
	case r == '\u200C' || r == '\u200D':
		return true
	case r >= tagFirst && r < tagCancel:
		return prev == tagBase || (prev >= tagFirst && prev < tagCancel)
	case r == tagCancel:
		return prev >= tagFirst && prev < tagCancel
	}
	return false
}

// decodeCategoryID accepts a category id: a JSON integer from 1 to 2^63-1.
func decodeCategoryID(raw json.RawMessage, dst *int64) error {
	return decodeID("categoryId", raw, dst)
}

// decodeStatus accepts one of the PetStatus strings.
func decodeStatus(raw json.RawMessage, dst *string) error {
	if raw[0] == 'n' {
		return errorf(codeInvalidField, "field status must be one of available, pending, sold, not null; omit the field to get available")
	}
	return decodeEnum("status", petStatuses, raw, dst)
}

// handleGetPet serves getPet: GET /v1/pets/{petId}. It is deprecated and, from
// the sunset instant on, answers 410 Gone; now is the clock, injectable so
// that a test can move past the sunset. Found pets are cached encoded (see
// http_cache.go).
func handleGetPet(log *slog.Logger, st *store, now func() time.Time) http.Handler {
	found := handleItem(log, st.responseCache(petsResource, resourceSpecs[petsResource].itemCache), petIDs.of, func(ctx context.Context, id int64) ([]byte, error) {
		pet, err := st.getPet(ctx, id)
		if err != nil {
			return nil, err
		}
		return petBody(pet), nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !now().Before(getPetSunset) {
			successor := "GET /v1/pets?id={petId}"
			if id, ok := parsePathID(r.PathValue("petId")); ok {
				successor = "GET /v1/pets?id=" + strconv.FormatInt(id, 10)
			}
			writeError(w, r, log, errorf(codeGone, "getPet was removed on 5 December 2030; fetch pets by id with %s instead", successor))
			return
		}
		found.ServeHTTP(w, r)
	})
}

// deprecated adds the headers that tell a client getPet is going away:
// Deprecation (RFC 9745), Sunset (RFC 8594), a Link to the documentation and
// a Link to its successor, listPets with the id filter, for the same pet.
// It wraps the authentication check too, so that every answer carries them.
// It counts authenticated calls by caller, so the operator knows who still
// has to migrate.
func deprecated(m *metrics, next http.Handler) http.Handler {
	deprecation := fmt.Sprintf("@%d", getPetDeprecated.Unix())
	sunset := getPetSunset.Format(http.TimeFormat)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// One Link field with both links, comma-separated (RFC 8288): many
		// clients read only the first field of a repeated header.
		link := `</v1/openapi.json>; rel="deprecation"; type="application/json"`
		if id, ok := parsePathID(r.PathValue("petId")); ok {
			link += ", </v1/pets?id=" + strconv.FormatInt(id, 10) + `>; rel="successor-version"`
		}
		// What h.Set would do, with the names already canonical and the
		// three values in one allocation.
		h := w.Header()
		values := []string{deprecation, sunset, link}
		h["Deprecation"], h["Sunset"], h["Link"] = values[0:1:1], values[1:2:2], values[2:3:3]
		next.ServeHTTP(w, r)
		if info := requestInfoFrom(r.Context()); info != nil && info.caller != "" {
			m.deprecatedCall("getPet", info.caller)
		}
	})
}
