#!/usr/bin/env bash
# Regenerates reference/swagger-ui/ and reference/vendored.json from the
# swagger-ui-dist package that package-lock.json pins. This is the only way
# those files change: they are never edited by hand (TestReferenceVendoredFiles
# checks them against vendored.json).
#
# To move to another version: npm install --ignore-scripts --save-exact
# swagger-ui-dist@VERSION here, then run this script.
set -euo pipefail
cd "$(dirname "$0")"
# swagger-ui-dist depends on @scarf/scarf, whose install script reports the
# installation to scarf.sh. --ignore-scripts keeps it from running, and the
# variable turns it off should it run anyway.
export SCARF_ANALYTICS=false
npm ci --ignore-scripts --no-audit --no-fund
node vendor.mjs
