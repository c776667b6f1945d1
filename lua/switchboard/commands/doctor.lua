-- `switchboard doctor`: checks everything this environment configures, like `gh auth status`,
-- and prints one line per check with what to fix. Nothing is changed; nothing is minted.
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local policy = require("switchboard.policy")
local identity = require("switchboard.github.identity")
local instance = require("switchboard.shell.instance")
local run = require("switchboard.shell.run")
local factory = require("switchboard.exec.factory")
local backends = require("switchboard.exec.backends")

local M = {
  name = "doctor",
  summary = "check the policies, GitHub App, Slack tokens, model key, sandboxd and walls",
}

M.help = [[
Usage: switchboard doctor [--sandbox-url URL]

Checks what this environment configures and prints one line per check:

  ok    policies  …            the policies load (--policies / $SWITCHBOARD_POLICIES)
  ok    github    …            the GitHub App's key signs a JWT and the installation answers,
                               with the permissions it grants (GITHUB_APP_ID, …)
  ok    slack     …            SLACK_BOT_TOKEN passes auth.test; SLACK_APP_TOKEN opens a
                               Socket Mode connection (apps.connections.open), as the bot does
  ok    model     …            ANTHROPIC_API_KEY is accepted (GET /v1/models)
  ok    sandboxd  …            SANDBOX_URL answers /healthz with this binary's build
  ok    walls     …            the walls sandboxd needs are proven as its start-up does: the
                               switchboard-walls helper runs, and a throwaway instance
                               (bubblewrap, user namespaces, cgroups) runs a command
  ok    bot       …            with SLACK_BOT_TOKEN set: no agent's commands would run
                               unwalled next to the bot's secrets (`switchboard slack` refuses
                               to start otherwise; docs/isolation.md)

On an installed host (the package's /etc/switchboard exists) and with neither --policies nor
$SWITCHBOARD_POLICIES given, doctor checks what the services load: the policies in
/etc/switchboard/policies (over the shipped set), and the variables of
/etc/switchboard/bot.env for those not set in its own environment (run it as root to read it),
GH_TOKEN and the GitHub App's variables included. $SWITCHBOARD_CONFIG_DIR names another
directory in place of /etc/switchboard (a test's own, or a copy being prepared).

Before the services are started the sandboxd check fails (nothing answers SANDBOX_URL yet):
start switchboard-sandboxd, then run doctor again.

A check whose settings are absent says `skip` and which variable turns it on; a failing one
says `FAIL` and what to do. Tokens are sent only to the service they belong to and never
printed. SLACK_API_URL, ANTHROPIC_BASE_URL and GITHUB_API_URL point a check elsewhere.

Exit status: 0 nothing failed; 1 a check failed; 2 usage.

Examples:
  switchboard doctor
  SANDBOX_URL=http://127.0.0.1:8080 SANDBOX_TOKEN=… switchboard doctor
]]

local SPEC = { ["sandbox-url"] = "string" }

local function nonempty_dir(v)
  if type(v) == "string" and v:find("%S") then return (v:gsub("/+$", "")) end
  return nil
end

-- What the package installs (deploy/systemd/*.service read these), below /etc/switchboard or
-- $SWITCHBOARD_CONFIG_DIR (a spec's own directory: a test never reads the host's install).
M.CONFIG_DIR = "/etc/switchboard"
local function installed_paths(getenv)
  local dir = nonempty_dir(getenv("SWITCHBOARD_CONFIG_DIR")) or M.CONFIG_DIR
  return { policies = dir .. "/policies", bot_env = dir .. "/bot.env", sandboxd_env = dir .. "/sandboxd.env" }
end

-- NAME=value lines of an EnvironmentFile (comments and blank lines skipped; values unquoted
-- the way systemd does for a plain value or one in double/single quotes).
function M.read_env_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local vars = {}
  for line in f:lines() do
    local name, value = line:match("^%s*([%a_][%w_]*)%s*=%s*(.-)%s*$")
    if name then
      value = value:match('^"(.*)"$') or value:match("^'(.*)'$") or value
      if value ~= "" then vars[name] = value end
    end
  end
  f:close()
  return vars
end

local function is_dir(path)
  local ok, names = pcall(core.fs.list, path)
  return ok and type(names) == "table"
end

local function nonempty(v)
  if type(v) == "string" and v:find("%S") then return v end
  return nil
end

local function first_line(s) return (tostring(s):match("^[^\n]*")) end

-- One HTTP call with the deadline every check shares; → status, doc (decoded JSON or nil) |
-- nil, why
local function call(args)
  local status, headers, body = core.http.request(args)
  if status == nil then
    local err = headers
    return nil, type(err) == "table" and (err.message or err.kind) or tostring(err)
  end
  local doc = core.json.decode(body or "")
  return status, type(doc) == "table" and doc or nil
end

---------------------------------------------------------------------------------------------
-- The checks: each returns "ok" | "skip" | "FAIL", the text.

local function check_policies(ctx)
  local snap, errs = policy.load_initial(ctx.policies_dir)
  if not snap then
    return "FAIL", ("%s — fix: edit that line, then `switchboard policy check`"):format(first_line(errs[1]))
  end
  local unreadable = ctx.policies_dir and require("switchboard.commands.policy").unreadable_overlays(ctx.policies_dir) or {}
  if unreadable[1] then return "FAIL", unreadable[1] end
  return "ok", ("%s (version %s)"):format(snap.dir, snap.version:sub(1, 12))
end

local function permissions_text(perms)
  if type(perms) ~= "table" then return "none listed" end
  local names = {}
  for k, v in pairs(perms) do names[#names + 1] = k .. ":" .. tostring(v) end
  table.sort(names)
  return table.concat(names, " ")
end

local function check_github(ctx)
  local id = ctx.credentials or identity.from_env(ctx.getenv)
  if id.kind == "none" then
    return "skip", "no GitHub credential (set GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY, or GH_TOKEN)"
  end
  if id.kind ~= "app" then
    if id.kind == "env" then return "ok", "GH_TOKEN from the environment (passed through; not checked)" end
    return "FAIL", id:describe()
  end
  local jwt, jerr = id.app:jwt()
  if not jwt then
    return "FAIL", tostring(jerr) .. " — fix: GITHUB_APP_PRIVATE_KEY must be the App's private key (PEM or a file path)"
  end
  if id.installation_id == nil then
    local status, doc = id.app:call("GET", "/app/installations")
    if status ~= 200 then
      return "FAIL", ("the App's JWT signs, but GET /app/installations answered %s — fix: check GITHUB_APP_ID and the key belong to one App"):format(tostring(status or doc))
    end
    return "ok", ("%s: key signs; %d installation(s); set GITHUB_APP_INSTALLATION_ID to check one's permissions")
      :format(id:describe(), type(doc) == "table" and #doc or 0)
  end
  local status, doc = id.app:call("GET", "/app/installations/" .. id.installation_id)
  if status == 200 and type(doc) == "table" then
    return "ok", ("%s: key signs; installation %d (%s) grants %s"):format(id:describe(), id.installation_id,
      type(doc.account) == "table" and tostring(doc.account.login) or "?", permissions_text(doc.permissions))
  end
  if status == 401 then
    return "FAIL", ("GitHub refused the App's JWT (401) — fix: GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY must belong to the same App, and this host's clock must be right")
  end
  if status == 404 then
    return "FAIL", ("installation %d not found (404) — fix: GITHUB_APP_INSTALLATION_ID is the number at the end of the installation's settings URL"):format(id.installation_id)
  end
  return "FAIL", ("GET /app/installations/%d: %s"):format(id.installation_id, tostring(status or doc))
end

-- Each token with the call that proves it for what the bot does with it: the bot token's
-- auth.test (who the bot is), the app token's apps.connections.open (a Socket Mode URL: the
-- app-level token is what opens the bot's connection, and auth.test is not a call it is for).
local SLACK_PROOF = {
  { name = "SLACK_BOT_TOKEN", method = "auth.test",
    said = function(doc) return ("team %s, user %s"):format(tostring(doc.team or "?"), tostring(doc.user or doc.user_id or "?")) end },
  { name = "SLACK_APP_TOKEN", method = "apps.connections.open",
    said = function(doc) return type(doc.url) == "string" and "opens a Socket Mode connection" or nil end },
}

local function check_slack(ctx, snap)
  local base = (nonempty(ctx.getenv("SLACK_API_URL")) or "https://slack.com/api"):gsub("/+$", "")
  local said, any = {}, false
  for _, proof in ipairs(SLACK_PROOF) do
    local name = proof.name
    local token = nonempty(ctx.getenv(name))
    if token then
      any = true
      core.log_redact(token)
      local status, doc = call{ method = "POST", url = base .. "/" .. proof.method,
        headers = { authorization = "Bearer " .. token, ["content-type"] = "application/x-www-form-urlencoded" },
        body = "", deadline_ms = snap.github.request_timeout_ms }
      if status ~= 200 or type(doc) ~= "table" then
        return "FAIL", ("%s: %s at %s answered %s — fix: check the network or SLACK_API_URL"):format(name,
          proof.method, base, tostring(status or doc))
      end
      local what = doc.ok == true and proof.said(doc)
      if not what then
        return "FAIL", ("%s: %s says %s — fix: copy the token again from the app's settings (api.slack.com/apps)")
          :format(name, proof.method, tostring(doc.error or "not ok"))
      end
      said[#said + 1] = ("%s ok (%s)"):format(name, what)
    end
  end
  if not any then return "skip", "no Slack token (set SLACK_BOT_TOKEN and SLACK_APP_TOKEN)" end
  return "ok", table.concat(said, "; ")
end

local function check_model(ctx, snap)
  local key = nonempty(ctx.getenv("ANTHROPIC_API_KEY"))
  if not key then return "skip", "no model key (set ANTHROPIC_API_KEY)" end
  core.log_redact(key)
  local base = (nonempty(ctx.getenv("ANTHROPIC_BASE_URL")) or "https://api.anthropic.com"):gsub("/+$", "")
  local status, doc = call{ method = "GET", url = base .. "/v1/models",
    headers = { ["x-api-key"] = key, ["anthropic-version"] = "2023-06-01" },
    deadline_ms = snap.github.request_timeout_ms }
  if status == 200 then return "ok", ("ANTHROPIC_API_KEY accepted by %s"):format(base) end
  if status == 401 or status == 403 then
    return "FAIL", ("ANTHROPIC_API_KEY refused by %s (%d) — fix: create a key in the console and set it again"):format(base, status)
  end
  return "FAIL", ("%s/v1/models answered %s — fix: check the network or ANTHROPIC_BASE_URL"):format(base, tostring(status or doc))
end

-- The bot's front: would `switchboard slack` here run any agent's commands unwalled?
local function check_bot(ctx, snap)
  if not nonempty(ctx.getenv("SLACK_BOT_TOKEN")) then
    return "skip", "no SLACK_BOT_TOKEN (set it to check the bot's walls)"
  end
  local unwalled = factory.unwalled_agents({ front = "slack", getenv = ctx.getenv,
    sandbox_url = ctx.sandbox_url }, snap)
  -- switchboard-bot.service runs the bot as User=switchboard, where the local executor's
  -- walls cannot be built (they need root): `switchboard slack` refuses to start there.
  local walled_local = ctx.installed and factory.walled_local_agents(
    { front = "slack", getenv = ctx.getenv, sandbox_url = ctx.sandbox_url }, snap) or {}
  if #unwalled == 0 and #walled_local > 0 then
    local names = {}
    for _, u in ipairs(walled_local) do names[#names + 1] = u.agent end
    return "FAIL", ("agents %s would run on the local executor's walls, which switchboard-bot.service "
      .. "(User=switchboard) cannot build: they need root, so the bot refuses to start — fix: set "
      .. "SANDBOX_URL=http://127.0.0.1:8080 and SANDBOX_TOKEN (the one in %s) in %s"):format(
        table.concat(names, ", "), ctx.paths.sandboxd_env, ctx.paths.bot_env)
  end
  if #unwalled == 0 then
    local backend = factory.backend_for({ front = "slack", getenv = ctx.getenv, sandbox_url = ctx.sandbox_url },
      snap, { agent = snap.agents.default_agent })
    return "ok", ("every agent's commands run walled or remote (%s: %s)"):format(snap.agents.default_agent,
      backend == "local" and "local, walled" or backend)
  end
  local names = {}
  for _, u in ipairs(unwalled) do names[#names + 1] = u.agent end
  return "FAIL", ("agents %s would run Slack users' commands unwalled next to the bot's secrets (%s is "
    .. "false); `switchboard slack` refuses to start — fix: set SANDBOX_URL and SANDBOX_TOKEN (a sandboxd), "
    .. "or local_walls.slack = true in policies/isolation.lua"):format(table.concat(names, ", "), unwalled[1].setting)
end

-- A file's first line (a /proc or /sys setting), or nil when it cannot be read.
local function read_first(path)
  local text = core.fs.read_file(path)
  return text and text:match("^[^\n]*") or nil
end

-- The helper sandboxd would use: $SWITCHBOARD_WALLS_HELPER, else next to this binary.
local function walls_helper(ctx)
  local env = nonempty(ctx.getenv("SWITCHBOARD_WALLS_HELPER"))
  if env then return env, "SWITCHBOARD_WALLS_HELPER" end
  local exe = core.fs.realpath("/proc/self/exe")
  local dir = type(exe) == "string" and exe:match("^(.*)/[^/]+$")
  return dir and (dir .. "/switchboard-walls") or "switchboard-walls", "next to the switchboard binary"
end

-- What to change when the proof failed: the kernel switches that refuse user namespaces, read
-- where this host has them (a missing file is a kernel without that switch).
local function userns_fix(ctx)
  local root = ctx.sysroot or ""
  if read_first(root .. "/proc/sys/kernel/unprivileged_userns_clone") == "0" then
    return "sysctl -w kernel.unprivileged_userns_clone=1 (Debian's switch for user namespaces)"
  end
  if read_first(root .. "/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" then
    return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for bwrap"
  end
  local max_ns = tonumber(read_first(root .. "/proc/sys/user/max_user_namespaces") or "")
  if max_ns == 0 then return "sysctl -w user.max_user_namespaces=15000" end
  return nil
end

-- Where the walls' proof makes its throwaway root: $TMPDIR, /tmp when unset (docs/cli.md
-- "doctor"). Like sandboxd's --root, every directory above it must let the instance's uid pass
-- (0711 or 1777, as /tmp is).
local function scratch_parent(getenv)
  local tmp = getenv("TMPDIR")
  if not tmp or tmp == "" then return "/tmp" end
  return (tmp:gsub("(.)/+$", "%1"))
end

-- The walls proven the way `switchboard sandboxd` proves them when it starts (shell/instance.lua
-- host{scratch}): the helper runs, bwrap is installed, the kernel gives user namespaces and
-- cgroups, and a throwaway instance is built in a scratch directory and runs a command.
local function check_walls(ctx, snap)
  local helper, from = walls_helper(ctx)
  -- run bare, the helper prints its usage and exits at once: the call margin is a bound only
  local pr, perr = run.tool{ argv = { helper }, env = {}, deadline_ms = snap.timeouts.call.margin_ms }
  if not pr then
    local why = type(perr) == "table" and perr.message or tostring(perr)
    return "FAIL", ("the walls helper %s (%s) does not run: %s — fix: build it (cmake --build build) "
      .. "or install it next to switchboard, or point SWITCHBOARD_WALLS_HELPER at it"):format(helper, from,
      first_line(why):gsub("^cannot start '[^']*': ", ""))
  end
  if pr.signal then
    return "FAIL", ("the walls helper %s died of signal %s when started — fix: rebuild it for this host "
      .. "(cmake --build build)"):format(helper, tostring(pr.signal))
  end
  local tmp = scratch_parent(ctx.getenv or os.getenv)
  local scratch = ("%s/switchboard-doctor-%s"):format(tmp, core.crypto.hex(core.crypto.random_bytes(6)))
  local made, merr = core.fs.mkdir_p(scratch, tonumber("700", 8))
  if not made then
    return "FAIL", ("cannot make a scratch directory %s for the test instance: %s — fix: make %s writable "
      .. "or point TMPDIR at a directory that is"):format(scratch, tostring(merr and merr.message), tmp)
  end
  local walls, why = instance.host{ snap = snap, policy = function() return snap end, scratch = scratch,
    helper = helper, owner = { kind = "doctor", root = scratch } }
  if walls then walls:close() end
  core.fs.remove_tree(scratch)
  if not walls then
    why = first_line(why)
    local fix
    if why:find("bwrap is not installed", 1, true) then
      why, fix = "bwrap is not installed (not on PATH)", "apt-get install bubblewrap"
    elseif why:find("the walls need root", 1, true) then
      fix = "run doctor as root (sudo), as switchboard-sandboxd.service runs sandboxd"
    elseif why:find("namespace") or why:find("uid map") or why:find("Operation not permitted")
        or why:find("Permission denied") then
      fix = userns_fix(ctx)
    end
    return "FAIL", why .. (fix and (" — fix: " .. fix) or " — see docs/isolation.md")
  end
  return "ok", ("%s runs; a test instance (namespaces, cgroup v%d) ran a command, as sandboxd's "
    .. "start-up proves it"):format(helper, walls.layout.version)
end

---------------------------------------------------------------------------------------------

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = SPEC, usage = function(p)
    if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
  end })
  if not p then return status end
  ctx = p.ctx
  ctx.getenv = ctx.getenv or os.getenv
  ctx.sandbox_url = p.opts.sandbox_url
  -- On an installed host, what the services load (deploy/systemd/*.service).
  ctx.paths = installed_paths(ctx.getenv)
  if ctx.policies_dir == nil and not ctx.no_installed and is_dir(ctx.paths.policies) then
    ctx.policies_dir = ctx.paths.policies
    ctx.installed = true
    local vars = M.read_env_file(ctx.paths.bot_env) or {}
    for name, v in pairs(vars) do
      if require("switchboard.policy.schema").is_secret_name(name) then core.log_redact(v) end
    end
    local own = ctx.getenv
    ctx.getenv = function(name) local v = own(name) if v ~= nil and v ~= "" then return v end return vars[name] end
    -- the GitHub identity as the bot would make it: from bot.env too (the CLI's came from this
    -- process's environment alone, and said "no GitHub credential" over a GH_TOKEN in bot.env)
    ctx.credentials = identity.from_env(ctx.getenv)
    p:say(("installed host: checking %s and %s%s"):format(ctx.paths.policies, ctx.paths.bot_env,
      next(vars) and "" or " (not readable or empty: run as root)"))
  end
  local failed = 0
  local function line(name, verdict, text)
    if verdict == "FAIL" then failed = failed + 1 end
    p:say(("%-5s %-9s %s"):format(verdict, name, text))
  end
  local verdict, text = check_policies(ctx)
  line("policies", verdict, text)
  -- the other checks need numbers from a policy: the one that loaded, else the shipped one
  local snap = policy.current()
  local checks = {
    { "github", function() return check_github(ctx) end },
    { "slack", function() return check_slack(ctx, snap) end },
    { "model", function() return check_model(ctx, snap) end },
  }
  -- each backend's own row (exec/backends.lua: sandbox's is "sandboxd")
  local backend_env = { getenv = ctx.getenv, sandbox_url = p.opts.sandbox_url, call = call }
  for _, name in ipairs(backends.names()) do
    local d = backends.get(name).doctor
    if d then checks[#checks + 1] = { d.name, function() return d.check(backend_env, snap) end } end
  end
  checks[#checks + 1] = { "walls", function() return check_walls(ctx, snap) end }
  checks[#checks + 1] = { "bot", function() return check_bot(ctx, snap) end }
  for _, c in ipairs(checks) do
    local ok, v, t = pcall(c[2])
    if not ok then v, t = "FAIL", "the check itself failed: " .. first_line(v) end
    line(c[1], v, t)
  end
  p:say(failed == 0 and "doctor: nothing failed" or ("doctor: %d check%s failed"):format(failed, failed == 1 and "" or "s"))
  return failed == 0 and 0 or 1
end

return M
