// The TypeScript types that openapi-typescript generates from the served
// document (./petstore.ts, which the Go test TestContractTools writes next
// to a copy of this file), proven against the running service through
// openapi-fetch, whose calls they type: a path, parameter, body or answer
// the types get wrong fails to compile (tsc) or fails here at run time.
// PETSTORE_URL is the service's root URL and PETSTORE_KEY an API key.
import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { components, paths } from "./petstore.js";

type Pet = components["schemas"]["Pet"];
type Order = components["schemas"]["Order"];

const root = process.env.PETSTORE_URL;
const key = process.env.PETSTORE_KEY;
if (!root || !key) {
  throw new Error("set PETSTORE_URL (the service's root URL) and PETSTORE_KEY (an API key)");
}

const api = createClient<paths>({
  baseUrl: `${root}/v1`,
  headers: { Authorization: `Bearer ${key}` },
  // The document gives the id filter style form without explode
  // (id=1,2); openapi-fetch reads no style from the types, so the client
  // says it.
  querySerializer: { array: { style: "form", explode: false } },
});
// The health checks live outside /v1 (their own servers in the document).
const outside = createClient<paths>({ baseUrl: root });

let checks = 0;
function check(what: string, ok: () => void): void {
  try {
    ok();
  } catch (err) {
    throw new Error(`${what}: ${(err as Error).message}`);
  }
  checks++;
}

// createPet, retried with the same Idempotency-Key.
const newPet: components["schemas"]["NewPet"] = { name: "Rex", categoryId: 1 };
const createParams = { header: { "Idempotency-Key": "typescript-live-rex" } };
const created = await api.POST("/pets", { params: createParams, body: newPet });
check("createPet answers 201 with the pet", () => {
  assert.equal(created.response.status, 201);
  assert.ok(created.data);
  assert.deepEqual(created.data, { id: created.data.id, name: "Rex", categoryId: 1, status: "available" } satisfies Pet);
  assert.equal(created.response.headers.get("Location"), `/v1/pets/${created.data.id}`);
});
const rex = created.data!;
const replay = await api.POST("/pets", { params: createParams, body: newPet });
check("a retried createPet replays the same pet", () => {
  assert.equal(replay.response.status, 201);
  assert.deepEqual(replay.data, rex);
  assert.equal(replay.response.headers.get("Idempotent-Replayed"), "true");
});

// getPet (deprecated) and its successor, listPets with the id filter.
const got = await api.GET("/pets/{petId}", { params: { path: { petId: rex.id } } });
check("getPet returns the created pet, with the deprecation headers", () => {
  assert.deepEqual(got.data, rex);
  assert.equal(got.response.headers.get("Sunset"), "Thu, 05 Dec 2030 00:00:00 GMT");
});
const tom = (await api.POST("/pets", { body: { name: "Tom", categoryId: 2, status: "pending" } })).data!;
const listed = await api.GET("/pets", { params: { query: { id: [tom.id, rex.id], limit: 20 } } });
check("listPets with the id filter returns both pets in id order", () => {
  assert.equal(listed.response.status, 200);
  assert.deepEqual(listed.data, [rex, tom]);
});

// updatePet as a JSON Merge Patch.
const patched = await api.PATCH("/pets/{petId}", {
  params: { path: { petId: tom.id } },
  body: { status: "available" },
  headers: { "Content-Type": "application/merge-patch+json" },
});
check("updatePet changes only the status", () => {
  assert.deepEqual(patched.data, { ...tom, status: "available" } satisfies Pet);
});

// The store: place, deliver, list.
const placed = await api.POST("/store/orders", { body: { petId: rex.id } });
check("placeOrder answers 201 with a placed order", () => {
  assert.equal(placed.response.status, 201);
  assert.ok(placed.data);
  assert.equal(placed.data.status, "placed");
  assert.equal(placed.data.petId, rex.id);
  assert.equal(placed.data.updatedAt, placed.data.placedAt);
});
const order: Order = placed.data!;
const delivered = await api.PATCH("/store/orders/{orderId}", {
  params: { path: { orderId: order.id } },
  body: { status: "delivered" },
});
check("updateOrder delivers the order", () => {
  assert.equal(delivered.data?.status, "delivered");
});
const sold = await api.GET("/pets", { params: { query: { id: [rex.id] } } });
check("the delivered order sold its pet", () => {
  assert.deepEqual(sold.data, [{ ...rex, status: "sold" }]);
});
const orders = await api.GET("/store/orders", { params: { query: { status: "delivered" } } });
check("listOrders filters by status", () => {
  assert.deepEqual(orders.data?.map((o) => o.id), [order.id]);
});
const again = await api.POST("/store/orders", { body: { petId: rex.id } });
check("a sold pet cannot be ordered: 409 pet_not_available", () => {
  assert.equal(again.response.status, 409);
  assert.equal(again.error?.code, "pet_not_available");
  assert.equal(again.error?.status, 409);
});

