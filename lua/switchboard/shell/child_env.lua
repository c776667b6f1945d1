-- The environment a command starts from (policies/execution.lua child_env): the names in
-- `pass` copied from the bot's environment when set, then the fixed `set` values. A name that
-- looks like a credential is never copied from the bot, even if a policy lists it (the
-- loader already refuses such a policy; this is the second line). Per-command credentials
-- (GH_TOKEN) are added by the executor from resolve_envs, not here.
--
-- A walled command's HOME is its instance's (policies/isolation.lua home, a directory of the
-- private /tmp the walls make): the bot's HOME is never in an instance's view, and a tool that
-- writes under $HOME (caches, `git config --global`) must be able to. Unwalled, the bot's.

local schema = require("switchboard.policy.schema")

local M = {}

-- The HOME a walled command of this snapshot gets (policies/isolation.lua home; a policy that
-- predates it reads the schema's default, policy/schema.lua).
function M.walled_home(snap) return snap.isolation.home end

-- The /etc/passwd and /etc/group a walled command sees (`switchboard-walls hold --passwd
-- --group`): root, the instance's own uid 1000 under the policy's name with the walled HOME, and
-- nobody (what an unmapped owner shows as) — not the host's accounts, so `id -un` and a prompt
-- name the instance's user, and each bash's getpwuid parses three lines.
function M.walled_accounts(snap)
  local name = snap.isolation.user_name -- uid 1000's name (the schema's default likewise)
  local passwd = table.concat({
    "root:x:0:0:root:/root:/usr/sbin/nologin",
    ("%s:x:1000:1000:%s:%s:/bin/bash"):format(name, name, M.walled_home(snap)),
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
  }, "\n") .. "\n"
  local group = table.concat({ "root:x:0:", ("%s:x:1000:"):format(name), "nogroup:x:65534:" }, "\n") .. "\n"
  return passwd, group
end

-- getenv(name) → value | nil (default os.getenv); walled: the command runs behind walls.
-- Returns a fresh name → value table.
function M.base(snap, getenv, walled)
  getenv = getenv or os.getenv
  local spec = snap.execution.child_env
  local env = {}
  for _, name in ipairs(spec.pass) do
    if not schema.is_secret_name(name) then
      local v = getenv(name)
      if type(v) == "string" then env[name] = v end
    end
  end
  if walled then env.HOME = M.walled_home(snap) end
  for name, v in pairs(spec.set) do env[name] = v end
  return env
end

return M
