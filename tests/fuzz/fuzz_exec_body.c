/* fuzz_exec_body: libFuzzer target for the sandboxd request bodies (issue item 8's "malformed
 * JSON gets a 400 with a clear message", items 3 and 5's envFromRequest that never throws).
 *
 * The HTTP framing in front of these bytes (request line, headers, chunked bodies, limits) is
 * the request parser's, fuzzed by fuzz_http_request.c; this target starts where the handler
 * gets req.body. Each input is used twice:
 *   1. as the raw body of /exec, /read and /write (the first byte picks the route), and
 *   2. as a recipe for a well-formed JSON object whose fields (command, timeoutMs, env, path,
 *      content, encoding, network) take values of every JSON type — so that mutation reaches the
 *      semantic checks behind the JSON parser (lua-cjson is not coverage-instrumented).
 * The interpreter is not instrumented either: a line hook (lua_coverage.c) counts the Lua lines
 * and line-to-line edges each input reaches into libFuzzer's extra counters, so an input that
 * takes a new branch of routes.parse is kept (`ft:` grows; `cov:` counts C edges only).
 * The Lua side (below) calls switchboard.sandboxd.routes.parse with the shipped policy and
 * aborts on any raise or broken invariant: a parsed /exec has a non-empty NUL-free command, an
 * env of shell identifiers to NUL-free strings and a budget inside the policy's bounds; any
 * parsed body's network is absent, "host" or "none"; a
 * refusal has a 4xx status and a non-empty reason.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_exec_body
 * Run:   build-fuzz/tests/fuzz/fuzz_exec_body -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/exec_body
 * -len_control=0 lets inputs reach the recipe's length at once instead of growing from a few
 * bytes. (A planted bug — env values with a NUL kept — is found within seconds this way.) */
#include "body_recipe.h"
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local routes = require('switchboard.sandboxd.routes')\n"
    /* the registries fill the policy schema's lists of backends and fronts, as the binary does
     * before it loads a policy (tests/lua/support/helper.lua) */
    "require('switchboard.exec.backends')\n"
    "require('switchboard.fronts.registry')\n"
    "local snap = require('switchboard.policy').shipped()\n"
    "local bash = snap.timeouts.bash\n"
    "local ROUTES = { '/exec', '/read', '/write', '/healthz', '/exec/' }\n"
    "local function check(route, raw)\n"
    "  local ok, call, status, why = pcall(routes.parse, snap, route, raw)\n"
    "  if not ok then error('parse raised on ' .. route .. ': ' .. tostring(call), 0) end\n"
    "  if call == nil then\n"
    "    assert(math.type(status) == 'integer' and status >= 400 and status < 500, 'status')\n"
    "    assert(type(why) == 'string' and why:find('%S'), 'an empty reason')\n"
    "    return\n"
    "  end\n"
    "  assert(call.network == nil or call.network == 'host' or call.network == 'none', 'network')\n"
    "  if route == '/exec' then\n"
    "    assert(type(call.command) == 'string' and call.command:find('%S') and not call.command:find('\\0', 1, true))\n"
    "    assert(math.type(call.limit_ms) == 'integer', 'limit type')\n"
    "    assert(call.limit_ms >= bash.floor_ms and call.limit_ms <= bash.max_ms, 'limit range')\n"
    "    for k, v in pairs(call.env) do\n"
    "      assert(type(k) == 'string' and k:find('^[A-Z_][A-Z0-9_]*$'), 'env name')\n"
    "      assert(type(v) == 'string' and not v:find('\\0', 1, true), 'env value')\n"
    "    end\n"
    "  else\n"
    "    assert(type(call.path) == 'string' and call.path ~= '' and not call.path:find('\\0', 1, true))\n"
    "    if route == '/write' then\n"
    "      assert(type(call.bytes) == 'string' and #call.bytes <= snap.timeouts.sandbox.max_file_bytes)\n"
    "    end\n"
    "  end\n"
    "end\n"
    BODY_RECIPE_LUA
    "return function(data)\n"
    "  local route = ROUTES[(data:byte(1) or 0) % #ROUTES + 1]\n"
    "  check(route, data:sub(2))\n"
    "  local built = recipe(data)\n"
    "  for _, r in ipairs({ '/exec', '/read', '/write' }) do check(r, built) end\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_exec_body", harness)
