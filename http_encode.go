package main

// The pets in answers are encoded by appending bytes, not through
// encoding/json: a page of 20 pets through reflection costs several times
// more than the bytes themselves (see BenchmarkEncodePage). The output is
// byte for byte what json.Encoder with SetEscapeHTML(false) writes, minus
// the trailing newline; TestAppendPetMatchesEncodingJSON and
// FuzzAppendJSONString hold the two together.

// petBody is the response body of one pet: its JSON and a newline, as
// json.Encoder writes it.
func petBody(p Pet) []byte {
	return append(appendPet(make([]byte, 0, 128), p), '\n')
}

// petsBody is the response body of a list of pets.
func petsBody(pets []Pet) []byte { return listBody(pets, 64, appendPet) }

// appendPets appends pets as a JSON array; no pets is [], never null.
func appendPets(dst []byte, pets []Pet) []byte { return appendList(dst, pets, appendPet) }

// listBody is the response body of a list: its items as a JSON array and
// a newline, as json.Encoder writes it; size is about the bytes of one item.
func listBody[T any](items []T, size int, appendItem func([]byte, T) []byte) []byte {
	return append(appendList(make([]byte, 0, size*len(items)+3), items, appendItem), '\n')
}

// appendList appends items as a JSON array, each by appendItem; no items
// is [], never null.
func appendList[T any](dst []byte, items []T, appendItem func([]byte, T) []byte) []byte {
	dst = append(dst, '[')
	for i, item := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, item)
	}
	return append(dst, ']')
}

// orderBody is the response body of one order.
func orderBody(o Order) []byte {
	return append(appendOrder(make([]byte, 0, 128), o), '\n')
}

// ordersBody is the response body of a list of orders.
func ordersBody(orders []Order) []byte { return listBody(orders, 120, appendOrder) }
