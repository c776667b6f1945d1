-- The current policy snapshot, reload, and decisions that fail closed.
--
--   policy.configure{hash=, log=, shipped_dir=, bounded=, now_ms=}   (all optional)
--   policy.load_initial([dir]) → snap | nil, errors
--   policy.reload([dir])       → snap | nil, errors   (on failure nothing changes)
--   policy.current()           → the snapshot new work should capture
--   policy.shipped()           → the shipped snapshot (<repo>/policies)
--   policy.decide(snap, hook, fn, ctx) → value, source ("policy" | "shipped" | "fallback")
--
-- Work in flight keeps the snapshot it captured; a reload only swaps the reference that
-- current() returns. Snapshots are read-only.

local loader = require("switchboard.policy.loader")
local schema = require("switchboard.policy.schema")
local flat = require("switchboard.policy.flat")

local M = {}

-- The one place a decision's instruction budget is set.
M.HOOK_BUDGET = loader.limits.hook_instructions

local state = { current = nil, shipped = nil, dir = nil, opts = {} }

local function this_file()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) == "@" then return src:sub(2) end
  return nil
end

-- <repo>/policies, found from this module's own path (<repo>/lua/switchboard/policy/init.lua).
function M.shipped_dir()
  if state.opts.shipped_dir then return state.opts.shipped_dir end
  local file = this_file()
  if file then
    local root = file:match("^(.*)lua/switchboard/policy/init%.lua$")
    if root then
      if root == "" then root = "./" end
      return root .. "policies"
    end
  end
  return os.getenv("SWITCHBOARD_SHIPPED_POLICIES") or "policies"
end

-- The directory policies load from when none is given: SWITCHBOARD_POLICIES, else the shipped set.
function M.default_dir()
  local env = os.getenv("SWITCHBOARD_POLICIES")
  if env and env ~= "" then return env end
  return M.shipped_dir()
end

