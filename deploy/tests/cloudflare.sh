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
# The build stamp is set at build (wrangler.jsonc build.command → stamp.mjs → src/stamp.generated.ts
# from image/build.json, which build-image --context writes), never a --var at deploy.
grep -q -- '--var' wrangler.jsonc && fail "wrangler.jsonc still types a --var into the deploy command"
expect_match '"build": \{ "command": "node stamp\.mjs" \}' "$(cat wrangler.jsonc)" "wrangler deploy runs stamp.mjs before it bundles"
stamp_dir="$(mktemp -d)"
mkdir "$stamp_dir/image" "$stamp_dir/src"
cp stamp.mjs "$stamp_dir/"
"$build/switchboard" version --json >"$stamp_dir/image/build.json"
$node "$stamp_dir/stamp.mjs" || fail "stamp.mjs from an image context's build.json"
commit="$($node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).commit)' "$stamp_dir/image/build.json")"
expect_match "export const SANDBOX_BUILD = \"$commit\";" "$(cat "$stamp_dir/src/stamp.generated.ts")" \
  "stamp.mjs stamps the Worker with the image context's build ($commit)"
rm -rf "$stamp_dir"
$node stamp.mjs --commit "$commit" || fail "stamp.mjs --commit"
$node node_modules/.bin/tsc --noEmit -p . || fail "tsc --noEmit on the Worker"
ok "tsc --noEmit passes on the Worker and its test entry"
SWITCHBOARD_BIN="$build/switchboard" $node --test-reporter=spec test/worker.test.mjs \
  || fail "the Worker's tests in miniflare"
ok "the Worker's tests pass in miniflare against a real sandboxd"
echo "$checks passed, 0 failed"
