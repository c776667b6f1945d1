-- Load a policy directory into one frozen snapshot, or refuse it with file:line messages.
--
-- Each policies/<name>.lua runs as load(src, "@policies/<name>.lua", "t", env) in a fresh
-- environment holding copies of string, table, math and utf8, a few base functions and the
-- policy helpers (second, minute, hour, KiB, MiB, rule). Reading a name that is neither a
-- helper nor a setting of that file, or writing a name that is not a setting of that file,
-- is an error naming file:line. The chunk runs under an instruction budget.
--
-- loader.load(dir, opts) → snapshot | nil, {"policies/x.lua:LINE: message", ...}
-- The snapshot: {version = <sha256 hex of the files>, dir, checked = {...},
--                agents = …, timeouts = …, errors = …, execution = …, github = …}
-- where each file's part holds the settings it set (plus a few derived values such as
-- timeouts.sandbox.sleep_after_ms). Every table in it is read-only.

local rule = require("switchboard.policy.rule")
local schema = require("switchboard.policy.schema")

local M = {}

-- The one place the bounds on policy code are set: instructions (count hook), bytes it may
-- allocate (counted by the engine's allocator while it runs; this also bounds the time spent
-- building strings), CPU time (a backstop for instructions that each do much C work; not wall
-- time, so that a busy host does not refuse a valid policy), and the
-- worst-case steps of one pattern match (a single C call the hook cannot interrupt).
M.limits = {
  load_instructions = 10 * 1000 * 1000, -- running one policy file
  hook_instructions = 100 * 1000,       -- one decision (policy.decide)
  load_memory_bytes = 64 * 1024 * 1024,
  hook_memory_bytes = 8 * 1024 * 1024,
  load_time_ms = 3000,                  -- a backstop: the other bounds trip first
  hook_time_ms = 250,
  max_file_bytes = 1024 * 1024,
  max_string_rep_bytes = 1024 * 1024,   -- string.rep inside a policy
  -- One long C call (find, match, gmatch, gsub, rep, format, byte, char, upper, lower,
  -- reverse, table.concat, sort, insert, remove, move, unpack): its worst case in steps (a byte
  -- compared or copied, a pattern item tried at a position) is estimated before it runs. Past
  -- call_steps it is refused; otherwise it is charged to the running call's instruction budget
  -- at steps_per_instruction, so that many long calls cannot add up past it either (the count
  -- hook sees only Lua instructions). 16 steps ≈ one Lua instruction's time (measured: a
  -- pattern step 1-4 ns, an instruction 10-40 ns), so a decision's 100,000 instructions allow
  -- 1.6 million steps of C work (a few ms) and a file's 10 million, 160 million (under a
  -- second, under load_time_ms).
  call_steps = 10 * 1000 * 1000,
  steps_per_instruction = 16,
}

M.FILES = schema.order

---------------------------------------------------------------------------------------------
-- The engine, when it is there.

local core_cache
local function core()
  if core_cache == nil then
    local ok, mod = pcall(require, "switchboard.core")
    core_cache = ok and mod or false
  end
  return core_cache or nil
end
M.core = core

function M.default_hash(bytes)
  local c = core()
  if not c then
    error("switchboard.core is not available: cannot hash the policy set (pass opts.hash)", 2)
  end
  return c.crypto.hex(c.crypto.sha256(bytes))
end

