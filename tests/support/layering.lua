-- The floors checker: reads a source tree and reports every dependency from one unit to
-- another that the allowed-dependency table does not list (ARCHITECTURE.md "Who may depend on
-- whom" holds the table; tests/lua/layering_spec.lua reads it from there and runs this).
--
-- Units:
--   C    every folder under src/ is a unit (src/main.c is the unit "main"). A unit depends on
--        another when one of its files #includes a header of the other, or names a function
--        the other defines (a lower floor calling an upper one's opener through a declaration
--        in its own header is still a dependency).
--   Lua  every folder under lua/switchboard/ is a unit, and so is every top-level module
--        (args, cli, state). A unit depends on another when its code (not its comments)
--        holds a string literal naming the other's modules: require("switchboard.exec.x"),
--        pcall(require, "switchboard.commands." .. name). switchboard.core is the engine:
--        every unit may use it.
--
--   local problems = layering.check(root, {c = C_TABLE, lua = LUA_TABLE, c_default = {...}})
--   -- each problem: {lang, file, line, from, to, text}
-- (C: a header that declares another unit's function, or a file that calls or takes the
-- address of one, depends on that unit — the declaration is where the knowledge lives.)
-- A table maps unit → list of units it may depend on. A C folder missing from the table gets
-- c_default (a feature module: the engine and the log); a Lua folder missing from it is a
-- problem of its own (a new room is placed deliberately).
local M = {}

local function lines_of(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function find_files(dir, pattern)
  local out = {}
  local p = io.popen(("find '%s' -type f -name '%s' 2>/dev/null | LC_ALL=C sort"):format(dir, pattern))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

local function set_of(list)
  local s = {}
  for _, v in ipairs(list or {}) do s[v] = true end
  return s
end

local function line_at(text, pos)
  local n = 1
  for _ in text:sub(1, pos):gmatch("\n") do n = n + 1 end
  return n
end

---------------------------------------------------------------------------------------------
-- Lua: string literals outside comments

-- Calls fn(value, line) for every string literal of a Lua chunk, skipping comments.
function M.lua_strings(src, fn)
  local i, n, line = 1, #src, 1
  local function long_bracket(at)
    local eq = src:match("^%[(=*)%[", at)
    if not eq then return nil end
    local close = "]" .. eq .. "]"
    local s = at + #eq + 2
    local e = src:find(close, s, true)
    return s, e and e - 1 or n, e and e + #close or n + 1
  end
  while i <= n do
    local c = src:sub(i, i)
    if c == "\n" then
      line = line + 1
      i = i + 1
    elseif c == "-" and src:sub(i + 1, i + 1) == "-" then
      local s, _, after = long_bracket(i + 2)
      local stop
      if s then stop = after else stop = (src:find("\n", i, true) or n + 1) end
      for _ in src:sub(i, stop - 1):gmatch("\n") do line = line + 1 end
      i = stop
    elseif c == "[" and src:match("^%[=*%[", i) then
      local s, e, after = long_bracket(i)
      fn(src:sub(s, e), line)
      for _ in src:sub(i, after - 1):gmatch("\n") do line = line + 1 end
      i = after
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then
          buf[#buf + 1] = src:sub(j, j + 1)
          j = j + 2
        elseif d == c or d == "\n" then
          break
        else
          buf[#buf + 1] = d
          j = j + 1
        end
      end
      fn(table.concat(buf), line)
      i = j + 1
    else
      i = i + 1
    end
  end
end

-- The unit of a Lua module name ("switchboard.exec.local" → "exec"), or nil for the engine
-- and for names outside switchboard.
local function lua_unit_of_module(name, top_modules)
  local first = name:match("^switchboard%.([%w_]+)")
  if not first or first == "core" then return nil end
  return first
end

local function check_lua(root, table_, problems)
  local base = root .. "/lua/switchboard"
  for _, file in ipairs(find_files(base, "*.lua")) do
    local rel = file:sub(#base + 2)
    local from = rel:match("^([^/]+)/") or rel:match("^(.+)%.lua$")
    local allowed = table_[from]
    if allowed == nil then
      problems[#problems + 1] = {
        lang = "lua", file = file, line = 1, from = from,
        text = ("lua/switchboard/%s is in no floor: add %q to the Lua table in ARCHITECTURE.md "
          .. "with the units it may depend on"):format(rel:match("^[^/]+"), from),
      }
    else
      local ok = set_of(allowed)
      M.lua_strings(lines_of(file), function(value, line)
        local to = lua_unit_of_module(value)
        if to and to ~= from and not ok[to] then
          problems[#problems + 1] = {
            lang = "lua", file = file, line = line, from = from, to = to,
            text = ("%s:%d: %s may not depend on %s (%q); allowed: %s"):format(file, line, from,
              to, value, #allowed > 0 and table.concat(allowed, ", ") or "nothing"),
          }
        end
      end)
    end
  end
end

---------------------------------------------------------------------------------------------
-- C: includes and calls into functions another unit defines

local function c_unit_of(src_dir, file)
  local rel = file:sub(#src_dir + 2)
  return rel:match("^([^/]+)/") or rel:match("^(.+)%.[ch]$"), rel
end

-- The unit an #include names, resolved against the including file's folder and src/.
local function include_target(src_dir, from_rel, inc)
  local dir = from_rel:match("^(.*)/[^/]*$") or ""
  local candidates = { (dir ~= "" and dir .. "/" or "") .. inc, inc }
  for _, cand in ipairs(candidates) do
    -- normalise a/b/../c
    local parts = {}
    for part in cand:gmatch("[^/]+") do
      if part == ".." then parts[#parts] = nil elseif part ~= "." then parts[#parts + 1] = part end
    end
    local norm = table.concat(parts, "/")
    local f = io.open(src_dir .. "/" .. norm, "rb")
    if f then
      f:close()
      return parts[2] and parts[1] or norm:match("^(.+)%.[ch]$")
    end
  end
  return nil -- a system header, or a generated one (build_stamp.h): not a floor
end

-- Functions with external linkage defined in a C file: "type sb_name(args)" at the start of a
-- line, not static, followed by a body rather than a semicolon.
local function defined_functions(src)
  local out = {}
  for head, name, rest in src:gmatch("\n([%w_][^\n;{}#]-)%f[%w_](sb_[%w_]+)%s*(%b())%s*{") do
    if not head:find("static") and not head:find("^%s*return") then out[name] = true end
  end
  return out
end

local function check_c(root, table_, default, problems)
  local src_dir = root .. "/src"
  local files = {}
  for _, f in ipairs(find_files(src_dir, "*.[ch]")) do files[#files + 1] = f end
  local owner = {} -- function name → unit defining it
  local texts = {}
  for _, file in ipairs(files) do
    local text = lines_of(file)
    texts[file] = text
    if file:match("%.c$") then
      local unit = c_unit_of(src_dir, file)
      for name in pairs(defined_functions("\n" .. text)) do owner[name] = owner[name] or unit end
    end
  end
  for _, file in ipairs(files) do
    local from, rel = c_unit_of(src_dir, file)
    local allowed = table_[from] or default
    local ok = set_of(allowed)
    local text = texts[file]
    local seen = {}
    local function report(to, line, what)
      if to and to ~= from and not ok[to] then
        local key = to .. "\0" .. what
        if seen[key] then return end
        seen[key] = true
        problems[#problems + 1] = {
          lang = "c", file = file, line = line, from = from, to = to,
          text = ("%s:%d: src/%s may not depend on src/%s (%s); allowed: %s"):format(file, line,
            from, to, what, #allowed > 0 and table.concat(allowed, ", ") or "nothing"),
        }
      end
    end
    for pos, inc in text:gmatch("()#%s*include%s*\"([^\"]+)\"") do
      report(include_target(src_dir, rel, inc), line_at(text, pos), "#include \"" .. inc .. "\"")
    end
    -- strip comments and strings so a mention in prose is not a use
    local code = text:gsub("/%*.-%*/", function(c) return (c:gsub("[^\n]", " ")) end)
      :gsub("//[^\n]*", ""):gsub('"[^"\n]*"', '""')
    for pos, name in code:gmatch("()%f[%w_](sb_[%w_]+)%f[^%w_]") do
      report(owner[name], line_at(code, pos), name)
    end
  end
end

function M.check(root, tables)
  local problems = {}
  if tables.c then check_c(root, tables.c, tables.c_default or {}, problems) end
  if tables.lua then check_lua(root, tables.lua, problems) end
  return problems
end

---------------------------------------------------------------------------------------------
-- The table in ARCHITECTURE.md: two markdown tables under the headings "### C floors" and
-- "### Lua floors", rows `| unit | may depend on |` with units in backticks (`—` for none).

local function parse_rows(section)
  local t = {}
  for row in section:gmatch("\n|([^\n]+)|") do
    local cells = {}
    for cell in (row .. "|"):gmatch("([^|]*)|") do cells[#cells + 1] = cell end
    if cells[1] and cells[2] and cells[1]:find("^%s*`") then
      local deps = {}
      for dep in cells[2]:gmatch("`([^`]+)`") do deps[#deps + 1] = dep end
      for name in cells[1]:gmatch("`([^`]+)`") do t[name] = deps end
    end
  end
  return t
end

function M.tables_from_markdown(text)
  local function section(title)
    local s = text:find("\n### " .. title, 1, true)
    if not s then return nil end
    local e = text:find("\n##", s + 1) or #text
    return text:sub(s, e)
  end
  local c, lua = section("C floors"), section("Lua floors")
  assert(c and lua, "ARCHITECTURE.md needs the sections '### C floors' and '### Lua floors'")
  local tables = { c = parse_rows(c), lua = parse_rows(lua) }
  tables.c_default = tables.c["*"] or {}
  tables.c["*"] = nil
  return tables
end

-- The room tables (## sections of `text` titled `title`): folder (no trailing slash) → its
-- row's text.
function M.rooms_from_markdown(text, title)
  local s = text:find("\n## " .. title .. "\n", 1, true)
  assert(s, "ARCHITECTURE.md needs the section '## " .. title .. "'")
  local e = text:find("\n## ", s + 1, true) or #text
  local rows = {}
  for folder, row in text:sub(s, e):gmatch("\n| `([^`]+)/` |([^\n]*)") do rows[folder] = row end
  return rows
end

-- Files (paths relative to root/dir, from `list`) that no row of `rooms` names: a file is
-- named when its path inside its folder is written in its folder's row (for a file in a
-- subfolder, `sub/` and its own name in the row do too).
function M.unnamed_files(dir, list, rooms)
  local missing = {}
  for _, path in ipairs(list) do
    local rel = path:sub(#dir + 2)
    local folder, inner = rel:match("^([^/]+)/(.+)$")
    if folder then
      local row = rooms[folder]
      local sub, base = inner:match("^(.*)/([^/]+)$")
      local named = row and (row:find("`" .. inner .. "`", 1, true)
        or (sub and row:find("`" .. sub .. "/`", 1, true) and row:find("`" .. base .. "`", 1, true)))
      if not named then missing[#missing + 1] = rel end
    end
  end
  return missing
end

-- One error shape (ARCHITECTURE.md "Failures are values, of one type"): the places a Lua file
-- returns a bare string as its failure — `return nil, "…"`, `return nil, ("…"):format(…)`,
-- `return nil, [[…]]`, `return nil, name .. "…"` — outside comments. Returns {line = n, text}
-- for each. A core.error value (`return nil, core.error(kind, …)`) or a passed-on error
-- (`return nil, err`) is not one.
local STRING_ERROR = {
  "return%s+nil%s*,%s*[\"']",
  "return%s+nil%s*,%s*%(%s*[\"']",
  "return%s+nil%s*,%s*%[=*%[",
  "return%s+nil%s*,%s*[%a_][%w_.]*%s*%.%.",
}

function M.string_errors(src)
  local out, n, in_long = {}, 0, false
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line
    if in_long then
      local close = code:find("]]", 1, true)
      if close then in_long = false; code = code:sub(close + 2) else code = "" end
    end
    local long = code:find("--[[", 1, true)
    if long then
      if not code:find("]]", long, true) then in_long = true end
      code = code:sub(1, long - 1)
    end
    code = code:gsub("^%s*%-%-.*$", "")
    for _, pattern in ipairs(STRING_ERROR) do
      if code:find(pattern) then out[#out + 1] = { line = n, text = line:gsub("^%s+", "") }; break end
    end
  end
  return out
end

return M
