package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestASubscriptionIsManagedOnlyByAKeyThatReadsWhatItDelivers: a key may
// see, change, rotate, delete or read the deliveries of a subscription only
// when it may read every event type the subscription delivers. Any other is
// answered as if it did not exist (404), and is left out of the list: a key
// holding only webhooks:write cannot point a subscription of another key at
// its own receiver, nor read its URL, secret or deliveries.
func TestASubscriptionIsManagedOnlyByAKeyThatReadsWhatItDelivers(t *testing.T) {
	t.Parallel()
	const petsKey, hooksOnly = "pets-hooks-0123456789", "hooks-only-0123456789"
	ts := newServerWithKeyFile(t, testKey+" all\n"+
		petsKey+" pets scopes=pets:read,webhooks:write\n"+
		hooksOnly+" hooks scopes=webhooks:write\n", time.Now)
	every := subscribe(t, ts, `{"url":"https://192.0.2.10/every","description":"token in the URL"}`)
	orders := subscribe(t, ts, `{"url":"https://192.0.2.10/orders","types":["order.*"]}`)
	var pets webhookJSON
	if res := ts.do(t, "POST", "/v1/webhooks", `{"url":"https://192.0.2.10/pets"}`, bearer(petsKey)); res.Status != http.StatusCreated {
		t.Fatalf("create with the pets key: %d %s", res.Status, res.Body)
	} else {
		pets = decode[webhookJSON](t, res)
	}

	listed := func(t *testing.T, key string) []int64 {
		t.Helper()
		ids := []int64{}
		for _, w := range listAll[webhookJSON](t, ts.URL, "/v1/webhooks?limit=1", bearer(key), nil) {
			ids = append(ids, w.ID)
		}
		return ids
	}
	t.Run("the list shows each key what it may manage", func(t *testing.T) {
		for _, tt := range []struct {
			key  string
			want []int64
		}{
			{testKey, []int64{every.ID, orders.ID, pets.ID}},
			{petsKey, []int64{pets.ID}},
			{hooksOnly, []int64{}},
		} {
			if diff := cmp.Diff(tt.want, listed(t, tt.key)); diff != "" {
				t.Errorf("listWebhooks with %s mismatch (-want +got):\n%s", callerLabel(testSecret, tt.key), diff)
			}
		}
	})

	forbidden := []struct {
		rule, key string
		id        int64
	}{
		{"webhooks:write alone, a subscription to every type", hooksOnly, every.ID},
		{"webhooks:write alone, a subscription to the pets' types", hooksOnly, pets.ID},
		{"pets:read, a subscription to every type", petsKey, every.ID},
		{"pets:read, a subscription to the orders' types", petsKey, orders.ID},
	}
	for _, tt := range forbidden {
		t.Run(tt.rule+" is not there", func(t *testing.T) {
			path := webhookPath(tt.id)
			for _, rq := range []struct{ method, path, body string }{
				{"GET", path, ""},
				{"PATCH", path, `{"url":"https://192.0.2.99/stolen"}`},
				{"PATCH", path, `{"status":"paused","description":"mine now"}`},
				{"POST", path + "/secret", ""},
				{"GET", path + "/deliveries", ""},
				{"DELETE", path, ""},
			} {
				hdr := bearer(tt.key)
				if rq.method == "PATCH" {
					hdr["Content-Type"] = mergePatchType
				}
				res := ts.do(t, rq.method, rq.path, rq.body, hdr)
				wantError(t, res, http.StatusNotFound, codeNotFound, fmt.Sprint(tt.id))
			}
		})
	}
	t.Run("nothing of the subscriptions changed", func(t *testing.T) {
		for _, want := range []webhookJSON{every, orders, pets} {
			got := decode[webhookJSON](t, ts.do(t, "GET", webhookPath(want.ID), "", nil))
			want.Secret = ""
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("subscription %d mismatch (-want +got):\n%s", want.ID, diff)
			}
		}
	})
	t.Run("a key that reads every type it delivers manages it", func(t *testing.T) {
		hdr := bearer(petsKey)
		if res := ts.do(t, "GET", webhookPath(pets.ID)+"/deliveries", "", hdr); res.Status != http.StatusOK {
			t.Errorf("deliveries: %d %s", res.Status, res.Body)
		}
		if res := ts.do(t, "POST", webhookPath(pets.ID)+"/secret", "", hdr); res.Status != http.StatusOK {
			t.Errorf("rotate: %d %s", res.Status, res.Body)
		}
		hdr["Content-Type"] = mergePatchType
		if res := ts.do(t, "PATCH", webhookPath(pets.ID), `{"url":"https://192.0.2.10/pets2"}`, hdr); res.Status != http.StatusOK {
			t.Errorf("update: %d %s", res.Status, res.Body)
		}
		if res := ts.do(t, "DELETE", webhookPath(pets.ID), "", bearer(petsKey)); res.Status != http.StatusNoContent {
			t.Errorf("delete: %d %s", res.Status, res.Body)
		}
	})
}
