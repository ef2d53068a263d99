package main

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The query of a list operation, the same for every list: limit, after
// (keyset pagination by id), a status filter and, where the list takes
// one, an id filter (parseListQuery); and the Link to the next page
// (nextLink).

// Limits of a list's page; the decision table of docs/api.md states them.
const (
	defaultLimit = 20
	maxLimit     = 100
)

// listSpec is what a list operation accepts: every list takes limit (1 to
// maxLimit, default defaultLimit) and after (keyset pagination by id), and
// a status filter over its own statuses when its items have a status.
type listSpec struct {
	operation string   // the operationId, for messages: listPets
	item      string   // what after and id name, for messages: pet
	path      string   // the list's path, for the Link to the next page
	statuses  []string // the values of the status filter; nil for a list without one
	idFilter  bool     // it takes id: a comma-separated list of ids
}

// maxIDs bounds the ids of an id filter.
const maxIDs = 100

// listQuery is a validated list query.
type listQuery struct {
	page   pageRequest
	status string  // "" means no filter
	ids    []int64 // nil means no id filter; ascending, without repeats
}

// parameters names the parameters of the list, for messages.
func (spec listSpec) parameters() string {
	switch {
	case spec.statuses == nil:
		return "limit and after"
	case spec.idFilter:
		return "limit, status, id and after"
	}
	return "limit, status and after"
}

// queryParams name an operation's parameters in messages.
type queryParams struct {
	operation string // the operationId: listPets
	names     string // the parameters: "limit, status and after"
}

// decodeParam decodes the value of the parameter name, reporting false for
// a name the operation does not take. It is one function of the name, not
// a map of one function a name, and apart from queryParams (whose strings
// go into messages), so that a query is read without allocating: lists are
// the most requested reads.
type decodeParam func(name, value string) (known bool, err error)

