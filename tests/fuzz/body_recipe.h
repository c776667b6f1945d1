/* The body recipe both /exec body fuzzers share (fuzz_exec_body.c, fuzz_lane_body.c): Lua source
 * of `recipe(data)`, which turns the fuzzer's bytes into a JSON body of chosen field types — so
 * the checks behind the parsers see shaped bodies, not only bytes that are rarely JSON. */
#ifndef SB_FUZZ_BODY_RECIPE_H
#define SB_FUZZ_BODY_RECIPE_H

#define BODY_RECIPE_LUA \
    /* A recipe: bytes → a JSON value of a chosen type. */ \
    "local function recipe(data)\n" \
    "  local i = 0\n" \
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n" \
    "  local function str() local n = byte() % 24; local s = data:sub(i + 1, i + n); i = i + n; return s end\n" \
    /* names: mostly identifier characters, so env keys survive to the checks behind them */ \
    "  local ALPHA = 'ABCXYZabcxyz_019-= .'\n" \
    "  local function name()\n" \
    "    local n, out = byte() % 8, {}\n" \
    "    for j = 1, n do local b = byte(); out[j] = ALPHA:sub(b % #ALPHA + 1, b % #ALPHA + 1) end\n" \
    "    return table.concat(out)\n" \
    "  end\n" \
    "  local value\n" \
    "  value = function(depth)\n" \
    "    local k = byte() % 10\n" \
    "    if k == 0 then return str() elseif k == 1 then return (byte() - 128) * 1000.5\n" \
    "    elseif k == 2 then return byte() % 2 == 0 elseif k == 3 then return cjson.null\n" \
    "    elseif k == 4 then return byte() * 65536 * 65536 * 65536\n" \
    "    elseif k == 5 and depth < 4 then local t = {}; for _ = 1, byte() % 4 do t[#t + 1] = value(depth + 1) end; return t\n" \
    "    elseif k == 6 and depth < 4 then local t = {}; for _ = 1, byte() % 5 do t[name()] = value(depth + 1) end; return t\n" \
    "    elseif k == 7 then return name() .. '\\0' .. str()\n" \
    "    elseif k == 8 then return -0.0\n" \
    "    end\n" \
    "    return str()\n" \
    "  end\n" \
    "  local body = {}\n" \
    "  for _, field in ipairs({ 'command', 'timeoutMs', 'env', 'path', 'content', 'encoding', 'network' }) do\n" \
    "    if byte() % 3 ~= 0 then body[field] = value(0) end\n" \
    "  end\n" \
    "  if byte() % 2 == 0 then body.encoding = 'base64' end\n" \
    /* network: the two values it takes, and near misses (case, blank) */ \
    "  local n = byte() % 6\n" \
    "  if n < 4 then body.network = ({ 'host', 'none', 'NONE', '' })[n + 1] end\n" \
    "  local ok, text = pcall(cjson.encode, body)\n" \
    "  return ok and text or '{}'\n" \
    "end\n" \

#endif
