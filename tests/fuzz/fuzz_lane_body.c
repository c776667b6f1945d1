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
    /* A recipe: bytes → a JSON value of a chosen type. */
    "local function recipe(data)\n"
    "  local i = 0\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function str() local n = byte() % 24; local s = data:sub(i + 1, i + n); i = i + n; return s end\n"
    /* names: mostly identifier characters, so env keys survive to the checks behind them */
    "  local ALPHA = 'ABCXYZabcxyz_019-= .'\n"
    "  local function name()\n"
    "    local n, out = byte() % 8, {}\n"
    "    for j = 1, n do local b = byte(); out[j] = ALPHA:sub(b % #ALPHA + 1, b % #ALPHA + 1) end\n"
    "    return table.concat(out)\n"
    "  end\n"
    "  local value\n"
    "  value = function(depth)\n"
    "    local k = byte() % 10\n"
    "    if k == 0 then return str() elseif k == 1 then return (byte() - 128) * 1000.5\n"
    "    elseif k == 2 then return byte() % 2 == 0 elseif k == 3 then return cjson.null\n"
    "    elseif k == 4 then return byte() * 65536 * 65536 * 65536\n"
    "    elseif k == 5 and depth < 4 then local t = {}; for _ = 1, byte() % 4 do t[#t + 1] = value(depth + 1) end; return t\n"
    "    elseif k == 6 and depth < 4 then local t = {}; for _ = 1, byte() % 5 do t[name()] = value(depth + 1) end; return t\n"
    "    elseif k == 7 then return name() .. '\\0' .. str()\n"
    "    elseif k == 8 then return -0.0\n"
    "    end\n"
    "    return str()\n"
    "  end\n"
    "  local body = {}\n"
    "  for _, field in ipairs({ 'command', 'timeoutMs', 'env', 'path', 'content', 'encoding', 'network' }) do\n"
    "    if byte() % 3 ~= 0 then body[field] = value(0) end\n"
    "  end\n"
    "  if byte() % 2 == 0 then body.encoding = 'base64' end\n"
    /* network: the two values it takes, and near misses (case, blank) */
    "  local n = byte() % 6\n"
    "  if n < 4 then body.network = ({ 'host', 'none', 'NONE', '' })[n + 1] end\n"
    "  local ok, text = pcall(cjson.encode, body)\n"
    "  return ok and text or '{}'\n"
    "end\n"
    "return function(data)\n"
    "  check(data)\n"
    "  check(recipe(data))\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_lane_body", harness)
