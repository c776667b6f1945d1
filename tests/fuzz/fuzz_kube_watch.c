/* fuzz_kube_watch: libFuzzer target for what the Kubernetes API server sends the kubernetes
 * executor (lua/switchboard/exec/kubernetes_watch.lua): the watch event stream (JSON lines in
 * any split), and the SandboxClaim and Status objects read out of it and out of every answer.
 *
 * Each input is used twice:
 *   1. as raw stream bytes, cut into pieces whose sizes come from the input's first bytes: the
 *      decoder must give the same events (or fail) as with the whole input, never raise, never
 *      hold more than its line limit, and claim_state / status_of / resource_version must take
 *      every object it yields without raising;
 *   2. as a recipe for a well-formed stream of events whose objects are claims of every shape
 *      (conditions, podIPs, deletion, labels of odd types), so mutation reaches the readers.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_kube_watch
 * Run:   build-fuzz/tests/fuzz/fuzz_kube_watch -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/kube_watch */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local kw = require('switchboard.exec.kubernetes_watch')\n"
    "local MAX = 1024\n"
    "local function read_object(o)\n"
    "  local s = kw.claim_state(o)\n"
    "  if s then\n"
    "    assert(type(s.ready) == 'boolean', 'ready is not a boolean')\n"
    "    if s.ip ~= nil then assert(kw.is_ip(s.ip) and not s.ip:find('[/@?#]'), 'an IP that is not one') end\n"
    "    if s.rv ~= nil then assert(#s.rv <= 64 and not s.rv:find('[&= ]'), 'a resourceVersion unfit for a query') end\n"
    "  end\n"
    "  local st = kw.status_of(o)\n"
    "  if st and st.code ~= nil then assert(math.type(st.code) == 'integer', 'a code that is not an integer') end\n"
    "end\n"
    SB_FUZZ_LUA_SPLIT
    "local function check_stream(data, sizes)\n"
    "  local whole = kw.decoder{ max_line = MAX }\n"
    "  local wev, werr = whole:feed(data)\n"
    "  local d = kw.decoder{ max_line = MAX }\n"
    "  local got, err = {}, nil\n"
    "  for _, piece in ipairs(split(data, sizes)) do\n"
    "    local ok, evs, ferr = pcall(d.feed, d, piece)\n"
    "    if not ok then error('feed raised: ' .. tostring(evs), 0) end\n"
    "    if not evs then err = ferr; break end\n"
    "    assert(d:partial() <= MAX, 'more buffered than the line limit')\n"
    "    for _, ev in ipairs(evs) do\n"
    "      assert(kw.TYPES[ev.type] and type(ev.object) == 'table', 'a malformed event passed')\n"
    "      read_object(ev.object)\n"
    "      got[#got + 1] = ev\n"
    "    end\n"
    "  end\n"
    "  if werr then\n"
    "    assert(err ~= nil, 'split input decoded where the whole failed: ' .. werr)\n"
    "  else\n"
    "    assert(err == nil, 'split input failed where the whole decoded: ' .. tostring(err))\n"
    "    assert(#got == #wev, 'event count differs with the split')\n"
    "    for i = 1, #got do assert(got[i].type == wev[i].type, 'event differs') end\n"
    "  end\n"
    "end\n"
    "local function recipe(data)\n"
    "  local i = 0\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function str() local n = byte() % 16; local s = data:sub(i + 1, i + n); i = i + n; return s end\n"
    "  local function any()\n"
    "    local k = byte() % 6\n"
    "    if k == 0 then return str() elseif k == 1 then return byte() elseif k == 2 then return { str() }\n"
    "    elseif k == 3 then return cjson.null elseif k == 4 then return byte() % 2 == 0 end\n"
    "    return { [str()] = str() }\n"
    "  end\n"
    "  local TYPES = { 'ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR' }\n"
    "  local out = {}\n"
    "  for _ = 1, byte() % 6 do\n"
    "    local obj = { kind = byte() % 3 == 0 and 'Status' or 'SandboxClaim', code = any(), reason = any(),\n"
    "      metadata = { name = any(), resourceVersion = byte() % 2 == 0 and tostring(byte()) or any(),\n"
    "        labels = any(), deletionTimestamp = any() },\n"
    "      status = { conditions = { { type = byte() % 2 == 0 and 'Ready' or str(), status = byte() % 2 == 0 and 'True' or any(),\n"
    "        reason = any(), message = any() } },\n"
    "        sandbox = { name = any(), podIPs = { byte() % 2 == 0 and ('10.0.' .. byte() .. '.' .. byte()) or any() } } } }\n"
    "    local ok, text = pcall(cjson.encode, { type = TYPES[byte() % 5 + 1], object = obj })\n"
    "    out[#out + 1] = (ok and text or '{}') .. '\\n'\n"
    "  end\n"
    "  return table.concat(out)\n"
    "end\n"
    "return function(data)\n"
    "  local sizes = {}\n"
    "  for k = 1, 4 do sizes[k] = (data:byte(k) or 7) % 13 + 1 end\n"
    "  check_stream(data:sub(5), sizes)\n"
    "  check_stream(recipe(data), sizes)\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_kube_watch", harness)