-- The stand-in without the engine: fn(...) under an instruction budget alone (a number, or
-- a limits table's instructions); never lets it yield or loop forever.
-- Returns true, ... or false, message. M.bounded uses core.call_bounded when it can.
local function lua_bounded(budget, fn, ...)
  if type(budget) == "table" then budget = budget.instructions end
  local co = coroutine.create(fn)
  debug.sethook(co, function()
    local info = debug.getinfo(2, "Sl")
    local where = info and info.currentline and info.currentline > 0
      and string.format("%s:%d: ", info.source:gsub("^@", ""), info.currentline) or ""
    error(where .. "instruction budget exhausted", 0)
  end, "", budget)
  local res = table.pack(coroutine.resume(co, ...))
  if res[1] and coroutine.status(co) ~= "dead" then
    return false, "policy code tried to yield"
  end
  if not res[1] then
    local msg = res[2]
    if type(msg) ~= "string" then msg = tostring(msg) end
    return false, debug.traceback(co, msg)
  end
  return table.unpack(res, 1, res.n)
end
M.lua_bounded = lua_bounded

---------------------------------------------------------------------------------------------
-- The string library policy code sees, also through the string metatable while it runs
-- (("x"):rep(...) reaches these, and ("x").dump is nil). Checks raise at the caller's line.

local s_rep, s_find, s_match, s_gmatch, s_gsub, s_byte =
  string.rep, string.find, string.match, string.gmatch, string.gsub, string.byte

local function checked_rep(s, n, sep)
  local size = #tostring(s) * (tonumber(n) or 0) + #(sep or "") * math.max((tonumber(n) or 0) - 1, 0)
  if size > M.limits.max_string_rep_bytes then
    error(string.format("string.rep would build %d bytes (limit %d)", size, M.limits.max_string_rep_bytes), 2)
  end
  return s_rep(s, n, sep)
end

local s_rep, s_find, s_match, s_gmatch, s_gsub, s_byte, s_format =
  string.rep, string.find, string.match, string.gmatch, string.gsub, string.byte, string.format
local s_char, s_upper, s_lower, s_reverse = string.char, string.upper, string.lower, string.reverse
local t_concat, t_sort, t_insert, t_remove, t_move, t_unpack =
  table.concat, table.sort, table.insert, table.remove, table.move, table.unpack
local CALL_STEPS = 16 -- a call from C into Lua (a comparator, a replacement function) or a table slot

-- Charges `steps` of C work that the caller's caller is about to start (raising at that
-- policy line, level 3 from here): refused past limits.call_steps, or past what the running
-- bounded call has left (core.bounded_charge; without the engine only the cap applies).
local function charge(what, steps, level)
  level = level or 3
  local cap = M.limits.call_steps
  if not (steps <= cap) then
    error(s_format("%s may take %.3g steps (limit %d per call)", what, steps, cap), level)
  end
  local c = core()
  if c and c.bounded_charge then
    local ok, left, late = c.bounded_charge(steps / M.limits.steps_per_instruction)
    if late then error("CPU time budget exhausted before " .. what, level) end
    if not ok then
      error(s_format("%s may take %.3g steps, more than the %d instructions (%.3g steps) left of this budget",
        what, steps, left, left * M.limits.steps_per_instruction), level)
    end
  end
end

local function len_of(s)
  local t = type(s)
  if t == "string" then return #s end
  if t == "number" then return #tostring(s) end
  return 0 -- not a string: the real function raises on it
end

local function count(n) n = tonumber(n) or 0; return n > 0 and n or 0 end

local function checked_rep(s, n, sep)
  local size = len_of(s) * count(n) + len_of(sep) * math.max(count(n) - 1, 0)
  if size > M.limits.max_string_rep_bytes then
    error(s_format("string.rep would build %d bytes (limit %d)", size, M.limits.max_string_rep_bytes), 2)
  end
  charge("string.rep", size)
  return s_rep(s, n, sep)
end

local PCT, LBRACK, RBRACK, CARET, LPAREN, RPAREN, DOLLAR = 37, 91, 93, 94, 40, 41, 36
local REPEAT = { [42] = true, [43] = true, [45] = true } -- * + -

-- The index just past the set that opens at i ("[...]", "]" first is literal). A malformed
-- set ends the pattern: the real function then says what is wrong with it.
local function set_end(p, i)
  local j = i + 1
  if s_byte(p, j) == CARET then j = j + 1 end
  repeat
    if j > #p then return #p + 1 end
    local c = s_byte(p, j)
    j = j + ((c == PCT) and 2 or 1)
  until s_byte(p, j) == RBRACK
  return j + 1
end

-- How many items of `p` can each match a varying length (x*, x+, x-, %b, %1...) and how many
-- are optional (x?). An item with nothing after it but ")" is not counted: its match never
-- backtracks.
local function pattern_shape(p, from)
  local vars, opts = 0, 0
  local i, n = from, #p
  while i <= n do
    local c = s_byte(p, i)
    local stop -- index past a single-character class, or nil for other items
    if c == LPAREN or c == RPAREN or (c == DOLLAR and i == n) then
      i = i + 1
    elseif c == PCT then
      local d = s_byte(p, i + 1)
      if d == 98 then -- %bxy
        vars, i = vars + 1, i + 4
      elseif d == 102 then -- %f[set]
        i = set_end(p, i + 2)
      elseif d and d >= 48 and d <= 57 then -- back-reference
        vars, i = vars + 1, i + 2
      else
        stop = i + 2
      end
    elseif c == LBRACK then
      stop = set_end(p, i)
    else
      stop = i + 1
    end
    if stop then
      local q = s_byte(p, stop)
      if REPEAT[q] then
        local rest = stop + 1
        while s_byte(p, rest) == RPAREN do rest = rest + 1 end
        if rest <= n then vars = vars + 1 end
        i = stop + 1
      elseif q == 63 then -- ?
        opts, i = opts + 1, stop + 1
      else
        i = stop
      end
    end
  end
  return vars, opts
