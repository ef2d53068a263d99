// Copies the files of the pinned swagger-ui-dist package that the API
// reference page serves into ../swagger-ui, unchanged, and records in
// ../vendored.json which package and version they come from, the package's
// integrity from package-lock.json, and each file's SHA-256. Run it through
// vendor.sh, which installs the package from the lockfile first.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkgName = "swagger-ui-dist";
// The browser bundle (React and every other dependency inside), its
// stylesheet, the page stylesheet of the package's own index.html, the icon,
// and the licence texts that must travel with them:
// Apache-2.0 asks for LICENSE and NOTICE, and the bundle's third-party
// notices are in its .LICENSE.txt. Nothing else of the package is served.
const files = [
  "swagger-ui-bundle.js",
  "swagger-ui-bundle.js.LICENSE.txt",
  "swagger-ui.css",
  "index.css",
  "favicon-32x32.png",
  "LICENSE",
  "NOTICE",
];

const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
const locked = lock.packages[`node_modules/${pkgName}`];
const installedDir = join(here, "node_modules", pkgName);
const installed = JSON.parse(readFileSync(join(installedDir, "package.json"), "utf8"));
if (installed.version !== locked.version) {
  throw new Error(`node_modules has ${pkgName} ${installed.version}, the lockfile pins ${locked.version}: run vendor.sh, which runs npm ci`);
}

const out = join(here, "..", "swagger-ui");
rmSync(out, { recursive: true, force: true });
mkdirSync(out);
const sums = {};
for (const name of files) {
  const body = readFileSync(join(installedDir, name));
  writeFileSync(join(out, name), body);
  sums[name] = createHash("sha256").update(body).digest("hex");
}
const record = {
  comment: "Written by reference/npm/vendor.sh; never edit by hand. The files in reference/swagger-ui are these files of this npm package, unchanged.",
  package: pkgName,
  version: locked.version,
  license: installed.license,
  integrity: locked.integrity,
  files: sums,
};
writeFileSync(join(here, "..", "vendored.json"), JSON.stringify(record, null, 2) + "\n");
console.log(`vendored ${pkgName}@${locked.version}: ${readdirSync(out).length} files in reference/swagger-ui`);
