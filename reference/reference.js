// Renders the service's own API document with Swagger UI. Every server the
// document names is replaced by this page's origin, so that "Try it out"
// sends its requests to this server and to no other host. This file is ours;
// the files in swagger-ui/ are the npm package's, never edited.
"use strict";

(function () {
  const root = document.getElementById("reference");

  // onThisOrigin maps a list of OpenAPI servers to this origin, keeping
  // each one's path (/v1, or / for the checks outside it). A server URL may
  // hold variables ({host}); their defaults stand in for them.
  function onThisOrigin(servers) {
    const paths = new Set();
    for (const s of servers) {
      let url = s.url;
      for (const [name, v] of Object.entries(s.variables || {})) {
        url = url.split("{" + name + "}").join(v.default);
      }
      paths.add(new URL(url, location.href).pathname.replace(/\/+$/, ""));
    }
    return [...paths].map((p) => ({ url: location.origin + p, description: "This server" }));
  }

  // sameOrigin rewrites the servers of the document, of each path and of
  // each operation. A document without servers means "/", as OpenAPI says.
  function sameOrigin(doc) {
    doc.servers = onThisOrigin(doc.servers && doc.servers.length ? doc.servers : [{ url: "/" }]);
    for (const item of Object.values(doc.paths || {})) {
      if (item.servers) item.servers = onThisOrigin(item.servers);
      for (const op of Object.values(item)) {
        if (op && typeof op === "object" && Array.isArray(op.servers)) op.servers = onThisOrigin(op.servers);
      }
    }
    return doc;
  }

  function fail(message) {
    root.textContent = message;
    root.setAttribute("role", "alert");
    console.error(message);
  }

  fetch(root.dataset.document, { headers: { Accept: "application/json" } })
    .then((res) => {
      if (!res.ok) throw new Error(`GET ${root.dataset.document} answered ${res.status}`);
      return res.json();
    })
    .then((doc) => {
      SwaggerUIBundle({
        spec: sameOrigin(doc),
        domNode: root,
        deepLinking: true,
        displayOperationId: true,
        displayRequestDuration: true,
        tryItOutEnabled: true,
        // The key typed into Authorize stays in this tab's memory, never in
        // the browser's storage.
        persistAuthorization: false,
        // A ?url= or ?configUrl= in the address cannot make the page load
        // another document or configuration.
        queryConfigEnabled: false,
        // The validator badge would send the document to validator.swagger.io.
        validatorUrl: null,
      });
    })
    .catch((err) => fail(`The API document could not be loaded: ${err.message}`));
})();