end

-- The worst case of a match of pattern `p` over `s` in steps: every start (one when
-- anchored), at each every varying item may try every length and every optional item both
-- ways, and each attempt walks at most the whole pattern (#p: a set "[...]" is walked byte by
-- byte). A plain find is (n - m + 1) starts of up to m compared bytes: n·m.
local function pattern_cost(s, p, can_anchor, plain)
  local n, m = len_of(s) + 1, math.max(len_of(p), 1)
  if plain then return n * m end
  if type(p) ~= "string" then return n end
  local anchored = can_anchor and s_byte(p, 1) == CARET
  local vars, opts = pattern_shape(p, anchored and 2 or 1)
  return (anchored and 1 or n) * n ^ vars * 2 ^ opts * m
end

local function what_pattern(fname, s, p, plain)
  if plain then
    return s_format("string.%s: a plain search for %d bytes in %d bytes", fname, len_of(p), len_of(s))
  end
  local shown = type(p) == "string" and (#p > 40 and p:sub(1, 40) .. "..." or p) or tostring(p)
  return s_format("string.%s: pattern %q over %d bytes", fname, shown, len_of(s))
end

local function charge_pattern(fname, s, p, can_anchor, plain, calls)
  local steps = pattern_cost(s, p, can_anchor, plain)
  if calls then steps = steps + (len_of(s) + 1) * CALL_STEPS end
  -- a simpler message than charge's for the common case, the same refusal
  if steps > M.limits.call_steps then
    error(s_format("%s may take %.3g steps (limit %d): %s", what_pattern(fname, s, p, plain), steps,
      M.limits.call_steps, plain and "search less text, or for less" or "use a plain find or a simpler pattern"), 3)
  end
  charge(what_pattern(fname, s, p, plain), steps, 4)
end

local function checked_find(s, p, init, plain)
  charge_pattern("find", s, p, true, plain)
  return s_find(s, p, init, plain)
end
local function checked_match(s, p, init)
  charge_pattern("match", s, p, true)
  return s_match(s, p, init)
end
local function checked_gmatch(s, p, init)
  charge_pattern("gmatch", s, p, false) -- the whole iteration, charged up front
  return s_gmatch(s, p, init)
end
local function checked_gsub(s, p, repl, n)
  local tr = type(repl)
  charge_pattern("gsub", s, p, true, false, tr == "function" or tr == "table")
  return s_gsub(s, p, repl, n)
end

-- The rest of the string functions whose work grows with their input (the output is also
-- bounded by the memory budget; the time to make it is charged here).
local function checked_format(fmt, ...)
  local steps = len_of(fmt) + select("#", ...) * CALL_STEPS
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    steps = steps + 4 * len_of(v) -- %q may escape each byte into four
  end
  charge("string.format", steps)
  return s_format(fmt, ...)
end
local function checked_byte(s, i, j)
  local n = len_of(s)
  local from, to = math.tointeger(i) or 1, math.tointeger(j) or math.tointeger(i) or 1
  if from < 0 then from = n + from + 1 end
  if to < 0 then to = n + to + 1 end
  charge("string.byte", math.max(math.min(to, n) - math.max(from, 1) + 1, 0))
  return s_byte(s, i, j)
end
local function checked_char(...)
  charge("string.char", select("#", ...))
  return s_char(...)
end
local function linear(fname, f)
  return function(s, ...)
    charge("string." .. fname, len_of(s))
    return f(s, ...)
  end
end

-- A copy of a standard library with its charged calls in place of the real ones (and without
-- the ones a policy may not have).
local function checked_library(lib, checked, without)
  local out = {}
  for k, v in pairs(lib) do
    if not (without and without[k]) then out[k] = v end
  end
  for k, f in pairs(checked) do out[k] = f end
  return out
end

local policy_string_lib = checked_library(string, {
  rep = checked_rep, find = checked_find, match = checked_match, gmatch = checked_gmatch,
  gsub = checked_gsub, format = checked_format, byte = checked_byte, char = checked_char,
  upper = linear("upper", s_upper), lower = linear("lower", s_lower), reverse = linear("reverse", s_reverse),
}, { dump = true })

-- The table library policy code sees: the calls that walk a range of slots are charged for it
-- (table.move({}, 1, 1e9, 1) walks a billion empty slots without allocating a byte).
local function span(i, j) i, j = tonumber(i) or 1, tonumber(j) or 0; return j >= i and j - i + 1 or 0 end
local function length(t) return type(t) == "table" and #t or 0 end

local function checked_concat(t, sep, i, j)
  -- the bytes it copies are bounded by the memory budget (the result is one allocation)
  local n = span(i or 1, j or length(t))
  charge("table.concat", n * (CALL_STEPS + len_of(sep)))
  return t_concat(t, sep, i, j)
end

-- Sorting n slots compares about n·log2(n) pairs (a few times that at worst); without a
-- comparator each comparison of two strings walks them (strcoll), so the longest counts.
local function checked_sort(t, comp)
  local n = length(t)
  local longest = 0
  if comp == nil and n <= M.limits.call_steps / CALL_STEPS then
    for k = 1, n do
      local v = t[k]
      if type(v) == "string" and #v > longest then longest = #v end
    end
  end
  local compares = 2 * n * math.max(math.ceil(math.log(n + 1, 2)), 1)
  charge("table.sort", compares * (CALL_STEPS + longest))
  return t_sort(t, comp)
end
local function checked_insert(t, ...)
  local pos = select("#", ...) >= 2 and (...) or nil
  charge("table.insert", pos and span(pos, length(t)) * CALL_STEPS or CALL_STEPS)
  return t_insert(t, ...)
end
local function checked_remove(t, pos)
  charge("table.remove", pos and span(pos, length(t)) * CALL_STEPS or CALL_STEPS)
  return t_remove(t, pos)
end
local function checked_move(a1, f, e, t, a2)
  charge("table.move", span(f, e) * CALL_STEPS)
  return t_move(a1, f, e, t, a2)
end
local function checked_unpack(t, i, j)
  charge("table.unpack", span(i or 1, j or length(t)) * CALL_STEPS)
  return t_unpack(t, i, j)
end

local policy_table_lib = checked_library(table, {
  concat = checked_concat, sort = checked_sort, insert = checked_insert, remove = checked_remove,
  move = checked_move, unpack = checked_unpack,
})
M.policy_table = policy_table_lib

-- Read-only, so one policy file cannot change what another one (or a later decision) calls.
M.policy_string = setmetatable({}, {
  __index = policy_string_lib,
  __newindex = function(_, k) error("string." .. tostring(k) .. " cannot be assigned in a policy", 2) end,
  __metatable = "policy string library",
})

-- The engine's limits for one bounded call: `limits` is a number (a decision's instruction
-- budget) or a table (a load: {instructions, memory_bytes, time_ms}).
local function engine_limits(limits)
  if type(limits) == "table" then
    return { instructions = limits.instructions, memory_bytes = limits.memory_bytes,
             time_ms = limits.time_ms, string = M.policy_string }
  end
  return { instructions = limits, memory_bytes = M.limits.hook_memory_bytes,
           time_ms = M.limits.hook_time_ms, string = M.policy_string }
