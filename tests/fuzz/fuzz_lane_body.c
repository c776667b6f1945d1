/* fuzz_lane_body: libFuzzer target for sandboxd's exec lane reading an /exec body
 * (src/lane/exec_lane.c through core.exec_lane.decide; docs/sandboxd.md "The exec lane").
 *
 * The lane takes a body only when it can read it exactly as the Lua path would; this holds it to
 * that: for every input (as a raw body, and as a recipe for a well-formed JSON object whose
 * fields take values of every type, as fuzz_exec_body builds them), whenever the lane takes the
 * body, routes.parse must take it too, with the same command, clamped budget and env, no base,
 * and no client mistake. Any disagreement, or a raise, aborts.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_lane_body
 * Run:   build-fuzz/tests/fuzz/fuzz_lane_body -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/lane_body */
#include "body_recipe.h"
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local core = require('switchboard.core')\n"
    "local routes = require('switchboard.sandboxd.routes')\n"
    "require('switchboard.exec.backends')\n"
    "require('switchboard.fronts.registry')\n"
    "local snap = require('switchboard.policy').shipped()\n"
    "local t = snap.timeouts\n"
    "local P = { floor_ms = t.bash.floor_ms, max_ms = t.bash.max_ms, default_ms = t.sandbox.default_budget_ms,\n"
    "  network = snap.isolation.network, instance_network = snap.isolation.network }\n"
    "local function same(a, b)\n"
    "  for k, v in pairs(a) do if b[k] ~= v then return false end end\n"
    "  for k, v in pairs(b) do if a[k] ~= v then return false end end\n"
    "  return true\n"
    "end\n"
    "local function check(body)\n"
    "  local lane = core.exec_lane.decide(body, P)\n"
    "  if lane == nil then return end\n"
    "  local call = routes.parse(snap, '/exec', body)\n"
    "  assert(call, 'the lane took a body routes.parse refuses')\n"
    "  assert(call.command == lane.command, 'command')\n"
    "  assert(call.limit_ms == lane.limit_ms, 'limit_ms')\n"
    "  assert(same(call.env, lane.env), 'env')\n"
    "  assert(call.base == nil and call.base_since == nil, 'base')\n"
    "  assert((call.network or P.network) == P.instance_network, 'network')\n"
    "  assert(routes.client_mistake(call.command, call.env) == nil, 'client mistake')\n"
    "end\n"
    BODY_RECIPE_LUA
    "return function(data)\n"
    "  check(data)\n"
    "  check(recipe(data))\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_lane_body", harness)
