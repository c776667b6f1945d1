-- The fronts' subcommands (fronts/registry.lua): `switchboard NAME` for every registered
-- front. A front with a command module of its own (console, slack) is that module; any other
-- is run here: the shared prologue with its options, then launch/host.lua serving what its
-- open(p) makes — the record, pages, listeners, metrics, reload and drain are the host's.
local prologue = require("switchboard.launch.prologue")
local host = require("switchboard.launch.host")
local registry = require("switchboard.fronts.registry")

local M = {}

local function command_of(decl)
  local cmd = { name = decl.name, summary = decl.summary, help = decl.help }
  function cmd.run(argv, ctx)
    local options = decl.options or {}
    local p, status = prologue.start(cmd, argv, ctx, {
      spec = options, usage = decl.usage, policies = true, backend = options.backend ~= nil,
    })
    if not p then return status end
    local front, why = decl.open(p)
    if not front then return p:fail(prologue.EXIT.config, why) end
    return host.serve(p, front)
  end
  return cmd
end

-- The fronts' command names, in the registry's order.
function M.names()
  local out = {}
  for _, name in ipairs(registry.names()) do
    local decl = registry.get(name)
    out[#out + 1] = decl.command or decl.name
  end
  return out
end

-- The command module of the front whose command is `name`, or nil.
function M.command(name)
  for _, front in ipairs(registry.names()) do
    local decl = registry.get(front)
    if decl.command == name then return require("switchboard.commands." .. name) end
    if not decl.command and decl.name == name then return command_of(decl) end
  end
  return nil
end

return M
