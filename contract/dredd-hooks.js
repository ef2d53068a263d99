// Dredd hooks for the pet store's OpenAPI 3.1 document (see README.md, "API
// document and clients"). Dredd 14 reads OpenAPI 3 through a parser that
// supports only part of it; each hook below makes up for one limitation of
// that reader, named at the hook, by reading what the document itself says.
// None of them changes a request, an expected status or an expected body
// beyond what the document states.
const fs = require('fs');
const hooks = require('hooks');

// documents holds each API description Dredd tested, by file name, parsed.
const documents = new Map();

function documentOf(filename) {
  if (!documents.has(filename)) {
    documents.set(filename, JSON.parse(fs.readFileSync(filename, 'utf8')));
  }
  return documents.get(filename);
}

// resolve follows a local $ref ("#/components/...") to what it names.
function resolve(doc, value) {
  while (value && typeof value.$ref === 'string') {
    value = value.$ref
      .replace(/^#\//, '')
      .split('/')
      .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce((node, part) => node[part], doc);
  }
  return value;
}

// pathOf is the path of a server URL, its variables left as they are:
// "https://{host}/v1" is "/v1", "https://{host}" is "".
function pathOf(serverURL) {
  return serverURL.replace(/^[a-z]+:\/\/[^/]*/, '').replace(/\/$/, '');
}

hooks.beforeEach((transaction, done) => {
  const doc = documentOf(transaction.origin.filename);
  const item = doc.paths[transaction.origin.resourceName];
  const operation = item[transaction.request.method.toLowerCase()];
  const status = transaction.expected.statusCode;

  // Limitation: Dredd makes one transaction for every documented response,
  // and sends each the same example request, so a 401 or 404 transaction
  // would send the request of the 2xx and fail. For OpenAPI 2 Dredd skips
  // the non-2xx transactions itself (build/TransactionRunner.js); for
  // OpenAPI 3 it does not. Dredd tests the 2xx answers; the error answers are
  // proven by Portman's variations and by TestContract.
  if (!/^2/.test(status)) {
    transaction.skip = true;
    done();
    return;
  }

  // Limitation: Dredd reads an answer to its end before it compares it, and
  // a Server-Sent Events stream (listEvents asked for text/event-stream)
  // never ends, so Dredd would wait for ever. Dredd tests the JSON form of
  // listEvents; the stream is proven by TestContract (its status, headers
  // and first frame) and by TestOpenAPIExamplesAreWhatTheServiceAnswers (its
  // example, byte for byte).
  const expectedType = Object.entries(transaction.expected.headers || {})
    .find(([name]) => name.toLowerCase() === 'content-type');
  if (expectedType && expectedType[1].split(';')[0].trim() === 'text/event-stream') {
    transaction.skip = true;
    done();
    return;
  }

  // Limitation: Dredd takes one server URL and ignores a Path Item's own
  // `servers`, so it would ask for /healthz, /readyz and /metrics under /v1.
  if (item.servers) {
    const root = pathOf(doc.servers[0].url);
    if (transaction.fullPath.startsWith(root)) {
      transaction.fullPath = pathOf(item.servers[0].url) + transaction.fullPath.slice(root.length);
    }
  }

  // Limitation: Dredd's reader ignores every keyword of a Header Object
  // (it warns "'Header Object' contains unsupported key 'required'") and
  // expects every documented header. A header the document does not require
  // (Link, sent only when another page follows; Idempotent-Replayed, only on
  // a replay) is dropped from the expected ones.
  const response = resolve(doc, operation.responses[status]);
  for (const [name, header] of Object.entries(response.headers || {})) {
    if (!resolve(doc, header).required) {
      delete transaction.expected.headers[name];
    }
  }

  // Limitation: for a text/plain body Dredd compares the answer with the
  // example byte for byte. The metrics change with every request, so for
  // them Dredd checks the status and the headers, Content-Type included.
  if (response.content && response.content['text/plain']) {
    delete transaction.expected.body;
    delete transaction.expected.bodySchema;
  }
  done();
});

hooks.beforeEachValidation((transaction, done) => {
  // Limitation: Dredd compares the whole Content-Type with the media type of
  // the document, parameters included, where an OpenAPI media type key
  // (text/plain) stands for the type with any parameters (the metrics are
  // "text/plain; version=0.0.4; charset=utf-8; ..."). The answer's
  // Content-Type is cut to its media type before it is compared.
  const headers = transaction.real.headers;
  for (const name of Object.keys(headers)) {
    if (name.toLowerCase() === 'content-type') {
      headers[name] = headers[name].split(';')[0].trim();
    }
  }
  done();
});
