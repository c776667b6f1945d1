/* fuzz_connect: libFuzzer target for the Connect process stream the e2b executor reads from
 * the network (lua/switchboard/exec/connect.lua, the envelope decoder, and the event reader of
 * lua/switchboard/exec/e2b_envd.lua behind it).
 *
 * The decoder is Lua, so this target embeds the interpreter like fuzz_exec_body.c. Each input
 * is used twice:
 *   1. as raw stream bytes, cut into pieces whose sizes come from the input's first bytes, fed
 *      to a decoder and to the executor's stream reader (its on_chunk, exactly as libcurl would
 *      call it). Whatever the split, the decoder must yield the same frames (or the same error)
 *      as when fed the whole input at once, never raise, never yield a payload over its limit,
 *      and account for every byte (frames + headers + partial() == bytes fed, until an error).
 *   2. as a recipe for a well-formed stream — envelopes around JSON events of every shape
 *      (start, data with base64 or not, end with odd exit codes, keepalive, unknown ones) and an
 *      end-of-stream frame with or without an error — so that mutation reaches the event layer
 *      behind the framing. libFuzzer sees which Lua lines and line-to-line edges an input
 *      reaches through the line hook of lua_coverage.c (as for fuzz_exec_body; -len_control=0
 *      lets inputs reach the recipe's length at once).
 * The reader must never raise; its output per stream never exceeds the policy's cap.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_connect
 * Run:   build-fuzz/tests/fuzz/fuzz_connect -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/connect */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local core = require('switchboard.core')\n"
    "local cjson = require('cjson')\n"
    "local connect = require('switchboard.exec.connect')\n"
    "local e2b = require('switchboard.exec.e2b_envd')\n"
    /* the registries fill the policy schema's lists of backends and fronts, as the binary does
     * before it loads a policy (tests/lua/support/helper.lua) */
    "require('switchboard.exec.backends')\n"
    "require('switchboard.fronts.registry')\n"
    "local snap = require('switchboard.policy').shipped()\n"
    "local CAP = snap.timeouts.process.max_output_bytes\n"
    "local MAX = 2048\n"
    /* whole-input decoding: frames or the error */
    "local function decode_whole(data)\n"
    "  local d = connect.decoder{ max_message = MAX }\n"
    "  local frames, err = d:feed(data)\n"
    "  return frames, err, d\n"
    "end\n"
    SB_FUZZ_LUA_SPLIT
    "local function check_stream(data, sizes)\n"
    "  local whole, werr = decode_whole(data)\n"
    "  local d = connect.decoder{ max_message = MAX }\n"
    "  local got, err, fed, framed = {}, nil, 0, 0\n"
    "  for _, piece in ipairs(split(data, sizes)) do\n"
    "    local ok, frames, ferr = pcall(d.feed, d, piece)\n"
    "    if not ok then error('feed raised: ' .. tostring(frames), 0) end\n"
    "    if not frames then err = ferr; break end\n"
    "    fed = fed + #piece\n"
    "    for _, f in ipairs(frames) do\n"
    "      assert(#f.data <= MAX, 'a payload over the limit')\n"
    "      got[#got + 1] = f; framed = framed + 5 + #f.data\n"
    "    end\n"
    "    assert(framed + d:partial() == fed, 'bytes unaccounted for')\n"
    "  end\n"
    "  if werr then\n"
    "    assert(err ~= nil, 'split input decoded where the whole failed: ' .. werr)\n"
    "  else\n"
    "    assert(err == nil, 'split input failed where the whole decoded: ' .. tostring(err))\n"
    "    assert(#got == #whole, 'frame count differs with the split')\n"
    "    for i = 1, #got do\n"
    "      assert(got[i].data == whole[i].data and got[i].flags == whole[i].flags, 'frame differs')\n"
    "    end\n"
    "  end\n"
    /* the executor's reader: on_chunk must never raise */
    "  local cut = core.signal()\n"
    "  local st = e2b.stream_reader(snap, cut)\n"
    "  for _, piece in ipairs(split(data, sizes)) do\n"
    "    local ok, e = pcall(st.on_chunk, piece)\n"
    "    if not ok then error('on_chunk raised: ' .. tostring(e), 0) end\n"
    "  end\n"
    "  assert(st.out_len.stdout <= CAP and st.out_len.stderr <= CAP, 'output over the cap')\n"
    "  if st.pid ~= nil then assert(math.type(st.pid) == 'integer' and st.pid > 0, 'bad pid') end\n"
    "end\n"
    /* a recipe: bytes → a well-formed stream of events */
    "local function recipe(data)\n"
    "  local i = 0\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function str() local n = byte() % 16; local s = data:sub(i + 1, i + n); i = i + n; return s end\n"
    "  local function num()\n"
    "    local k = byte() % 6\n"
    "    if k == 0 then return byte() elseif k == 1 then return -byte() elseif k == 2 then return byte() + 0.5\n"
    "    elseif k == 3 then return 2^53 elseif k == 4 then return str() end\n"
    "    return cjson.null\n"
    "  end\n"
    "  local out = {}\n"
    "  for _ = 1, byte() % 8 do\n"
    "    local k, ev = byte() % 7, nil\n"
    "    if k == 0 then ev = { start = { pid = num() } }\n"
    "    elseif k == 1 then ev = { data = { stdout = core.crypto.base64_encode(string.rep(str(), byte() % 40 + 1)) } }\n"
    "    elseif k == 2 then ev = { data = { stderr = byte() % 2 == 0 and str() or num() } }\n"
    "    elseif k == 3 then ev = { ['end'] = { exitCode = num(), exited = byte() % 2 == 0, status = str(), error = str() } }\n"
    "    elseif k == 4 then ev = { keepalive = {} }\n"
    "    elseif k == 5 then ev = str()\n"
    "    else ev = { [str()] = num() } end\n"
    "    local ok, text = pcall(cjson.encode, { event = ev })\n"
    "    out[#out + 1] = connect.encode(0, ok and text or '{}')\n"
    "  end\n"
    "  local trailer = byte() % 2 == 0 and '{}' or cjson.encode({ error = { code = str(), message = str() } })\n"
    "  out[#out + 1] = connect.encode(2, trailer)\n"
    "  return table.concat(out)\n"
    "end\n"
    "return function(data)\n"
    "  local sizes = {}\n"
    "  for k = 1, 4 do sizes[k] = (data:byte(k) or 7) % 13 + 1 end\n"
    "  check_stream(data:sub(5), sizes)\n"
    "  check_stream(recipe(data), sizes)\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_connect", harness)
