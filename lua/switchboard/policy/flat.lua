-- A snapshot as flat settings, for people: `policy show`, `policy show --diff` and what a
-- reload says changed.
--
--   flat.entries(snap) → { {file, path, key = "file:path", text, where, shipped}, ... } (sorted)
--   flat.changes(old, new) → { {file, path, old = text|nil, new = text|nil, restart = bool}, ... }
--   flat.RESTART_ONLY["timeouts:server.max_body_bytes"] = true: read when a server starts
--
-- A leaf is a number, string, boolean or function; a table (a list, a record, a rule's lists)
-- is walked. A function's text names where it is defined, so moving or editing it is a change.

local schema = require("switchboard.policy.schema")

local M = {}

-- Settings a running process reads once, when it starts: a reload changes the snapshot but
-- not the running server (see policies/timeouts.lua `server`).
M.RESTART_ONLY = {
  ["timeouts:server.max_header_bytes"] = true,
  ["timeouts:server.max_body_bytes"] = true,
  ["timeouts:server.request_timeout_ms"] = true,
  ["timeouts:server.idle_timeout_ms"] = true,
  ["timeouts:server.max_connections"] = true,
}

local function text_of(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "function" then
    local info = debug.getinfo(v, "S")
    return "function at " .. (info.source or "?"):gsub("^@", "") .. ":" .. (info.linedefined or 0)
  end
  if math.type(v) == "float" and v == math.floor(v) and v == v then return tostring(math.tointeger(v)) end
  return tostring(v)
end

local function walk(file, path, v, out)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if type(a) == type(b) then return a < b end
      return type(a) == "number"
    end)
    if #keys == 0 then out[#out + 1] = { file = file, path = path, text = "{}" } end
    for _, k in ipairs(keys) do walk(file, schema.child(path, k), v[k], out) end
  else
    out[#out + 1] = { file = file, path = path, text = text_of(v) }
  end
end

-- The leaves of a snapshot without where they were set: a snapshot is frozen, so they are
-- walked once per snapshot (a reload compares the new one with the one it replaces, which the
-- reload before walked already). Where each was set (ctl.line_for) costs most of a walk and a
-- change does not need it.
local leaves_of = setmetatable({}, { __mode = "k" })
local function leaves(snap)
  local out = leaves_of[snap]
  if out then return out end
  out = {}
  for _, file in ipairs(schema.order) do
    local part = snap[file]
    for _, k in ipairs(schema.sorted_keys(part)) do walk(file, k, part[k], out) end
  end
  for _, e in ipairs(out) do e.key = e.file .. ":" .. e.path end
  leaves_of[snap] = out
  return out
end

function M.entries(snap)
  local out = {}
  for i, leaf in ipairs(leaves(snap)) do
    local e = {}
    for k, v in pairs(leaf) do e[k] = v end
    if snap.where then
      local ok, where, shipped = pcall(snap.where, e.file, e.path)
      if ok then e.where, e.shipped = where, shipped end
    end
    out[i] = e
  end
  return out
end

-- What differs between two snapshots, in file then path order.
function M.changes(old, new)
  local before, seen, out = {}, {}, {}
  local old_leaves = leaves(old)
  for _, e in ipairs(old_leaves) do before[e.key] = e end
  for _, e in ipairs(leaves(new)) do
    seen[e.key] = true
    local o = before[e.key]
    if o == nil or o.text ~= e.text then
      out[#out + 1] = { file = e.file, path = e.path, key = e.key, old = o and o.text, new = e.text }
    end
  end
  for _, e in ipairs(old_leaves) do
    if not seen[e.key] then
      out[#out + 1] = { file = e.file, path = e.path, key = e.key, old = e.text, new = nil }
    end
  end
  for _, c in ipairs(out) do c.restart = M.RESTART_ONLY[c.key] == true end
  return out
end

-- "bash.max_ms 1200000 → 1800000" (an added setting: "(unset) → v").
function M.change_text(c)
  return string.format("%s %s → %s", c.path, c.old or "(unset)", c.new or "(unset)")
end

return M
