-- The `switchboard` command line: global options, then one subcommand. Every subcommand is a
-- module in switchboard.commands returning {name, summary, help, run(argv, ctx) -> status}.
local core = require("switchboard.core")
local args = require("switchboard.args")

local M = {}

local fronts = require("switchboard.commands.front")

-- Listed in the order `--help` shows them: the fronts' (fronts/registry.lua) after exec.
local OWN_COMMANDS = { "exec", "sandboxd", "resident", "policy", "reload", "secrets", "doctor", "version" }

local function commands()
  local list = { OWN_COMMANDS[1] }
  table.move(fronts.names(), 1, #fronts.names(), 2, list)
  table.move(OWN_COMMANDS, 2, #OWN_COMMANDS, #list + 1, list)
  return list
end

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
  --pid-file FILE      write this process's id to FILE while it runs (for `switchboard reload`)
  -h, --help           this text; `switchboard COMMAND --help` for a command's own
  --version            the build stamp (as `switchboard version`)

Global options may also follow the command (before any `--`).

Examples:
  switchboard exec -- echo hello
  switchboard exec --timeout-ms 1000 -- sleep 5     # exit 124 after about a second
  printf 'run `uname -a`\n' | switchboard console
  switchboard policy check ./policies
]]

-- Only the listed commands are commands: other modules may live beside them one day, and a
-- listed one that fails to load is a bug whose error keeps its own location (no catch here).
local function load_command(name)
  for _, own in ipairs(OWN_COMMANDS) do
    if own == name then return require("switchboard.commands." .. name) end
  end
  return fronts.command(name)
end

local function unknown(name)
  return ("unknown command %q; the commands are %s (switchboard --help says what each does)")
    :format(name, table.concat(commands(), ", "))
end

-- `switchboard --help`'s text.
function M.usage()
  local lines = {}
  for _, name in ipairs(commands()) do
    local cmd = load_command(name)
    if cmd then lines[#lines + 1] = ("  %-10s %s\n"):format(name, cmd.summary) end
  end
  return USAGE:format(table.concat(lines))
end

local GLOBAL = { policies = "string", ["log-format"] = "string", ["log-level"] = "string",
  ["pid-file"] = "string", version = "flag" }
local LEVELS = { debug = true, info = true, warn = true, error = true }

-- Splits the global options from the command and its own arguments.
local function split(argv)
  local i = 1
  while i <= #argv and argv[i]:sub(1, 1) == "-" and argv[i] ~= "--" do
    local name = argv[i]:match("^%-%-([^=]+)")
    if GLOBAL[name] and GLOBAL[name] ~= "flag" and not argv[i]:find("=", 1, true) then i = i + 1 end
    i = i + 1
  end
  return table.move(argv, 1, i - 1, 1, {}), argv[i], table.move(argv, i + 1, #argv, 1, {})
end

-- Options a command has of its own with the same name (and the same meaning).
local OWN = { policy = { policies = true }, reload = { ["pid-file"] = true } }

-- Global options written after the command (before its `--`) move in front of it. The
-- policy command's own --policies means the same and stays with it.
local function hoist(global_argv, name, rest)
  local out, i = {}, 1
  while i <= #rest do
    local word = rest[i]
    if word == "--" then
      table.move(rest, i, #rest, #out + 1, out)
      break
    end
    local opt = word:match("^%-%-([^=]+)")
    if opt and GLOBAL[opt] and opt ~= "version" and not (OWN[name] and OWN[name][opt]) then
      global_argv[#global_argv + 1] = word
      if not word:find("=", 1, true) and GLOBAL[opt] ~= "flag" then
        i = i + 1
        if rest[i] ~= nil then global_argv[#global_argv + 1] = rest[i] end
      end
    else
      out[#out + 1] = word
    end
    i = i + 1
  end
  return out
end

-- /proc/self/stat's first field: this process's id.
local function own_pid()
  local f = io.open("/proc/self/stat", "r")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  return line and tonumber(line:match("^(%d+)"))
end

-- Writes the pid file (atomically: a temp file renamed over it); returns a remover.
local function write_pid_file(path)
  local pid = own_pid()
  if not pid then return nil, core.error("io", "cannot read /proc/self/stat") end
  local tmp = path .. ".tmp" .. pid
  local f, err = io.open(tmp, "w")
  if not f then return nil, core.error("io", err) end
  f:write(pid, "\n")
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then os.remove(tmp); return nil, core.error("io", rerr) end
  return function()
    local g = io.open(path, "r")
    local still = g and tonumber(g:read("l") or "")
    if g then g:close() end
    if still == pid then os.remove(path) end
  end
end

local function fatal(json, message)
  if json then
    core.log("error", "cli.fatal", { message = message, status = 2 })
  else
    io.stderr:write("switchboard: ", message, "\n")
  end
  return 2
end

function M.main(...)
  local argv = { ... }
  local global_argv, name, rest = split(argv)
  if name ~= nil then rest = hoist(global_argv, name, rest) end
  local opts, err = args.parse(global_argv, GLOBAL)
  local json = false
  if opts and opts.log_format == "json" then
    core.log_format("json", opts.log_level and LEVELS[opts.log_level] and opts.log_level or nil)
    json = true
  end
  if not opts then return fatal(json, tostring(err)) end
  if opts.log_format and opts.log_format ~= "text" and opts.log_format ~= "json" then
    return fatal(false, ("--log-format must be text or json, got %q"):format(opts.log_format))
  end
  if opts.log_level and not LEVELS[opts.log_level] then
    return fatal(json, ("--log-level must be debug, info, warn or error, got %q"):format(opts.log_level))
  end
  if opts.log_format or opts.log_level then
    core.log_format(opts.log_format or "text", opts.log_level)
  end
  if opts.version then return require("switchboard.commands.version").run({}, {}) end
  if opts.help or name == nil or name == "help" then
    io.stdout:write(M.usage())
    return (opts.help or name == "help") and 0 or 2
  end
  local cmd = load_command(name)
  if not cmd then
    return fatal(json, unknown(name))
  end
  if not opts.log_level and cmd.quiet_logs then
    core.log_format(opts.log_format or "text", "warn") -- one-shot commands: only problems
  end
  local ctx = { policies_dir = opts.policies or os.getenv("SWITCHBOARD_POLICIES"), log_json = json }
  if ctx.policies_dir == "" then ctx.policies_dir = nil end
  ctx.credentials = require("switchboard.github.identity").from_env(os.getenv)
  io.stdout:setvbuf("line")
  local remove
  if OWN[name] and OWN[name]["pid-file"] then
    ctx.pid_file = opts.pid_file -- `switchboard --pid-file F reload`: the file to read, not write
  elseif opts.pid_file then
    local why
    remove, why = write_pid_file(opts.pid_file)
    if not remove then return fatal(json, ("--pid-file %s: %s"):format(opts.pid_file, tostring(why))) end
  end
  local _ <close> = remove and setmetatable({}, { __close = remove })
  -- No catch: a raise goes to the engine's one protected call with its own traceback (the
  -- binary prints it as an internal error, status 70); the pid file goes either way.
  return cmd.run(rest, ctx)
end

return M
