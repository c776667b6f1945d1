-- `switchboard resident`: the warm per-repository server (docs/resident.md), and its
-- onboarding client (`switchboard resident onboard OWNER/NAME`, `… status OWNER/NAME`).
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local resident_client = require("switchboard.exec.resident_client")
local sandboxd_cmd = require("switchboard.commands.sandboxd")
local server = require("switchboard.resident.server")
local walls_mod = require("switchboard.launch.walls")

local M = {
  name = "resident",
  summary = "serve warm, deps-ready checkouts of onboarded repositories (and onboard them)",
}

M.EXIT = { usage = prologue.EXIT.usage, listen = 71, config = prologue.EXIT.config, unavailable = 69 }

M.help = [[
Usage: switchboard resident --listen HOST:PORT --root DIR [--git-base URL] [--no-walls]
       switchboard resident onboard OWNER/NAME [--url URL] [--wait]
       switchboard resident status OWNER/NAME [--url URL]

The first form serves the resident: each onboarded repository is cloned once from
GIT-BASE/OWNER/NAME under DIR, its install command runs once (npm ci, pnpm install, pip …:
policies/execution.lua resident.install) and it is fetched every timeouts resident.fetch_every_ms.
Each conversation thread attaches its own repository of the warm checkout (its own refs and
index, the checkout's objects shared read-only) and runs commands there over sandboxd's wire
protocol. Every route needs `authorization: Bearer $RESIDENT_TOKEN`
(the variable policies/execution.lua resident.token_env names); the server refuses to start
without it.

`onboard` asks a running resident ($RESIDENT_URL, or --url) to onboard a repository;
with --wait it waits until the repository is warm or degraded and says which. `status` prints
the repository's state: warm, cold, onboarding, degraded (with the reason) or not onboarded.

Options:
  --listen HOST:PORT   where to listen (port 0: any free port; resident.listening names it)
  --root DIR           checkouts (DIR/repos) and thread worktrees (DIR/threads)
  --git-base URL       where repositories are cloned from (default https://github.com/); a
                       file:// URL or a git daemon work too
  --no-walls           DEVELOPMENT ONLY: thread commands run without the walls (namespaces,
                       cgroups, a uid of their own; docs/isolation.md). Without the flag the
                       resident refuses to start where the kernel cannot give them.
  --url URL            the resident to ask (default $RESIDENT_URL)
  --wait               (onboard) wait for warm or degraded

Signals:
  HUP        reload the policies
  TERM, INT  stop accepting, let requests in flight finish (timeouts server.drain_ms), then kill
             what is left — those commands answer runtime-replaced — and exit 0; worktrees and
             checkouts stay for the next start (checkouts are cold until their first fetch)

Exit status: 0 ok; 2 bad arguments; 69 the resident cannot be reached or refused; 71 cannot
listen; 78 no token, the policies do not load, or the walls cannot be built.

Examples:
  RESIDENT_TOKEN=$(openssl rand -hex 32) switchboard resident --listen 127.0.0.1:8090 --root /var/lib/resident
  RESIDENT_URL=http://127.0.0.1:8090 switchboard resident onboard acme/api --wait
]]

local SPEC = { listen = "string", root = "string", ["git-base"] = "string", url = "string", wait = "flag",
  ["no-walls"] = "flag" }

local function client(p, ctx, verb, repo)
  local snap, opts = p.snap, p.opts
  local getenv = ctx.getenv or os.getenv
  local cfg = snap.execution.resident
  local url, token = resident_client.configured(snap, getenv, opts.url)
  if not url then
    local bearer = getenv(cfg.token_env)
    if token == cfg.token_env or bearer == nil or bearer == "" then
      return p:fail(M.EXIT.config, token .. " is not set: the resident's routes need its bearer")
    end
    return p:fail(M.EXIT.config, ("no resident to ask: pass --url or set %s"):format(cfg.url_env))
  end
  local c = resident_client.new{ url = url, token = token }
  local deadline_ms = snap.timeouts.resident.probe_timeout_ms + snap.timeouts.call.margin_ms
  local function state()
    local status, doc = c:call("GET", "/status?repo=" .. repo, nil, deadline_ms)
    if status == nil then return nil, core.error("unavailable", "the resident cannot be reached: " .. tostring(doc and doc.message or doc)) end
    if not doc then return nil, core.error("unavailable", ("the resident answered HTTP %d"):format(status)) end
    if status == 404 then return { state = "not onboarded", reason = doc.error } end
    if status ~= 200 then return nil, core.error("unavailable", ("the resident answered HTTP %d: %s"):format(status, tostring(doc.error))) end
    return doc
  end
  if verb == "onboard" then
    local status, err, raw = c:call("POST", "/onboard", { repo = repo }, deadline_ms)
    if status == nil then return p:fail(M.EXIT.unavailable, "the resident cannot be reached: " .. tostring(err and err.message)) end
    if status ~= 202 then return p:fail(M.EXIT.unavailable, ("the resident refused (HTTP %d): %s"):format(status, raw)) end
  end
  local doc, why = state()
  while doc and opts.wait and doc.state == "onboarding" do
    core.sleep(200)
    doc, why = state()
  end
  if not doc then return p:fail(M.EXIT.unavailable, why) end
  p:say(("%s: %s%s"):format(repo, doc.state, doc.reason and (" (" .. doc.reason .. ")") or ""))
  if doc.state == "degraded" or doc.state == "not onboarded" then return 1 end
  return 0
end

local function usage_problem(p)
  local verb = p.words[1]
  if verb == "onboard" or verb == "status" then
    if not p.words[2] then return verb .. " needs OWNER/NAME (see --help)" end
    if #p.words > 2 then return ("unexpected %q (see --help)"):format(p.words[3]) end
    return
  end
  if verb then return ("unexpected %q (see --help)"):format(verb) end
  if not p.opts.listen then return "--listen HOST:PORT is required (see --help)" end
  if not p.opts.root or p.opts.root == "" then return "--root DIR is required (see --help)" end
  local host, why = sandboxd_cmd.parse_listen(p.opts.listen)
  if not host then return why.message end
end

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = SPEC, usage = usage_problem, policies = true })
  if not p then return status end
  if p.words[1] then return client(p, ctx, p.words[1], p.words[2]) end
  local opts, snap = p.opts, p.snap
  local host, port = sandboxd_cmd.parse_listen(opts.listen)
  local name = snap.execution.resident.token_env
  -- Read once and removed from the environment; the process is not dumpable (docs/isolation.md).
  local token = ctx.getenv and ctx.getenv(name) or core.secrets.take_env(name)
  core.secrets.not_dumpable()
  if token == nil or token == "" then
    return p:fail(M.EXIT.config, ("%s is not set: every route needs `authorization: Bearer <token>`, so the "
      .. "resident does not start without one. Set it to a long random secret (`export %s=$(openssl rand -hex 32)`) "
      .. "and give the bot the same value."):format(name, name))
  end
  core.log_redact(token)
  local ok, err = walls_mod.make_root(opts.root)
  if not ok then return p:fail(M.EXIT.config, "--root: " .. tostring(err.message)) end
  local root = core.fs.realpath(opts.root) or opts.root
  local walls, wstatus = walls_mod.build(p, opts, snap, root, "resident", "the resident's threads", M.EXIT.config)
  if walls == false then return wstatus end
  local srv, serr = server.start{ host = host, port = port, root = root, token = token,
    git_base = opts.git_base or "https://github.com/", getenv = ctx.getenv, walls = walls }
  if not srv then
    return p:fail(M.EXIT.listen, ("cannot listen on %s: %s"):format(opts.listen, tostring(serr and serr.message or serr)))
  end
  return p:serve(srv, walls, "resident.listening", { host = host, port = srv.port, root = root,
    generation = srv.generation, version = snap.version })
end

return M
