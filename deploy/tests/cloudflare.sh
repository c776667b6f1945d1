#!/usr/bin/env bash
# The sandbox Worker (issue 14 item 5): `npm ci` when node_modules is missing or older than the
# lockfile, then tsc, then the Worker in Cloudflare's local runtime (miniflare/workerd) in front
# of a real sandboxd (deploy/cloudflare/test/worker.test.mjs), on npm's Node 22.
#   deploy/tests/cloudflare.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"
build="$(cd "${1:?BUILD_DIR}" && pwd)"
cd "$DEPLOY_DIR/cloudflare"
command -v npm >/dev/null || skip "npm is not installed (scripts/bootstrap installs nodejs and npm)"
if [ ! -x node_modules/.bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund >npm-ci.log 2>&1 || { tail -20 npm-ci.log >&2; fail "npm ci in deploy/cloudflare"; }
  rm -f npm-ci.log
fi
node=node_modules/.bin/node
expect_match '^v22\.' "$($node --version)" "npm's Node 22 runs the Worker's tools"
$node node_modules/.bin/tsc --noEmit -p . || fail "tsc --noEmit on the Worker"
ok "tsc --noEmit passes on the Worker and its test entry"
SWITCHBOARD_BIN="$build/switchboard" $node --test-reporter=spec test/worker.test.mjs \
  || fail "the Worker's tests in miniflare"
ok "the Worker's tests pass in miniflare against a real sandboxd"
echo "$checks passed, 0 failed"
