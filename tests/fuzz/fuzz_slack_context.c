/* fuzz_slack_context: libFuzzer target for what the Slack front reads from Slack's answers
 * when it gathers an agent run's context (lua/switchboard/fronts/slack/context.lua): the body
 * of conversations.replies (a thread's messages), of users.info (an author's name), and the
 * file objects on an event.
 *
 * The reader is Lua, so this target embeds the interpreter like fuzz_connect.c. Each input is
 * used twice, given to the reader as every one of those answers: as JSON text (lua-cjson
 * decodes it as the Web API client does; what does not decode is used as a string), and as a
 * recipe for a table of any shape built from the bytes (keys Slack uses, values of every type),
 * because the Lua side gives libFuzzer no coverage signal (hence -len_control=0). The reader must never raise,
 * never keep more messages or bytes than its bounds, name every file it skips, and never ask
 * anything of an address that is not Slack's (fronts/slack/file_url.lua). Nothing is fetched:
 * a file it would download gets a request function that answers with the input, or with a
 * redirect to some of its bytes.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_slack_context
 * Run:   build-fuzz/tests/fuzz/fuzz_slack_context -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/slack_context */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local context = require('switchboard.fronts.slack.context')\n"
    "local POL = { max_messages = 4, max_bytes = 300, max_files = 3, max_image_bytes = 256,\n"
    "              max_text_file_bytes = 64, max_redirects = 2 }\n"
    /* a recipe: bytes → a table of any shape (Lua gives libFuzzer no coverage signal, so the
     * shapes come from the bytes, not from the coverage-guided search) */
    "local ATOMS = { 'x', '', 0, 1, 1.5, -1, true, false, cjson.null, '0.5', '1e300', 'U1', 'image/png',\n"
    "                'text/plain', 'application/zip', 'http://x/f', 'http://x:80/f', 'https://files.slack.com/f',\n"
    "                'http://x@y/f', 'http://y/f', '/f', ('\\xC3'):rep(3) }\n"
    "local KEYS = { 'ts', 'user', 'text', 'bot_id', 'subtype', 'messages', 'profile', 'display_name',\n"
    "               'real_name', 'name', 'mimetype', 'size', 'url_private', 'url_private_download', 'ok' }\n"
    "local core = require('switchboard.core')\n"
    "local function generate(input)\n"
    /* the input stretched by SHA-256 so that a short input still picks rich shapes */
    "  local parts = { input }\n"
    "  for i = 1, 16 do parts[#parts + 1] = core.crypto.sha256(input .. i) end\n"
    "  local data = table.concat(parts)\n"
    "  local pos = 0\n"
    "  local function byte() pos = pos + 1; return data:byte(pos) or 0 end\n"
    "  local function any(depth)\n"
    "    local b = byte()\n"
    "    if depth > 3 or b % 3 ~= 0 then\n"
    "      local a = (b // 3) % (#ATOMS + 1)\n"
    "      if a == #ATOMS then local s = data:sub(pos + 1, pos + 8); pos = pos + 8; return s end\n"
    "      return ATOMS[a + 1]\n"
    "    end\n"
    "    local t = {}\n"
    "    for i = 1, byte() % 4 do t[i] = any(depth + 1) end\n"
    "    for _ = 1, byte() % 6 do t[KEYS[byte() % #KEYS + 1]] = any(depth + 1) end\n"
    "    return t\n"
    "  end\n"
    "  local function fields(keys)\n"
    "    local m = {}\n"
    "    for _, k in ipairs(keys) do if byte() % 4 ~= 0 then m[k] = any(2) end end\n"
    "    return m\n"
    "  end\n"
    "  local doc = { ok = byte() % 8 ~= 0, messages = {}, user = any(1), error = any(3) }\n"
    "  for i = 1, byte() % 6 do\n"
    "    doc.messages[i] = byte() % 5 == 0 and any(1) or fields({ 'ts', 'user', 'text', 'bot_id', 'subtype' })\n"
    "  end\n"
    "  for i = 1, byte() % 5 do\n"
    "    doc[i] = byte() % 5 == 0 and any(1)\n"
    "      or fields({ 'name', 'title', 'mimetype', 'size', 'url_private', 'url_private_download' })\n"
    "  end\n"
    "  if byte() % 7 == 0 then return any(0) end\n"
    "  return doc\n"
    "end\n"
    "local file_url = require('switchboard.fronts.slack.file_url')\n"
    "local function check(data, doc)\n"
    "  local api = { token = 'xoxb-fuzz', deadline_ms = 1000, url = 'http://x/api',\n"
    "    call = function(_, method) return doc end }\n"
    /* the answer: the input, or a redirect to the input's own bytes (allowed or not); nothing
     * is ever asked of an address that is not Slack's */
    "  local origins = file_url.origins(api.url)\n"
    "  local function request(a) \n"
    "    assert(file_url.allowed(a.url, origins), 'a request to ' .. a.url)\n"
    "    if #data > 0 and data:byte(1) % 4 == 0 then return 302, { location = data:sub(2, 40) }, '' end\n"
    "    return 200, { ['content-type'] = 'application/octet-stream' }, data\n"
    "  end\n"
    "  local o = { channel = 'C1', thread_ts = '1.0', ask_ts = '1e10', names = {}, first = true,\n"
    "              request = request, files = doc }\n"
    "  local block, why, n = context.thread_block(api, POL, o)\n"
    "  if block then\n"
    "    assert(block.type == 'text' and type(block.text) == 'string')\n"
    "    assert(n >= 1 and n <= POL.max_messages, 'over max_messages')\n"
    "    assert(#block.text <= POL.max_bytes + 120, 'over max_bytes')\n"
    "  else\n"
    "    assert(why == nil or type(why) == 'string')\n"
    "  end\n"
    "  local blocks, notes = context.gather(api, POL, o)\n"
    "  assert(type(blocks) == 'table' and type(notes) == 'table')\n"
    "  for _, b in ipairs(blocks) do\n"
    "    if b.type == 'image' then assert(#b.source.data <= 4 * ((POL.max_image_bytes + 2) // 3)) end\n"
    "    if b.type == 'text' and b.text:find('^Attached file') then assert(#b.text <= POL.max_text_file_bytes + 400) end\n"
    "  end\n"
    "  for _, n2 in ipairs(notes) do assert(type(n2) == 'string' and n2 ~= '') end\n"
    "end\n"
    "return function(data)\n"
    "  local ok, doc = pcall(cjson.decode, data)\n"
    "  check(data, ok and doc or data)\n"
    "  check(data, generate(data))\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_slack_context", harness)
