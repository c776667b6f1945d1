-- The `switchboard` command line: global options, then one subcommand. Every subcommand is a
-- module in switchboard.commands returning {name, summary, help, run(argv, ctx) -> status}.
local core = require("switchboard.core")
local args = require("switchboard.args")

local M = {}

-- Listed in the order `--help` shows them.
local COMMANDS = { "exec", "console", "slack", "sandboxd", "resident", "policy", "version" }

local USAGE = [[
Usage: switchboard [GLOBAL OPTIONS] COMMAND [ARGS]

Runs coding agents' commands from Slack (or a terminal): a C engine that owns every process,
Lua that decides, and policies you edit and reload with `kill -HUP`.

Commands:
%s
Global options:
  --policies DIR       policy directory (default: $SWITCHBOARD_POLICIES, else the shipped set)
  --log-format FORMAT  text (default) or json (one JSON document per line on stderr)
  --log-level LEVEL    debug, info (default), warn or error
  -h, --help           this text; `switchboard COMMAND --help` for a command's own

Examples:
  switchboard exec -- echo hello
  switchboard exec --timeout-ms 1000 -- sleep 5     # exit 124 after about a second
  printf 'run `uname -a`\n' | switchboard console
  switchboard policy check ./policies
]]

local function load_command(name)
  local ok, mod = pcall(require, "switchboard.commands." .. name)
  if ok then return mod end
  if tostring(mod):find("module 'switchboard.commands." .. name .. "' not found", 1, true) then
    return nil
  end
  error(mod, 0)
end

local function usage()
  local lines = {}
  for _, name in ipairs(COMMANDS) do
    local cmd = load_command(name)
    if cmd then lines[#lines + 1] = ("  %-10s %s\n"):format(name, cmd.summary) end
  end
  return USAGE:format(table.concat(lines))
end

local GLOBAL = { policies = "string", ["log-format"] = "string", ["log-level"] = "string" }

-- Splits the global options from the command and its own arguments.
local function split(argv)
  local i = 1
  while i <= #argv and argv[i]:sub(1, 1) == "-" and argv[i] ~= "--" do
    local name = argv[i]:match("^%-%-([^=]+)")
    if GLOBAL[name] and not argv[i]:find("=", 1, true) then i = i + 1 end
    i = i + 1
  end
  return table.move(argv, 1, i - 1, 1, {}), argv[i], table.move(argv, i + 1, #argv, 1, {})
end

function M.main(...)
  local argv = { ... }
  local global_argv, name, rest = split(argv)
  local opts, err = args.parse(global_argv, GLOBAL)
  if not opts then
    io.stderr:write("switchboard: ", err, "\n")
    return 2
  end
  if opts.log_format then
    local ok, why = pcall(core.log_format, opts.log_format, opts.log_level)
    if not ok then
      io.stderr:write("switchboard: --log-format must be text or json\n")
      return 2
    end
  elseif opts.log_level then
    core.log_format("text", opts.log_level)
  end
  if opts.help or name == nil or name == "help" then
    io.stdout:write(usage())
    return (opts.help or name == "help") and 0 or 2
  end
  local cmd = load_command(name)
  if not cmd then
    io.stderr:write(("switchboard: unknown command %q\n\n"):format(name), usage())
    return 2
  end
  if not opts.log_level and cmd.quiet_logs then
    core.log_format(opts.log_format or "text", "warn") -- one-shot commands: only problems
  end
  local ctx = { policies_dir = opts.policies or os.getenv("SWITCHBOARD_POLICIES") }
  if ctx.policies_dir == "" then ctx.policies_dir = nil end
  ctx.credentials = require("switchboard.github.identity").from_env(os.getenv)
  io.stdout:setvbuf("line")
  return cmd.run(rest, ctx)
end

return M
