-- The resident process around its routes: the repositories and their fetch schedule, the
-- listening server with sandboxd's limits, the count of requests in flight, and the drain.
--
--   local srv, err = server.start{host, port, root, token, git_base, log, getenv, walls?}
--   srv.port, srv.generation  the bound port; this process's runtime id (a new one every start:
--                             the executor tells a replaced runtime by it)
--   srv:shutdown(signal_name) stop accepting; requests in flight get timeouts.server.drain_ms;
--                             then their commands are killed and answer runtime-replaced (the
--                             worktrees stay on disk for the next process); srv:wait() returns
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local routes = require("switchboard.resident.routes")
local request_log = require("switchboard.sandboxd.request_log")
local sandboxd_server = require("switchboard.sandboxd.server")
local repos = require("switchboard.resident.repos")

local M = {}

local Server = {}
Server.__index = Server

function M.start(opts)
  local log = opts.log or core.log
  local self = setmetatable({ state = "serving", inflight = 0, log = log, waiters = {}, force = core.signal() }, Server)
  self.generation = core.crypto.hex(core.crypto.random_bytes(8))
  -- 0711: a walled thread's uid must traverse it to reach its own (0700) worktree; nobody lists it
  core.fs.mkdir_p(opts.root .. "/threads", tonumber("711", 8))
  local chmod = core.spawn{ argv = { "chmod", "0711", "--", opts.root .. "/threads" }, env = { PATH = os.getenv("PATH") } }
  if chmod then chmod:wait() end
  self.repos = repos.open{ root = opts.root, git_base = opts.git_base, policy = policy.current, log = log,
    getenv = opts.getenv }
  self.ctx = {
    token = opts.token, policy = policy.current, build = core.build, log = log, repos = self.repos,
    threads_root = opts.root .. "/threads", stopping = core.signal(), generation = self.generation,
    getenv = opts.getenv, walls = opts.walls,
  }
  local on_head, handler = request_log.wrap{ event = "resident.request", log = log,
    on_head = routes.on_head(self.ctx), handler = routes.handler(self.ctx) }
  local function done()
    self.inflight = self.inflight - 1
    if self.inflight == 0 and self.quiet then self.quiet:abort("idle") end
  end
  local function counted(req, res)
    self.inflight = self.inflight + 1
    local finished <close> = setmetatable({}, { __close = done })
    return handler(req, res)
  end
  local ok, srv, err = pcall(core.http.serve, {
    host = opts.host, port = opts.port, handler = counted, limits = sandboxd_server.limits_of(policy.current()),
    on_head = on_head,
  })
  if not ok then return nil, core.error("listen", tostring(srv)) end
  if not srv then return nil, err end
  self.server, self.port = srv, srv.port
  self.repos:start()
  return self
end

local function wait_idle(self, ms, forceable)
  if self.inflight == 0 then return true end
  self.quiet = forceable and core.signal(self.force) or core.signal()
  core.sleep(ms, self.quiet)
  self.quiet = nil
  return self.inflight == 0
end

function Server:shutdown(signal_name)
  if self.state ~= "serving" then
    if self.state == "draining" then self.force:abort("second signal") end
    return
  end
  self.state = "draining"
  local t = policy.current().timeouts.server
  self.log("info", "resident.draining", { signal = signal_name, in_flight = self.inflight, generation = self.generation })
  self.server:close()
  self.repos:close()
  local killed = 0
  if not wait_idle(self, t.drain_ms, true) then
    killed = self.inflight
    self.ctx.stopping:abort("runtime replaced")
    wait_idle(self, t.flush_ms, false)
  end
  core.kill_all()
  self.state = "stopped"
  self.log("info", "resident.stopped", { killed = killed, unanswered = self.inflight })
  for _, task in ipairs(self.waiters) do core.wake(task) end
  self.waiters = {}
end

function Server:wait()
  if self.state == "stopped" then return end
  self.waiters[#self.waiters + 1] = core.current()
  core.suspend()
end

return M
