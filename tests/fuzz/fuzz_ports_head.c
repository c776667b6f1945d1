/* fuzz_ports_head: libFuzzer target for sandboxd's port proxy's reading of an upstream's answer
 * head (lua/switchboard/sandboxd/ports.lua parse_head). Those bytes come from a server inside a
 * sandbox instance, so nothing in them is trusted. The Lua side aborts on any raise or broken
 * invariant, for the input whole and for every prefix at a few split points (the head arrives
 * in pieces): a prefix without the blank line is "not yet" (nil) or over the bound (false); a
 * parsed head has a status 100-999, a head_len inside the input that ends at its blank line,
 * lower-cased token names with values free of CR, LF and NUL, and a Content-Length of digits
 * only; a refusal has a reason. What a longer input adds never changes a parsed head.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_ports_head
 * Run:   build-fuzz/tests/fuzz/fuzz_ports_head -max_total_time=60 tests/fuzz/corpus/ports_head */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local ports = require('switchboard.sandboxd.ports')\n"
    "local MAX = 512\n"
    "local function check(bytes)\n"
    "  local ok, head, why = pcall(ports.parse_head, bytes, MAX)\n"
    "  if not ok then error('parse_head raised: ' .. tostring(head), 0) end\n"
    "  if head == nil then\n"
    "    assert(not bytes:find('\\r\\n\\r\\n', 1, true) and #bytes <= MAX, 'nil for a whole head')\n"
    "    return nil\n"
    "  end\n"
    "  if head == false then assert(type(why) == 'string' and why ~= '', 'no reason'); return false end\n"
    "  assert(math.type(head.status) == 'integer' and head.status >= 100 and head.status <= 999, 'status')\n"
    "  assert(head.head_len <= #bytes and head.head_len <= MAX, 'head_len')\n"
    "  assert(bytes:sub(head.head_len - 3, head.head_len) == '\\r\\n\\r\\n', 'head end')\n"
    "  for name, value in pairs(head.headers) do\n"
    "    assert(name == name:lower() and name:find(\"^[!#$%%&'*+.^_`|~%w-]+$\"), 'name')\n"
    "    assert(not value:find('[%z\\r\\n]'), 'value')\n"
    "  end\n"
    "  local cl = head.headers['content-length']\n"
    "  assert(cl == nil or cl:find('^%d+$'), 'content-length')\n"
    "  return head\n"
    "end\n"
    "return function(data)\n"
    "  local whole = check(data)\n"
    "  for _, cut in ipairs({ 1, 7, #data // 2, #data - 1 }) do\n"
    "    if cut > 0 and cut < #data then\n"
    "      local part = check(data:sub(1, cut))\n"
    "      if part then\n"
    "        assert(whole and whole.head_len == part.head_len and whole.status == part.status, 'a prefix parsed otherwise')\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_ports_head", harness)