// The error answers keep their per-status code in the types: getPet
// answers a missing pet with not_found, and never with a code of another
// operation, so comparing with one does not compile.
const missing = await api.GET("/pets/{petId}", { params: { path: { petId: 999999 } } });
check("getPet of a missing pet is 404 not_found", () => {
  assert.equal(missing.response.status, 404);
  assert.equal(missing.error?.code, "not_found");
  // @ts-expect-error getPet has no answer whose code is pet_has_orders.
  assert.notEqual(missing.error?.code === "pet_has_orders", true);
});
const notFound: components["responses"]["PetNotFound"]["content"]["application/json"]["code"] = "not_found";
// @ts-expect-error PetNotFound's code is not_found and nothing else.
const notGone: components["responses"]["PetNotFound"]["content"]["application/json"]["code"] = "gone";
check("the 404 body type is narrowed to not_found", () => {
  assert.notEqual(notFound, notGone);
});

const stranger = createClient<paths>({ baseUrl: `${root}/v1`, headers: { Authorization: "Bearer not-a-key" } });
const refused = await stranger.GET("/store/orders/{orderId}", { params: { path: { orderId: order.id } } });
check("a wrong key is 401 unauthorized", () => {
  assert.equal(refused.response.status, 401);
  assert.equal(refused.error?.code, "unauthorized");
});

// The change feed: the orders' events, each decoded by its type. The
// switch narrows an Event by its type to the form with an Order in data:
// were the oneOf not typed by its discriminator, returning e.data as an
// Order would not compile.
function orderOf(e: components["schemas"]["Event"]): Order | undefined {
  switch (e.type) {
    case "order.placed":
    case "order.delivered":
    case "order.cancelled":
      return e.data;
    default:
      return undefined;
  }
}
const feed = await api.GET("/events", { params: { query: { type: ["order.*"], limit: 1000 } } });
check("listEvents shows the order placed, then delivered, and links the next page", () => {
  assert.equal(feed.response.status, 200);
  // The 200 has two media types, so its data is typed as either: the JSON
  // page is the array.
  const page = feed.data;
  assert.ok(Array.isArray(page));
  assert.deepEqual(page.map((e) => e.type), ["order.placed", "order.delivered"]);
  assert.deepEqual(page.map(orderOf), [order, delivered.data]);
  const last = page[page.length - 1].id;
  assert.equal(feed.response.headers.get("Link"), `</v1/events?after=${last}&limit=1000&type=order.%2A>; rel="next"`);
});

// A browser's EventSource cannot send an Authorization header: a ticket
// opens the stream instead, read here with fetch as far as its first frame.
const ticket = await api.POST("/events/tickets");
check("createEventTicket answers 201 with a ticket not to be cached", () => {
  assert.equal(ticket.response.status, 201);
  assert.match(ticket.data?.ticket ?? "", /^[A-Za-z0-9]+$/);
  assert.equal(ticket.response.headers.get("Cache-Control"), "no-store");
});
const hangUp = new AbortController();
const stream = await fetch(`${root}/v1/events?ticket=${ticket.data!.ticket}`, {
  headers: { Accept: "text/event-stream" },
  signal: hangUp.signal,
});
const first = await stream.body!.getReader().read();
hangUp.abort();
check("the ticket opens the stream without a key, which starts with its retry field", () => {
  assert.equal(stream.status, 200);
  assert.equal(stream.headers.get("Content-Type"), "text/event-stream");
  assert.ok(new TextDecoder().decode(first.value).startsWith("retry: 2000\n\n"));
});

// int64 in JavaScript: a categoryId up to Number.MAX_SAFE_INTEGER travels
// exactly (see the README on integers).
const largest = await api.POST("/pets", { body: { name: "Max", categoryId: Number.MAX_SAFE_INTEGER } });
check("categoryId 2^53 - 1 round-trips exactly", () => {
  assert.equal(largest.data?.categoryId, 9007199254740991);
});

// The health checks, outside /v1 and without a key.
const live = await outside.GET("/healthz");
const ready = await outside.GET("/readyz");
check("the health checks answer ok and ready", () => {
  assert.equal(live.data?.status, "ok");
  assert.equal(ready.data?.status, "ready");
});

console.log(`typescript live test: ${checks} checks passed`);
