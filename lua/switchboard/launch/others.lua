-- What a front that serves other people does before it takes anyone's ask (`switchboard slack`;
-- docs/isolation.md "Fronts that serve other people"): the process is not dumpable and every
-- credential-like value in its environment is redacted from the log and from every text it
-- posts; and it refuses to start when policy would run their commands unwalled on this host
-- (unless --allow-unwalled-commands: then logged, and every card says so) or behind walls this
-- process cannot build (they need root).
--
--   local status = others.guard(p, stack_opts, {people = "Slack users'"})
--   if status then return status end          -- refused, said through p:fail
local core = require("switchboard.core")
local schema = require("switchboard.policy.schema")
local factory = require("switchboard.exec.factory")

local M = {}

M.UNWALLED_NOTE = "unwalled: this bot was started with --allow-unwalled-commands — commands run "
  .. "on the bot's host within reach of its secrets"

local EXIT_CONFIG = 78 -- launch/prologue.lua's EXIT.config

-- A bare service address (scheme://host[:port][/], nothing else) names where a server is, not
-- a way into it: SANDBOX_URL's value starts every preview URL the bot posts (agent/processes.lua),
-- and redacting it made the card's Preview button read "[redacted]/ports/…". A URL that carries
-- anything more — user info, a path (a webhook's key), a query or a fragment — stays redacted.
function M.is_bare_address(value)
  local rest = value:match("^%a[%w+.-]*://([^/?#]+)/?$")
  return rest ~= nil and not rest:find("@", 1, true)
end

-- Every value in this process's environment whose name looks like a credential (the names
-- policies may never pass to a command) is registered with the redaction the log has, which
-- every text the bot posts also goes through: a command that prints one posts [redacted].
-- A bare address (above) is not a credential, whatever its variable's name.
function M.register_env_secrets(environ_path)
  local f = io.open(environ_path or "/proc/self/environ", "rb")
  if not f then return 0 end
  local raw = f:read("a")
  f:close()
  local n = 0
  for entry in raw:gmatch("[^%z]+") do
    local name, value = entry:match("^([^=]+)=(.*)$")
    if name and value ~= "" and schema.is_secret_name(name) and not M.is_bare_address(value) then
      core.log_redact(value)
      n = n + 1
    end
  end
  return n
end

-- This process's effective uid (/proc/self/status), nil where it cannot be read.
function M.effective_uid(status_path)
  local f = io.open(status_path or "/proc/self/status", "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return tonumber(text:match("\nUid:%s+%d+%s+(%d+)"))
end

local function names_of(list)
  local names = {}
  for _, u in ipairs(list) do names[#names + 1] = ("%s (%s)"):format(u.agent, u.backend) end
  return table.concat(names, ", ")
end

-- The words for a start refused because some agent's commands would run unwalled.
local function unwalled_problem(list, people, front)
  return ("agents %s would run %s commands unwalled on this host, where they can read "
    .. "this bot's tokens (%s is false). Point the bot at a sandboxd (SANDBOX_URL and SANDBOX_TOKEN; "
    .. "docs/deploy.md \"One machine\"), or set local_walls.%s = true in policies/isolation.lua "
    .. "(walls need root, bubblewrap, user namespaces and cgroups), or — only for people you trust "
    .. "with those tokens — start with --allow-unwalled-commands"):format(names_of(list), people, list[1].setting, front)
end

-- The words for a start refused because the local executor's walls need root and this bot
-- does not run as root (switchboard-bot.service's User=switchboard): it could run nothing.
function M.walls_need_root_problem(list, uid, people)
  return ("agents %s would run %s commands on the local executor behind its walls, but "
    .. "this bot runs as uid %s, not root, and the walls need root (each instance gets a host uid, "
    .. "cgroups and a workspace of its own), so none of their commands could run. Point the bot at "
    .. "a sandboxd: set SANDBOX_URL and SANDBOX_TOKEN (the package's /etc/switchboard/bot.env has "
    .. "SANDBOX_URL=http://127.0.0.1:8080 and the SANDBOX_TOKEN of /etc/switchboard/sandboxd.env; "
    .. "restore them, then `systemctl restart switchboard-bot`; docs/deploy.md \"One machine\"), "
    .. "or run the bot as root"):format(names_of(list), people or "other people's", tostring(uid))
end

-- The start's checks (stack_opts: exec/stack.lua's, with front; p.opts.allow_unwalled_commands
-- the flag). Sets stack_opts.refuse_unwalled and unwalled_note; nil, or the refusal's status.
function M.guard(p, stack_opts, who)
  -- Not dumpable: /proc/<pid>/environ and mem closed to a command running as the same user
  -- (as sandboxd and the resident are); the secrets registered with the redaction.
  core.secrets.not_dumpable()
  M.register_env_secrets()
  local snap, allow = p.snap, p.opts.allow_unwalled_commands == true
  stack_opts.refuse_unwalled = not allow
  stack_opts.unwalled_note = allow and M.UNWALLED_NOTE or nil
  local unwalled = factory.unwalled_agents(stack_opts, snap)
  if #unwalled > 0 and not allow then
    return p:fail(EXIT_CONFIG, unwalled_problem(unwalled, who.people, stack_opts.front))
  end
  -- walled, but where no wall can be built: fail closed at start, not at every command
  local walled_local, uid = factory.walled_local_agents(stack_opts, snap), M.effective_uid()
  if #walled_local > 0 and uid and uid ~= 0 then
    return p:fail(EXIT_CONFIG, M.walls_need_root_problem(walled_local, uid, who.people))
  end
  if #unwalled > 0 then
    local names = {}
    for _, u in ipairs(unwalled) do names[#names + 1] = u.agent end
    core.log("warn", stack_opts.front .. ".unwalled", { agents = table.concat(names, ","),
      message = "--allow-unwalled-commands: commands run unwalled on this host, within reach of the bot's secrets" })
  end
  return nil
end

return M
