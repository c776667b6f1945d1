-- The resident's routes (docs/resident.md): the handler core.http.serve runs, one task per
-- request. Every route is behind the bearer (sandboxd/auth.lua, the same constant-time check);
-- /exec, /read and /write are sandboxd's own handlers (sandboxd/routes.lua: the wire protocol,
-- heartbeats, the clamp and 124, the dual failure shape) run against the thread's worktree.
--
--   GET  /status?repo=OWNER/NAME → 200 {repo, state, reason?} | 404 {error, reason: "not-onboarded"}
--   POST /onboard {repo}         → 202 {repo, state}
--   POST /attach  {repo, ref?}   → 200 {repo, ref, commit, reused, generation}
--                                  | 404 not-onboarded | 409 {reason: "not-warm", state} | 500
--   POST /detach  {force?}       → 200 {detached, killed} | 409 {reason: "busy"} (a command runs
--                                  and force is not set)
--   POST /exec, /read, /write    → sandboxd's answers; a thread with no worktree (never attached,
--                                  evicted, or a new process since): 409 {reason: "not-attached"}
--                                  (/exec in the dual shape); a command killed because the
--                                  resident's runtime is being replaced: the dual shape with
--                                  code and reason "runtime-replaced" and the generation
--   GET  /healthz                → 200 {ok, build, generation, repos, threads}
local core = require("switchboard.core")
local auth = require("switchboard.sandboxd.auth")
local sandbox_routes = require("switchboard.sandboxd.routes")
local runner = require("switchboard.sandboxd.runner")
local protocol = require("switchboard.shell.protocol")
local child_env = require("switchboard.shell.child_env")
local workspace = require("switchboard.shell.workspace")
local repos_mod = require("switchboard.resident.repos")

local M = {}

local json = sandbox_routes.json
local JSON = { ["content-type"] = "application/json", ["cache-control"] = "no-store" }

M.ROUTES = {
  ["/status"] = "GET", ["/onboard"] = "POST", ["/attach"] = "POST", ["/detach"] = "POST",
  ["/exec"] = "POST", ["/read"] = "POST", ["/write"] = "POST", ["/healthz"] = "GET",
}
local ROUTE_LIST = "GET /status, POST /onboard, POST /attach, POST /detach, POST /exec, POST /read, POST /write, GET /healthz"

M.REPLACED_REASON = "runtime-replaced"
M.NOT_ATTACHED = "not-attached"

local function send_json(res, status, doc) res:send(status, JSON, json.encode(doc)) end

local function refuse(res, path, status, text, reason, extra)
  local doc = path == "/exec" and protocol.exec_failure(text, reason) or { error = text, reason = reason }
  for k, v in pairs(extra or {}) do doc[k] = v end
  return send_json(res, status, doc)
end

local function body_of(req)
  local doc = json.decode(req.body ~= "" and req.body or "{}")
  if type(doc) ~= "table" or rawget(doc, 1) ~= nil then return nil end
  return doc
end

local function unescape(s) return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)) end

