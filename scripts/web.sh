#!/usr/bin/env bash
# make web: the front end (web/) built into web/dist, which `onsale serve --web-dir` serves:
# npm packages from the committed lockfile (installed again only when it changes; npm's cache
# outside the repo), the clients generated from proto/ and from the OpenAPI document `onsale
# openapi` prints (ONSALE_BIN, or the debug build through cargo), type-checked, bundled by
# Vite. Prints the built directory.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT/web"
key=$(sha256sum package-lock.json | cut -c1-16)
if [ "$(cat node_modules/.onsale-lock 2>/dev/null)" != "$key" ]; then
  echo "installing the front end's npm packages" >&2
  npm ci --no-audit --no-fund --cache "${ONSALE_NPM_CACHE:-$HOME/.cache/onsale/npm}" >&2
  echo "$key" >node_modules/.onsale-lock
fi
mkdir -p src/gen
if [ -n "${ONSALE_BIN:-}" ]; then
  "$ONSALE_BIN" openapi >src/gen/openapi.json
else
  (cd "$ROOT" && cargo run -q -p onsale-server --bin onsale -- openapi) >src/gen/openapi.json
fi
npm run -s build >&2
echo "$ROOT/web/dist"