end

function M.load_limits(instructions)
  return { instructions = instructions or M.limits.load_instructions,
           memory_bytes = M.limits.load_memory_bytes, time_ms = M.limits.load_time_ms }
end

function M.bounded(limits, fn, ...)
  local c = core()
  if c and c.call_bounded then return c.call_bounded(engine_limits(limits), fn, ...) end
  return lua_bounded(limits, fn, ...)
end

---------------------------------------------------------------------------------------------
-- Small helpers

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function copy_lib(lib, omit)
  local out = {}
  for k, v in pairs(lib) do
    if not (omit and omit[k]) then out[k] = v end
  end
  return out
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local data = f:read(M.limits.max_file_bytes + 1)
  f:close()
  if data == nil then data = "" end
  if #data > M.limits.max_file_bytes then
    return nil, string.format("larger than %d bytes", M.limits.max_file_bytes)
  end
  return data
end

-- The first "<path>/x.lua:N: message" in an error text as "short:N: message", else short:1.
-- Lua shortens a long chunkname ("...end/of/path/x.lua:N:"), so the file's base name is
-- what is looked for.
local function located(err, short)
  local first = err:match("^[^\n]*")
  local base = short:match("[^/]*$"):gsub("%p", "%%%0")
  local line, msg = first:match(base .. ":(%d+): (.*)$")
  if line then return string.format("%s:%s: %s", short, line, msg) end
  line = err:match(base .. ":(%d+):")
  local text = first:gsub("^[^:]*:%d+: ", "")
  return string.format("%s:%s: %s", short, line or "1", text)