// parseQuery is what every query of the API shares: the query string must
// be valid URL encoding, with each parameter at most once, and none that
// the operation does not take; each value goes to decode. Parameters
// are checked in the order the query gives them, so that of two mistakes
// the first is reported. A value out of range is an error, never silently
// corrected: a client asking for 500 items and getting 100 would think it
// had them all.
func parseQuery(raw string, qp queryParams, decode decodeParam) error {
	var room [8]queryParam
	params, ok := splitQuery(raw, room[:0])
	if !ok {
		return errorf(codeInvalidParameter, "the query string is not valid URL encoding; parameters are %s, joined with '&'", qp.names)
	}
	for _, p := range params {
		if n := countParam(params, p.name); n > 1 {
			return errorf(codeInvalidParameter, "parameter %q is given %d times; give it at most once", abbreviate(p.name), n)
		}
		known, err := decode(p.name, p.value)
		if !known {
			return errorf(codeInvalidParameter, "unknown parameter %q; %s takes %s", abbreviate(p.name), qp.operation, qp.names)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// queryParam is a parameter of a query string, unescaped.
type queryParam struct{ name, value string }

// splitQuery appends the parameters of a query string to params, in its
// order, as net/url's ParseQuery reads them: separated by '&', a name
// without '=' having an empty value, empty ones skipped; it reports false
// for a semicolon (net/url's refusal since Go 1.17) or a malformed escape.
func splitQuery(raw string, params []queryParam) ([]queryParam, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(pair, ";") {
			return nil, false
		}
		if pair == "" {
			continue
		}
		name, value, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(name)
		if err != nil {
			return nil, false
		}
		if value, err = url.QueryUnescape(value); err != nil {
			return nil, false
		}
		params = append(params, queryParam{name, value})
	}
	return params, true
}

// countParam counts the parameters of params named name.
func countParam(params []queryParam, name string) int {
	n := 0
	for _, p := range params {
		if p.name == name {
			n++
		}
	}
	return n
}

// parseLimit reads the value of limit: an integer from 1 to most.
func parseLimit(v string, most int) (int, error) {
	n, ok := parseDecimal(v)
	if !ok || n < 1 || n > int64(most) {
		return 0, errorf(codeInvalidParameter, "parameter limit must be an integer from 1 to %d", most)
	}
	return int(n), nil
}

// parseListQuery validates the query string of a list.
func parseListQuery(raw string, spec listSpec) (listQuery, error) {
	q := listQuery{page: pageRequest{limit: defaultLimit}}
	decode := func(name, v string) (known bool, err error) {
		switch {
		case name == "limit":
			q.page.limit, err = parseLimit(v, maxLimit)
		case name == "after":
			n, ok := parseDecimal(v)
			if !ok {
				return true, errorf(codeInvalidParameter, "parameter after must be %s id: an integer from 0 to 9223372036854775807", article(spec.item))
			}
			q.page.after = n
		case name == "status" && spec.statuses != nil:
			if !slices.Contains(spec.statuses, v) {
				return true, errorf(codeInvalidParameter, "parameter status must be one of %s", strings.Join(spec.statuses, ", "))
			}
			q.status = v
		case name == "id" && spec.idFilter:
			q.ids, err = parseIDList(v, spec.item)
		default:
			return false, nil
		}
		return true, err
	}
	if err := parseQuery(raw, queryParams{spec.operation, spec.parameters()}, decode); err != nil {
		return q, err
	}
	return q, spec.checkLinkFits(q)
}

// maxLinkBytes bounds the Link header of a list: like every header the
// service writes from what a client sent, it stays under 512 bytes
// (docs/security.md).
const maxLinkBytes = 512

// checkLinkFits refuses an id filter whose next page's Link could be longer
// than maxLinkBytes. A page can be followed by another only when limit is
// smaller than the number of ids, and the Link then carries only the ids
// after the page (see nextLink), which are among those after the first
// limit ones, and an after that is at least the limit-th id: no Link of the
// query is longer than all of those ids with, as after, the greatest id.
// Each page that follows carries fewer ids, so a Link that fitted is never
// refused when followed.
func (spec listSpec) checkLinkFits(q listQuery) error {
	if len(q.ids) <= q.page.limit {
		return nil // one page holds them all: no Link
	}
	first, greatest := q.ids[q.page.limit-1], q.ids[len(q.ids)-1]
	longest := spec.nextLink(listQuery{page: q.page, status: q.status, ids: q.ids[q.page.limit:]}, first)
	if n := len(longest) + len(strconv.FormatInt(greatest, 10)) - len(strconv.FormatInt(first, 10)); n > maxLinkBytes {
		return errorf(codeInvalidParameter, "parameter id: these %d ids with limit=%d could need a Link to the next page of %d bytes, and no header is over %d; give limit=%d to have them all in one page, or fewer or shorter ids",
			len(q.ids), q.page.limit, n, maxLinkBytes, len(q.ids))
	}
	return nil
}

// parseIDList reads the value of an id filter: 1 to maxIDs ids, each a
// positive int64, separated by commas (OpenAPI's style form, explode false).
// It returns them in ascending order without repeats.
func parseIDList(v, item string) ([]int64, error) {
	items := strings.Split(v, ",")
	if len(items) > maxIDs {
		return nil, errorf(codeInvalidParameter, "parameter id holds %d ids; the limit is %d", len(items), maxIDs)
	}
	ids := make([]int64, 0, len(items))
	for i, s := range items {
		id, ok := parsePathID(s)
		if !ok {
			return nil, errorf(codeInvalidParameter, "parameter id: item %d (%q) is not %s id; give 1 to %d ids, integers from 1 to 9223372036854775807 separated by commas, such as id=7,9,12", i+1, abbreviate(s), article(item), maxIDs)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// nextLink is the RFC 8288 Link header that points at the page after the
// item with id last, with the same limit and filters; of an id filter, only
// the ids after last, the only ones a later page can still hold (so that
// the Link shrinks page by page, see checkLinkFits).
func (spec listSpec) nextLink(q listQuery, last int64) string {
	var b strings.Builder
	b.WriteString("<")
	b.WriteString(spec.path)
	b.WriteString("?limit=")
	b.WriteString(strconv.Itoa(q.page.limit))
	if q.status != "" {
		b.WriteString("&status=")
		b.WriteString(q.status)
	}
	sep := "&id="
	for _, id := range q.ids {
		if id <= last {
			continue
		}
		b.WriteString(sep)
		b.WriteString(strconv.FormatInt(id, 10))
		sep = ","
	}
	b.WriteString("&after=")
	b.WriteString(strconv.FormatInt(last, 10))
	b.WriteString(`>; rel="next"`)
	return b.String()
}
