-- A toy backend from the test tree (tests/lua/registry_spec.lua): what a new backend is — one
-- module with the executor interface and its declaration, registered with
-- exec/backends.lua's register (a shipped one is a line in its MODULES). It runs commands on
-- this host under <workspace root>/toy, each with $TOY_GREETING from its own policy settings
-- (policies/execution.lua `toy = {greeting = "…"}`, optional).
local schema = require("switchboard.policy.schema")
local local_executor = require("switchboard.exec.local")
local S = schema.S

local M = {}

M.DEFAULT_GREETING = "hello from the toy backend"

local function build(opts, ctx, snap, _, kit)
  local root = opts.workspace_root
  if not root then return kit.missing("a workspace root") end
  local greeting = snap.execution.toy and snap.execution.toy.greeting or M.DEFAULT_GREETING
  local resolve = kit.resolve_envs
  local ex = local_executor.new{
    root = root .. "/toy", thread_key = ctx.thread_key, policy = opts.policy, getenv = opts.getenv,
    network = kit.network,
    resolve_envs = function()
      local envs, err = resolve()
      if not envs then return nil, err end
      envs.TOY_GREETING = greeting
      return envs
    end,
  }
  ex.backend = "toy"
  return ex
end

M.backend = {
  name = "toy",
  help = "a toy from the test tree: <root>/toy, $TOY_GREETING",
  settings = S.optional(S.record { greeting = S.string { one_line = true } }),
  configured = function() return true end,
  doctor = { name = "toy", check = function(_, snap)
    return "ok", "the toy greets with " .. (snap.execution.toy and snap.execution.toy.greeting or M.DEFAULT_GREETING)
  end },
  build = build,
}

return M
