#!/usr/bin/env bash
# The Kubernetes manifests, validated offline (issue 14 item 6, issue 27): `npm ci` in
# deploy/kubernetes when needed, then check.mjs (the API's schemas from npm's kubernetes-models,
# strictly: no unknown field; agent-sandbox's kinds against our schema of the fields we use at
# the pinned version; plus the size, ceiling, selectors, probes, RBAC, runtime class,
# NetworkPolicy and warm pool) on npm's Node 22.
. "$(dirname "$0")/lib.sh"
cd "$DEPLOY_DIR/kubernetes"
command -v npm >/dev/null || skip "npm is not installed (scripts/bootstrap installs nodejs and npm)"
if [ ! -x node_modules/.bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund >npm-ci.log 2>&1 || { tail -20 npm-ci.log >&2; fail "npm ci in deploy/kubernetes"; }
  rm -f npm-ci.log
fi
exec node_modules/.bin/node check.mjs