end

---------------------------------------------------------------------------------------------
-- One file's environment: known settings, proxies that remember the line of each assignment.

-- A file may run in layers (the shipped file, then the operator's overlay) in one
-- environment: every position is a {short = the file's real path, line = n} pair.
local function new_env(name, fields)
  local chunks = {}                                  -- chunkname → {short, lines = source lines}
  local lines = {}                                   -- path → {short, line} of its last assignment
  local rule_lines = setmetatable({}, { __mode = "k" }) -- rule → {short, line} of rule{...}
  local ctl
  local proxies = setmetatable({}, { __mode = "k" })    -- proxy → its data table
  local settings = {}
  local frozen = nil

  -- The position running now: the innermost frame of one of this file's layers.
  local function here()
    for level = 2, 40 do
      local info = debug.getinfo(level, "Sl")
      if not info then break end
      local c = chunks[info.source]
      if c then return { short = c.short, line = info.currentline } end
    end
    return { short = ctl.short, line = nil }
  end

  local function fail(msg)
    local at = here()
    error(string.format("%s:%s: %s", at.short, at.line or "1", msg), 0)
  end

  local function child(path, k)
    return schema.child(path, k)
  end

  local wrap
  wrap = function(v, path, line, visiting)
    lines[path] = line
    if type(v) ~= "table" or proxies[v] or rule.is_rule(v) then return v end
    if getmetatable(v) ~= nil then fail(path .. ": a setting cannot hold a table with a metatable") end
    if visiting[v] then fail(path .. ": a setting cannot contain itself") end
    visiting[v] = true
    local data = {}
    for k, x in pairs(v) do data[k] = wrap(x, child(path, k), line, visiting) end
    visiting[v] = nil
    local proxy = setmetatable({}, {
      __index = data,
      __newindex = function(_, k, x) data[k] = wrap(x, child(path, k), here(), {}) end,
      __pairs = function() return next, data, nil end,
      __len = function() return #data end,
    })
    proxies[proxy] = data
    return proxy
  end

  local function unwrap(v, seen)
    local data = proxies[v]
    if data == nil then return v end
    if seen[v] then return nil, true end
    seen[v] = true
    local out = {}
    for k, x in pairs(data) do
      local u, cyclic = unwrap(x, seen)
      if cyclic then return nil, true end
      out[k] = u
    end
    seen[v] = nil
    return out
  end

  -- Policy code raises messages: a raised value that is not one becomes a message that says
  -- what it was, at the line that raised it (never a table's address in a reload's log).
  local function message_of(v)
    if type(v) == "string" or type(v) == "number" then return v end
    return ("raised a %s value instead of a message; raise a string: error(\"why\")"):format(type(v))
  end
  local function policy_error(v, level)
    if type(v) == "string" or type(v) == "number" then
      if level == 0 then error(v, 0) end
      error(v, (level or 1) + 1)
    end
    error(message_of(v), 2)
  end
  local function policy_assert(v, msg, ...)
    if v then return v, msg, ... end
    if msg == nil then error("assertion failed!", 2) end
    if type(msg) == "string" or type(msg) == "number" then error(msg, 0) end
    error(message_of(msg), 2)
  end

  local helpers = {
    string = M.policy_string,
    table = copy_lib(M.policy_table),
    math = copy_lib(math, { random = true, randomseed = true }),
    utf8 = copy_lib(utf8),
    assert = policy_assert, error = policy_error, ipairs = ipairs, pairs = pairs, select = select,
    tonumber = tonumber, tostring = tostring, type = type,
    next = function(t, k)
      local data = proxies[t]
      return next(data or t, k)
    end,
    second = schema.SECOND, minute = schema.MINUTE, hour = schema.HOUR,
    KiB = schema.KIB, MiB = schema.MIB,
  }
  helpers.rule = function(spec)
    local r, errs = rule.new(spec)
    if not r then fail("rule{...}: " .. table.concat(errs, "; ")) end
    rule_lines[r] = here()
    return r
  end

  local function known_settings()
    return table.concat(schema.sorted_keys(fields), ", ")
  end

  local env = setmetatable({}, {
    __index = function(_, k)
      local v = helpers[k]
      if v ~= nil then return v end
      if fields[k] then
        if frozen then return frozen[k] end
        return settings[k]
      end
      fail(string.format("unknown name %s (this file's settings: %s; helpers: second, minute, hour, KiB, MiB, rule, string, table, math, utf8)",
        show(k), known_settings()))
    end,
    __newindex = function(_, k, v)
      if frozen then fail(string.format("policy settings are read-only once loaded (tried to set %s)", show(k))) end
      if helpers[k] ~= nil then fail(string.format("%s is a helper and cannot be assigned", show(k))) end
      if not fields[k] then
        fail(string.format("unknown setting %s (this file sets: %s)", show(k), known_settings()))
      end
      settings[k] = wrap(v, k, here(), {})
    end,
  })

  ctl = { env = env, short = "policies/" .. name .. ".lua", lines = lines, rule_lines = rule_lines,
          layers = {} }

  -- Adds a layer (a file's real path and source lines); returns its chunkname for load().
  function ctl.layer(short, src_lines, shipped)
    local chunkname = "@" .. short
    chunks[chunkname] = { short = short, lines = src_lines }
    ctl.short = short
    ctl.layers[#ctl.layers + 1] = { short = short, shipped = shipped == true }
    return chunkname
  end

  function ctl.is_shipped(short)
    for _, l in ipairs(ctl.layers) do if l.short == short then return l.shipped end end
    return false
  end

  -- Settings as plain tables, or nil, message on a cycle.
  function ctl.values()
    local out = {}
    for k, v in pairs(settings) do
      local u, cyclic = unwrap(v, {})
      if cyclic then
        local at = lines[k] or {}
        return nil, string.format("%s:%s: %s contains itself", at.short or ctl.short, at.line or 1, k)
      end
      out[k] = u
    end
    return out
  end

  function ctl.freeze(values) frozen = values end

  -- The line for a path: the last assignment of it or of its nearest recorded parent, moved
  -- back to the line that names the key when that assignment was a multi-line constructor.
  -- Returns the file (its real path) and the line.
  function ctl.line_for(path)
    local p = path
    while p and p ~= "" do
      local at = lines[p]
      if at and at.line then
        local l = at.line
        local src_lines = chunks["@" .. at.short] and chunks["@" .. at.short].lines or {}
        local key = p:match("([%a_][%w_]*)$")
        if key and not p:find("%]$") then
          for i = l, math.max(1, l - 60), -1 do
            local text = src_lines[i]
            if text and text:find("%f[%w_]" .. key .. "%s*=[^=]") then return at.short, i end
          end
        end
        return at.short, l
      end
      p = p:match("^(.*)%.[%a_][%w_]*$") or p:match("^(.*)%[[^%]]*%]$")
    end
    return ctl.short, 1
  end

  -- "file:line" for a path; a problem the shipped layer set but whose message names a
  -- setting the operator's layer changed points at the operator's line instead.
  function ctl.where(path, msg)
    local short, line = ctl.line_for(path)
    if ctl.is_shipped(short) and msg then
      for other in msg:gmatch("[%a_][%w_]*%.[%a_][%w_.]*[%w_]") do
        local os_, ol = ctl.line_for(other)
        if lines[other] and not ctl.is_shipped(os_) then return os_ .. ":" .. ol end
      end
    end
    return short .. ":" .. line
  end

  return ctl
end

---------------------------------------------------------------------------------------------
-- Freezing

local FROZEN = setmetatable({}, { __mode = "k" })

local function freeze(v)
  if type(v) ~= "table" or FROZEN[v] then return v end
  local data = {}
  for k, x in pairs(v) do data[k] = freeze(x) end
  local mt = getmetatable(v)
  if mt ~= nil then setmetatable(data, mt) end
  local proxy = setmetatable({}, {
    __index = data,
    __newindex = function(_, k)
      error("the policy snapshot is read-only (tried to set " .. tostring(k) .. ")", 2)
    end,
    __pairs = function() return next, data, nil end,
    __len = function() return #data end,
    __metatable = "frozen policy",
  })
  FROZEN[proxy] = true
  return proxy
end
M.freeze = freeze
function M.is_frozen(v) return FROZEN[v] == true end

---------------------------------------------------------------------------------------------
-- Load

local function split_lines(src)
  local out = {}
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

local function missing(err)
  return tostring(err):find("No such file", 1, true) ~= nil
end

-- Runs one layer of a file in ctl's environment; false after recording the problem.
local function run_layer(ctl, short, src, shipped, opts, errs)
  local chunkname = ctl.layer(short, split_lines(src), shipped)
  local fn, perr = load(src, chunkname, "t", ctl.env)
  if not fn then
    errs[#errs + 1] = located(perr, short)
    return false
  end
  local bounded = opts.bounded or M.bounded
  local ok, berr = bounded(M.load_limits(opts.load_instructions), fn)
  if not ok then
    errs[#errs + 1] = located(tostring(berr), short)
    return false
  end
  return true
end

-- One file: the shipped layer (when dir is an overlay over opts.base), then dir's own file,
-- which may be absent in an overlay. Returns ctl, {layer sources} or nil.
local function load_one(dir, name, opts, errs)
  local read = opts.read or read_file
  local layers = {}
  local base = opts.base
  if base then
    local short = base .. "/" .. name .. ".lua"
    local src, rerr = read(short)
    if not src then
      errs[#errs + 1] = string.format("%s:1: cannot read the shipped file: %s", short, tostring(rerr))
      return nil, layers
    end
    layers[#layers + 1] = { short = short, src = src, shipped = true }
  end
  local short = dir .. "/" .. name .. ".lua"
  local src, rerr = read(short)
  if src then
    layers[#layers + 1] = { short = short, src = src }
  elseif not (base and missing(rerr)) then
    errs[#errs + 1] = string.format("%s:1: cannot read the file: %s", short, tostring(rerr))
    return nil, layers
  end
  local ctl = new_env(name, schema.files[name])
  for _, l in ipairs(layers) do
    if not run_layer(ctl, l.short, l.src, l.shipped, opts, errs) then return nil, layers end
  end
  local values, cerr = ctl.values()
  if not values then
    errs[#errs + 1] = cerr
    return nil, layers
  end
  ctl.settings = values
  return ctl, layers
end

local function validate_file(name, ctl, errs)
  local n0 = #errs
  local function report(path, msg)
    errs[#errs + 1] = string.format("%s: %s %s", ctl.where(path, msg), path, msg)
  end
  local fields = schema.files[name]
  for _, k in ipairs(schema.sorted_keys(fields)) do
    local v = ctl.settings[k]
    if v == nil then
      if not schema.fill_default(ctl.settings, k, fields[k]) and not schema.is_optional(fields[k]) then
        report(k, "is required")
      end
    else
      fields[k](v, k, report)
    end
  end
  if #errs == n0 and schema.cross[name] then schema.cross[name](ctl.settings, report) end
  return #errs == n0
end

local function check_rules(ctl, errs, counts)
  for _, k in ipairs(schema.sorted_keys(ctl.settings)) do
    local r = ctl.settings[k]
    if rule.is_rule(r) then
      local at = ctl.rule_lines[r]
      local where = at and at.line and (at.short .. ":" .. at.line) or ctl.where(k)
      local rebuilt, rerrs = rule.rebuild(r)
      for _, e in ipairs(rerrs or {}) do
        errs[#errs + 1] = string.format("%s: rule %s: %s", where, k, e)
      end
      r = rebuilt or r
      ctl.rule_lines[r] = at
      ctl.settings[k] = r
      counts.rules = counts.rules + 1
      local failures, n = r:check_examples()
      counts.examples = counts.examples + n
      for _, f in ipairs(failures) do
        errs[#errs + 1] = string.format("%s: rule %s: example %s", where, k, f)
      end
    end
  end
end

local function check_hooks(snap, ctls, opts, errs, counts)
  local samples = schema.hook_samples(snap)
  local bounded = opts.bounded or M.bounded
  for _, hook in ipairs(schema.sorted_keys(schema.hooks)) do
    local h = schema.hooks[hook]
    local ctl = ctls[h.file]
    local fn = snap[h.file][h.name]
    local info = debug.getinfo(fn, "S")
    local where
    if info.linedefined and info.linedefined > 0 and info.source:sub(1, 1) == "@" then
      where = info.source:sub(2) .. ":" .. info.linedefined
    else
      where = ctl.where(h.name)
    end
    for _, ctx in ipairs(samples[hook]) do
      counts.hook_calls = counts.hook_calls + 1
      local ok, res = bounded(opts.hook_instructions or M.limits.hook_instructions, fn, ctx, snap[h.file])
      local why
      if not ok then
        why = "failed: " .. tostring(res):match("^[^\n]*"):gsub("^[^:]*%.lua:%d+: ", "")
      else
        local valid, vwhy = schema.hook_validate[hook](res, snap)
        if not valid then why = vwhy end
      end
      if why then
        local args = {}
        for _, k in ipairs(schema.sorted_keys(ctx)) do args[#args + 1] = k .. "=" .. show(ctx[k]) end
        errs[#errs + 1] = string.format("%s: hook %s({%s}) %s", where, h.name,
          table.concat(args, ", "), why)
        break
      end
    end
  end
end

-- The policy set's version: sha256 over every file's name, length and bytes, in name order.
-- An overlay's version also covers the shipped layer under it (an upgrade changes it).
local function version_of(sources, hash)
  local names = schema.sorted_keys(sources)
  local parts = {}
  for _, name in ipairs(names) do
    for _, l in ipairs(sources[name]) do
      local label = (l.shipped and "shipped/" or "") .. name .. ".lua"
      parts[#parts + 1] = string.format("%s\0%d\0%s", label, #l.src, l.src)
    end
  end
  return hash(table.concat(parts))
end

-- opts: base (the shipped directory: dir is then an overlay holding only what it changes),
--       hash(bytes) → hex (default core sha256), bounded(budget, fn, ...), read(path),
--       list(dir) → names (default core.fs.list when the engine is loaded),
--       load_instructions, hook_instructions.
function M.load(dir, opts)
  opts = opts or {}
  local errs = {}
  dir = (dir or "policies"):gsub("/+$", "")
  if dir == "" then dir = "/" end
  if opts.base then
    -- The same directory however it is written (relative, absolute, through a link) is not
    -- an overlay of itself.
    local c = core()
    local function norm(d)
      local real = c and c.fs and c.fs.realpath and c.fs.realpath(d)
      if type(real) == "string" then return real end
      return (d:gsub("/+$", ""):gsub("^%./", ""):gsub("/%./", "/"))
    end
    local base = opts.base:gsub("/+$", "")
    if norm(base) == norm(dir) then base = dir end
    local layered = {}
    for k, v in pairs(opts) do layered[k] = v end
    layered.base = base ~= dir and base or nil
    opts = layered
  end

  local list = opts.list
  if list == nil then
    local c = core()
    if c and c.fs and c.fs.list then list = c.fs.list end
  end
  if list then
    local names, lerr = list(dir)
    if not names then
      -- the engine's failure (core.error) or a stand-in's table: its message, never the table
      local why = type(lerr) == "table" and lerr.message or tostring(lerr)
      return nil, { string.format("%s: cannot list the policy directory: %s", dir, why) }
    end
    local known = {}
    for _, n in ipairs(M.FILES) do known[n .. ".lua"] = true end
    for _, n in ipairs(names) do
      if type(n) == "table" then n = n.name end
      if type(n) == "string" and n:find("%.lua$") and not known[n] then
        errs[#errs + 1] = string.format("%s/%s:1: not a known policy file (known: %s.lua)", dir, n,
          table.concat(M.FILES, ".lua, "))
      end
    end
  end

  local ctls, sources, valid = {}, {}, true
  for _, name in ipairs(M.FILES) do
    local ctl, layers = load_one(dir, name, opts, errs)
    sources[name] = layers
    if ctl then
      ctls[name] = ctl
      if not validate_file(name, ctl, errs) then valid = false end
    else
      valid = false
    end
  end

  local counts = { files = #M.FILES, rules = 0, examples = 0, hook_calls = 0 }
  if ctls.errors then check_rules(ctls.errors, errs, counts) end
  if not valid or #errs > 0 then return nil, errs end

  local snap = {}
  for _, name in ipairs(M.FILES) do snap[name] = ctls[name].settings end
  schema.derive_timeouts(snap.timeouts)
  schema.derive_agents(snap.agents)
  schema.cross_files(snap, function(file, path, msg)
    errs[#errs + 1] = string.format("%s: %s %s", ctls[file].where(path, msg), path, msg)
  end)
  if #errs > 0 then return nil, errs end

  for _, name in ipairs(M.FILES) do snap[name] = freeze(snap[name]) end
  check_hooks(snap, ctls, opts, errs, counts)
  if #errs > 0 then return nil, errs end

  -- From here on the policy code reads the frozen, validated values.
  for _, name in ipairs(M.FILES) do ctls[name].freeze(snap[name]) end

  local ok, version = pcall(version_of, sources, opts.hash or M.default_hash)
  if not ok then return nil, { tostring(version) } end
  snap.version = version
  snap.dir = dir
  snap.base = opts.base
  -- where(file, path) → "real/path.lua:LINE", shipped? : where each effective value was set
  local shipped_of = {}
  for _, name in ipairs(M.FILES) do
    local ctl = ctls[name]
    shipped_of[name] = function(path)
      local short, line = ctl.line_for(path)
      return short .. ":" .. line, ctl.is_shipped(short)
    end
  end
  snap.where = function(file, path) return shipped_of[file](path) end
  snap.checked = counts
  return freeze(snap)
end

return M