local function default_log(level, event, fields)
  local core = loader.core()
  if core and core.log then return core.log(level, event, fields) end
  local parts = { level, event }
  local keys = schema.sorted_keys(fields or {})
  for _, k in ipairs(keys) do
    local v = tostring(fields[k])
    if v:find("[%s\"=]") then v = string.format("%q", v) end
    parts[#parts + 1] = k .. "=" .. v
  end
  io.stderr:write(table.concat(parts, " "), "\n")
end

local function first_line(s)
  return (tostring(s):match("^[^\n]*"))
end

local function log(level, event, fields)
  return (state.opts.log or default_log)(level, event, fields)
end

local function now_ms()
  if state.opts.now_ms then return state.opts.now_ms() end
  local core = loader.core()
  if core and core.now_ms then return core.now_ms() end
  return os.clock() * 1000
end

-- Every directory but the shipped one is an overlay over it: it holds only what it changes.
local function load_opts()
  return { hash = state.opts.hash, bounded = state.opts.bounded, base = M.shipped_dir() }
end

function M.configure(opts)
  state.opts = opts or {}
  state.shipped = nil
end

-- For specs: forget every snapshot and option.
function M.reset()
  state = { current = nil, shipped = nil, dir = nil, opts = {} }
end

function M.shipped()
  if state.shipped == nil then
    local dir = M.shipped_dir()
    local snap, errs = loader.load(dir, load_opts())
    if not snap then
      error("the shipped policies in " .. dir .. " do not load:\n" .. table.concat(errs, "\n"), 2)
    end
    state.shipped = snap
  end
  return state.shipped
end

local function build(dir, event, failed_event)
  local t0 = now_ms()
  local snap, errs = loader.load(dir, load_opts())
  local ms = math.floor((now_ms() - t0) * 1000 + 0.5) / 1000
  if not snap then
    for _, e in ipairs(errs) do log("error", "policy.error", { message = e }) end
    log("error", failed_event, {
      dir = dir, errors = #errs, duration_ms = ms,
      kept = state.current and state.current.version or "none",
    })
    return nil, errs
  end
  local old = state.current
  state.current = snap
  state.dir = dir
  if old == nil or event ~= "policy.reloaded" then
    log("info", event, { dir = dir, version = snap.version, duration_ms = ms })
    return snap
  end
  -- A reload says what it changed: one line per key, a warning for each key that only a
  -- restart applies.
  local changes = flat.changes(old, snap)
  log("info", event, { dir = dir, version = snap.version, old_version = old.version,
    duration_ms = ms, changed = #changes })
  for _, c in ipairs(changes) do
    log(c.restart and "warn" or "info", c.restart and "policy.restart_required" or "policy.changed", {
      file = c.file, key = c.path, old = c.old or "(unset)", new = c.new or "(unset)",
      change = flat.change_text(c),
      note = c.restart and "read when the server starts: restart the process to apply it" or nil,
    })
  end
  return snap, nil, changes
end

function M.load_initial(dir)
  local snap, errs = build(dir or M.default_dir(), "policy.loaded", "policy.load_failed")
  if snap and state.shipped == nil then
    -- Decisions fall back to the shipped functions: have them ready before the first one.
    if snap.dir == M.shipped_dir() then
      state.shipped = snap
    else
      local ok, err = pcall(M.shipped)
      if not ok then log("error", "policy.shipped_unavailable", { message = first_line(err) }) end
    end
  end
  return snap, errs
end

-- Build the new set on the side, validate it, then swap one reference. On any failure the
-- current snapshot stays and the errors are returned (and logged).
function M.reload(dir)
  return build(dir or state.dir or M.default_dir(), "policy.reloaded", "policy.reload_failed")
end

function M.current()
  return state.current or M.shipped()
end

---------------------------------------------------------------------------------------------
-- Decisions

-- The last resort when the shipped function also fails for this input: the snapshot's own
-- validated data.
local FALLBACK = {
  ["execution.choose_backend"] = function(snap) return snap.execution.backend.default end,
  ["agents.choose_agent"] = function(snap) return snap.agents.default_agent end,
}

local function try(snap, hook, fn, ctx)
  local h = schema.hooks[hook]
  local ok, res = (state.opts.bounded or loader.bounded)(M.HOOK_BUDGET, fn, ctx, snap[h.file])
  if not ok then return false, first_line(res) end
  local valid, why = schema.hook_validate[hook](res, snap)
  if not valid then return false, why end
  return true, res
end

local function where(fn)
  local info = debug.getinfo(fn, "S")
  if info and info.source and info.linedefined and info.linedefined > 0 then
    return info.source:gsub("^@", "") .. ":" .. info.linedefined
  end
  return "?"
end

-- Run the policy function of `hook` (or fn, when given) with (ctx, settings of its file) under
-- the instruction budget and check its answer. A raise, a loop or an out-of-range answer
-- fails closed: the shipped function over the same settings, else the snapshot's default.
function M.decide(snap, hook, fn, ctx)
  local h = schema.hooks[hook]
  if h == nil then error("unknown policy hook " .. tostring(hook), 2) end
  fn = fn or snap[h.file][h.name]
  local ok, res = try(snap, hook, fn, ctx)
  if ok then return res, "policy" end

  local have_shipped, shipped = pcall(M.shipped)
  local shipped_fn = have_shipped and shipped[h.file][h.name] or fn
  local source, value = "shipped", nil
  if shipped_fn ~= fn then
    local sok, sres = try(snap, hook, shipped_fn, ctx)
    if sok then value = sres end
  end
  if value == nil then
    source, value = "fallback", FALLBACK[hook](snap)
  end
  log("warn", "policy.hook_failed", {
    hook = hook, at = where(fn), reason = res, used = source, value = value,
    version = snap.version,
  })
  return value, source
end

---------------------------------------------------------------------------------------------
-- Accessors

function M.agent(snap, name)
  return snap.agents.agents[name]
end

function M.agent_names(snap)
  return schema.sorted_keys(snap.agents.agents)
end

return M
