-- The backends a thread's commands may run on: a registry, so that no other file lists them.
-- Each backend module declares itself as `M.backend` (docs/executors.md "Adding a backend"):
--
--   name            the word policy (`execution.backend`, `choose_backend`) and --backend use
--   help            one line for the --help of every command that takes --backend
--   settings        its part of policies/execution.lua (`NAME = {…}`): a policy/schema.lua spec,
--                   or nil for a backend with none
--   configured(snap, getenv, opts) → boolean   whether this process could use it (its variables
--                   set): the facts `choose_backend` is given; policy still decides
--   build(opts, ctx, snap, agent, kit) → executor [, backend, note] | nil, err
--                   the thread's executor (exec/factory.lua's kit: network, resolve_envs,
--                   walled, missing(setting), no_offline(but, instead), fallback(name))
--   start_problem(snap, opts, getenv) → words | nil   optional: --backend NAME checked at start
--   on_this_host(snap) → boolean   optional: its commands may run on the bot's own host (the
--                   fronts that serve other people refuse to start unwalled: docs/isolation.md)
--   doctor = {name, check(env, snap) → verdict, text}   optional: a `switchboard doctor` row
--
-- MODULES is the one list of the shipped ones, in the order help and errors show them; a
-- later one is a line here, or backends.register(decl) (a spec's toy backend).
local schema = require("switchboard.policy.schema")
local parts = require("switchboard.policy.parts")

local MODULES = {
  "switchboard.exec.local",
  "switchboard.exec.sandbox",
  "switchboard.exec.resident",
  "switchboard.exec.e2b",
  "switchboard.exec.kubernetes",
}

local function check(decl)
  assert(type(decl) == "table", "a backend declaration is a table")
  assert(type(decl.name) == "string" and decl.name:match("^[a-z][a-z0-9_]*$"),
    "a backend's name is a lower-case word")
  assert(type(decl.help) == "string" and not decl.help:find("\n"), "backend " .. decl.name .. ": help is one line")
  assert(type(decl.build) == "function", "backend " .. decl.name .. ": build is a function")
  assert(type(decl.configured) == "function", "backend " .. decl.name .. ": configured is a function")
end

-- register(decl) adds one (or replaces the one of that name: the policies loaded afterwards
-- know it), unregister(name), get(name), names() (policy/parts.lua)
local M = parts.new{
  check = check,
  on_add = function(decl) schema.register_backend(decl.name, decl.settings) end,
  on_remove = function(decl) schema.unregister_backend(decl.name) end,
}

-- "local, sandbox, resident, e2b or kubernetes"
function M.names_text()
  local order = M.names()
  if #order < 2 then return order[1] or "" end
  return table.concat(order, ", ", 1, #order - 1) .. " or " .. order[#order]
end

-- One line per backend, for --backend's help (indent: the spaces before each name).
function M.help_lines(indent)
  local order, width = M.names(), 0
  for _, name in ipairs(order) do width = math.max(width, #name) end
  local lines = {}
  for _, name in ipairs(order) do
    lines[#lines + 1] = ("%s%-" .. width .. "s  %s"):format(indent, name, M.get(name).help)
  end
  return table.concat(lines, "\n")
end

for _, module in ipairs(MODULES) do M.register(require(module).backend) end

return M
