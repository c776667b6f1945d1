-- The fronts people reach the agents through: a registry, so that no other file lists them.
-- Each front module declares itself as `M.front` (docs/fronts.md "Adding a front"):
--
--   name        its word: its subcommand, its `local_walls` key in policies/isolation.lua
--   settings    optional: its own policy settings, file → spec (`timeouts = S.record{…}` is
--               policies/timeouts.lua's `NAME = {…}`)
--   command     the subcommand that hosts it, commands/<command>.lua; or, instead, the front
--               runs under commands/front.lua with
--   summary, help          one line for `switchboard --help`; its own --help text
--   options, usage(p)      its options (args.lua's spec) and its own argument checks
--   open(p) → front | nil, why   the object launch/host.lua serves (host.lua lists its methods)
--
-- MODULES is the one list of the shipped ones, in the order `switchboard --help` shows them;
-- a later one is a line here, or registry.register(decl) (a spec's toy front).
local schema = require("switchboard.policy.schema")
local parts = require("switchboard.policy.parts")

local MODULES = {
  "switchboard.fronts.console",
  "switchboard.fronts.slack.front",
}

local function check(decl)
  assert(type(decl) == "table", "a front declaration is a table")
  assert(type(decl.name) == "string" and decl.name:match("^[a-z][a-z0-9_]*$"), "a front's name is a lower-case word")
  assert(type(decl.command) == "string" or (type(decl.open) == "function" and type(decl.help) == "string"
    and type(decl.summary) == "string"), "front " .. decl.name .. ": a command, or open, summary and help")
end

-- register(decl) adds one (or replaces the one of that name: the policies loaded afterwards
-- know it), unregister(name), get(name), names() (policy/parts.lua)
local M = parts.new{
  check = check,
  on_add = function(decl) schema.register_front(decl.name, decl.settings) end,
  on_remove = function(decl) schema.unregister_front(decl.name, decl.settings) end,
}

for _, module in ipairs(MODULES) do M.register(require(module).front) end

return M