local function query_param(query, name)
  for pair in tostring(query or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    if unescape(k) == name then return unescape(v) end
  end
end

function M.not_onboarded_text(repo)
  return ("%s is not onboarded on the resident; onboard it once with `repo onboard %s` (or "
    .. "`switchboard resident onboard %s`), then ask again"):format(repo, repo, repo)
end

function M.replaced_text(generation)
  return ("resident runtime replaced under the command: a deploy restarted `switchboard resident` "
    .. "(generation %s ended) and the command was killed; the worktree is kept — run it again"):format(generation)
end

---------------------------------------------------------------------------------------------
-- Threads: key → {runner, repo, dir, busy}. The worktree is the runner's workspace
-- (threads_root/<dir_name(key)>), so sandboxd's runner runs commands and files in it as is.

-- The thread's HEAD as the thread's own git sees it: a command in its instance (walled: its
-- uid, its namespaces, its view), never the resident's git on the thread's files. The worktree
-- is the thread's, `.git` included: replaced by a gitfile (`gitdir: <another repository's
-- checkout>/.git`) or holding a HEAD that links elsewhere, the resident's git (its user,
-- safe.directory=*) answered another repository's HEAD (issue 35 item 7); the thread's git
-- sees no such path. nil when the thread's git shows no commit.
local function head_commit(ctx, t, limit)
  local snap = ctx.policy()
  local r = t.runner:exec{ command = "git rev-parse --verify --quiet HEAD", env = child_env.base(snap),
    deadline_ms = limit, kill_grace_ms = snap.timeouts.bash.kill_grace_ms, max_output = 4096 }
  return r and r.exit == 0 and r.stdout:match("^(%x+)\n$") or nil
end

-- The thread's own repository at `target` (docs/resident.md "A thread's repository"): a
-- `.git` directory of its own (HEAD, index, refs, config: private, read-write) whose object
-- store borrows the warm checkout's through objects/info/alternates — nothing is copied; only
-- the thread's new objects are written to its own store. The refs are the checkout's
-- remote-tracking branches and tags (a local fetch: every object is there already, so none
-- moves); `origin` is the upstream URL, so fetch, push and gh go where a user expects.
-- Not `git clone --shared`: that would take the checkout's local branches as origin/*, and
-- leave origin pointing at the checkout's path.
local function make_repo(ctx, e, dir, ref, limit)
  local function git(...)
    return repos_mod.tool(ctx.repos, { "git", ... }, nil, limit)
  end
  local ok, err = git("init", "--quiet", "--template=", "--", dir) -- no sample hooks: 60 KiB a thread
  if not ok then return nil, err end
  core.fs.mkdir_p(dir .. "/.git/info", tonumber("755", 8))
  ok, err = core.fs.write_file(dir .. "/.git/objects/info/alternates", e.checkout .. "/.git/objects\n")
  if not ok then return nil, core.error("workspace", "cannot write the alternates: " .. tostring(err and err.message or err), { cause = err }) end
  ok, err = git("-C", dir, "fetch", "--quiet", "--no-tags", "--", e.checkout,
    "+refs/remotes/origin/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
  if not ok then return nil, err end
  local url = e.upstream or (ctx.repos.git_base .. e.name)
  ok, err = git("-C", dir, "remote", "add", "origin", url)
  if not ok then return nil, err end
  local hok, head = git("-C", e.checkout, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD")
  local target = hok and head.stdout:match("^(refs/remotes/origin/%S+)")
  if target then git("-C", dir, "symbolic-ref", "refs/remotes/origin/HEAD", target) end
  local want = ref or "origin/HEAD"
  ok, err = git("-C", dir, "checkout", "--quiet", "--detach", want)
  if not ok and ref then ok, err = git("-C", dir, "checkout", "--quiet", "--detach", "origin/" .. ref) end
  if not ok then return nil, err end
  return true
end

-- The install's dependency directories, copied in (copy-on-write where the file system can),
-- and ignored by the thread's git (.git/info/exclude): they are the resident's, not the tree's,
-- whether or not the repository ignores them itself.
local function copy_deps(ctx, e, dir, deadline_ms)
  local exclude = { "# copied in by the resident from the warm checkout (docs/resident.md)" }
  for _, d in ipairs(e.install and e.install.deps or {}) do
    exclude[#exclude + 1] = "/" .. d .. "/"
    local from = e.checkout .. "/" .. d
    if core.fs.exists(from) and not core.fs.exists(dir .. "/" .. d) then
      local ok, why = repos_mod.tool(ctx.repos, { "cp", "-a", "--reflink=auto", "--", from, dir .. "/" .. d }, nil, deadline_ms)
      if not ok then return nil, why end
    end
  end
  local ok, err = core.fs.write_file(dir .. "/.git/info/exclude", table.concat(exclude, "\n") .. "\n")
  if not ok then return nil, core.error("workspace", "cannot write .git/info/exclude: " .. tostring(err and err.message or err), { cause = err }) end
  return true
end

-- Empties the thread's directory but keeps the directory itself: an awake instance of the
-- thread has it bound at /workspace (the bind follows the inode), so a new directory in its
-- place would leave the thread's commands in a deleted one. Each removal runs off the loop
-- (core.fs.remove_tree in a task: the thread pool), so a tree of 10⁵ files does not stall it.
-- The directory is the resident's again (the owner of the threads root), as a new one would
-- be: git refuses to work in a repository another user owns (safe.directory). It is taken
-- (owner, then mode 0700) before anything is removed: the resident's git runs in it next, and
-- a thread's command still writing there (the thread owned it, and may have made it 0777) could
-- otherwise plant a .git — a gitfile, a config with hooks — between the removal and `git init`.
-- False when the directory is not empty after all.
local function empty_dir(ctx, dir, limit)
  if not core.fs.exists(dir) then return true end
  repos_mod.tool(ctx.repos, { "chown", "--reference=" .. ctx.threads_root, "--", dir }, nil, limit)
  repos_mod.tool(ctx.repos, { "chmod", "0700", "--", dir }, nil, limit)
  for _, name in ipairs(core.fs.list(dir) or {}) do core.fs.remove_tree(dir .. "/" .. name) end
  return #(core.fs.list(dir) or {}) == 0
end

local function attach(ctx, key, body, res)
  local repo, why = repos_mod.check_name(body.repo)
  if not repo then return refuse(res, "/attach", 400, why.message) end
  local ref = body.ref
  if ref ~= nil and (type(ref) ~= "string" or not ref:find("^[%w_./@^~-]+$") or ref:find("^%-")) then
    return refuse(res, "/attach", 400, "ref must be a branch, tag or commit name")
  end
  local e = ctx.repos:get(repo)
  if not e then return refuse(res, "/attach", 404, M.not_onboarded_text(repo), "not-onboarded") end
  if e.state ~= "warm" then
    return refuse(res, "/attach", 409, ("%s is %s%s; threads attach only to a warm checkout"):format(
      repo, e.state, e.reason and (" (" .. e.reason .. ")") or ""), "not-warm", { state = e.state })
  end
  local t = ctx.threads[key]
  if t and t.repo ~= repo then
    return refuse(res, "/attach", 409, ("this thread is attached to %s; detach it first"):format(t.repo), "attached-elsewhere")
  end
  local dir = workspace.path(ctx.threads_root, key)
  local reused = core.fs.exists(dir .. "/.git") -- (an older resident's worktree too: its files are kept)
  local limit = ctx.policy().timeouts.resident.attach_timeout_ms
  if ctx.attaching[key] then
    return refuse(res, "/attach", 409, "this thread is already attaching; send the request again in a moment", "attaching")
  end
  ctx.attaching[key] = true
  local busy <close> = setmetatable({}, { __close = function() ctx.attaching[key] = nil end })
  if not reused then
    if not empty_dir(ctx, dir, limit) then
      return refuse(res, "/attach", 500, "the thread's directory could not be emptied for its new repository", "attach-failed")
    end
    local ok, err = make_repo(ctx, e, dir, ref, limit)
    if not ok then
      empty_dir(ctx, dir, limit)
      return refuse(res, "/attach", 500, "the thread's repository could not be made: " .. err.message, "attach-failed")
    end
    local copied, cerr = copy_deps(ctx, e, dir, limit)
    if not copied then return refuse(res, "/attach", 500, "the dependencies could not be copied: " .. cerr.message, "attach-failed") end
    repos_mod.tool(ctx.repos, { "chmod", "0700", "--", dir }, nil, limit) -- the thread's alone, like a workspace
  end
  if not t then
    -- walled, the thread's instance (its namespaces, cgroups and host uid) exists from the
    -- attach on and the worktree is that uid's (the workspace hands it over), so its commands
    -- can edit every file in it; it shows the checkout's objects (the thread's alternates)
    -- read-only at the same path, and nothing else of the checkout
    t = { repo = repo, dir = dir, busy = 0, label = runner.label(key),
          runner = runner.new(ctx.threads_root, key, { existing = true, walls = ctx.walls, log = ctx.log,
            ro_binds = { e.checkout .. "/.git/objects" } }) }
    ctx.threads[key] = t
  end
  -- a repository made anew (not reused) is the resident's files: the workspace hands them to
  -- the thread's instance, an awake one included (its /workspace is bound to this directory)
  local ok, err = t.runner:ensure{ remade = not reused }
  if not ok then
    return refuse(res, "/attach", 500, "the thread's walls could not be built: " .. tostring(err and err.message or err), "attach-failed")
  end
  ctx.log("info", "resident.attached", { thread = t.label, repo = repo, reused = reused })
  send_json(res, 200, { repo = repo, ref = ref or "origin/HEAD", commit = head_commit(ctx, t, limit),
    reused = reused, generation = ctx.generation })
end

local function detach(ctx, key, body, res)
  local t = ctx.threads[key]
  local dir = workspace.path(ctx.threads_root, key)
  if t and t.busy > 0 and body.force ~= true then
    return refuse(res, "/detach", 409, "a command is running in this thread's worktree; send force: true to kill it", "busy")
  end
  local killed = t and t.busy or 0
  ctx.threads[key] = nil
  local r = t and t.runner or runner.new(ctx.threads_root, key, { existing = true })
  r:stop("detach") -- kills every running command's process group, then moves the worktree away
  ctx.log("info", "resident.detached", { thread = runner.label(key), killed = killed, force = body.force == true })
  send_json(res, 200, { detached = core.fs.exists(dir) == false, killed = killed })
end

-- The thread-table face sandboxd's routes expect of a fleet.
local function fleet_of(ctx)
  local f = { awake = 0 }
  function f.max() return math.huge end
  function f.acquire(_, key)
    local t = ctx.threads[key]
    if not t then
      return nil, core.error("closed", "the thread is not attached (or was detached)", { code = "closed" })
    end
    t.busy = t.busy + 1
    return { key = key, runner = t.runner, label = t.label, thread = t }
  end
  function f.release(_, inst) inst.thread.busy = inst.thread.busy - 1 end
  return f
end

-- sandboxd's /exec answer, except that a command killed by this process's shutdown answers
-- runtime-replaced: the shutdown of a resident is a deploy replacing its runtime.
local function replacing(ctx, res)
  local w = {}
  function w.start(_, ...) return res:start(...) end
  function w.write(_, ...) return res:write(...) end
  function w.drain(_, ...) return res:drain(...) end
  function w.send(_, ...) return res:send(...) end
  function w.finish(_, bytes)
    if ctx.stopping.aborted then
      local doc = json.decode(bytes or "")
      if type(doc) == "table" and doc.error ~= nil then
        local d = protocol.exec_failure(M.replaced_text(ctx.generation), M.REPLACED_REASON)
        d.code, d.generation = M.REPLACED_REASON, ctx.generation
        bytes = json.encode(d)
      end
    end
    return res:finish(bytes)
  end
  return setmetatable(w, { __index = function(_, k) return res[k] end })
end

local function status(ctx, req, res)
  local repo, why = repos_mod.check_name(query_param(req.query, "repo"))
  if not repo then return send_json(res, 400, { error = "/status needs ?repo=OWNER/NAME: " .. why.message }) end
  local e = ctx.repos:get(repo)
  if not e then return send_json(res, 404, { repo = repo, error = M.not_onboarded_text(repo), reason = "not-onboarded" }) end
  send_json(res, 200, { repo = repo, state = e.state, reason = e.reason, generation = ctx.generation })
end

local function onboard(ctx, req, res)
  local body = body_of(req)
  if not body then return send_json(res, 400, { error = "the /onboard body must be a JSON object {repo}" }) end
  local e, why = ctx.repos:onboard(body.repo)
  if not e then return send_json(res, 400, { error = why.message }) end
  send_json(res, 202, { repo = e.name, state = e.state, reason = e.reason })
end

local function healthz(ctx, res)
  local n, t = 0, 0
  for _ in pairs(ctx.repos.entries) do n = n + 1 end
  for _ in pairs(ctx.threads) do t = t + 1 end
  send_json(res, 200, { ok = true, build = { commit = ctx.build.commit, builtAt = ctx.build.built_at },
    generation = ctx.generation, repos = n, threads = t })
end

-- The head checks (sandboxd's on_head with the resident's table): the bearer, the route and
-- method, the thread key — before a byte of the body is read.
function M.on_head(ctx)
  return sandbox_routes.on_head(ctx, { routes = M.ROUTES, list = ROUTE_LIST,
    keyless = { ["/healthz"] = true, ["/status"] = true, ["/onboard"] = true } })
end

-- ctx: token, policy (fn → snap), build, log, repos (repos.lua), threads_root, stopping (signal),
--      generation (this process's runtime id), getenv, walls (shell/instance.lua's host, or nil)
function M.handler(ctx)
  local check = auth.checker(ctx.token)
  ctx.log = ctx.log or function() end
  ctx.threads = ctx.threads or {}
  ctx.attaching = {}
  local inner = sandbox_routes.handler{
    fleet = fleet_of(ctx), token = ctx.token, policy = ctx.policy, build = ctx.build, log = ctx.log,
    stopping = ctx.stopping, getenv = ctx.getenv,
    -- walled threads' commands get their instance's HOME (shell/child_env.lua), as sandboxd's
    mode = ctx.walls and "walls" or "unwalled",
  }
  return function(req, res)
    if not check(req.headers and req.headers[protocol.AUTH_HEADER], req) then
      return res:send(auth.REFUSAL_STATUS, JSON, auth.REFUSAL_BODY)
    end
    local method = M.ROUTES[req.path]
    if method == nil then
      return send_json(res, 404, { error = ("no route %s; the routes are %s"):format(req.path, ROUTE_LIST) })
    end
    if req.method ~= method then return send_json(res, 405, { error = ("%s takes %s"):format(req.path, method) }) end
    if req.path == "/healthz" then return healthz(ctx, res) end
    if req.path == "/status" then return status(ctx, req, res) end
    if req.path == "/onboard" then return onboard(ctx, req, res) end
    local key = req.headers[protocol.THREAD_HEADER]
    local ok, why = protocol.check_thread_key(key, ctx.policy().timeouts.sandbox.max_thread_key_bytes)
    if not ok then return refuse(res, req.path, 400, why) end
    if req.path == "/attach" or req.path == "/detach" then
      local body = body_of(req)
      if not body then return refuse(res, req.path, 400, ("the %s body must be a JSON object"):format(req.path)) end
      return (req.path == "/attach" and attach or detach)(ctx, key, body, res)
    end
    local t = ctx.threads[key]
    if not t or not core.fs.exists(t.dir .. "/.git") then
      ctx.threads[key] = nil
      return refuse(res, req.path, 409, "this thread has no worktree on the resident (never attached, "
        .. "detached, or the resident restarted); attach again", M.NOT_ATTACHED)
    end
    return inner(req, req.path == "/exec" and replacing(ctx, res) or res)
  end
end

return M
