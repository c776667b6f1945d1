-- The resident process around its routes: the repositories and their fetch schedule and the
-- routes' context; the listening, the count of requests in flight and the drain are
-- server/lifecycle.lua's (shared with sandboxd).
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
local file_table = require("switchboard.sandboxd.file_table")
local request_log = require("switchboard.sandboxd.request_log")
local lifecycle = require("switchboard.server.lifecycle")
local repos = require("switchboard.resident.repos")
local run = require("switchboard.shell.run")

local M = {}

function M.start(opts)
  local log = opts.log or core.log
  local self = setmetatable({ log = log }, lifecycle.Server)
  self.generation = core.crypto.hex(core.crypto.random_bytes(8))
  -- 0711: a walled thread's uid must traverse it to reach its own (0700) worktree; nobody lists it
  core.fs.mkdir_p(opts.root .. "/threads", tonumber("711", 8))
  run.tool{ argv = { "chmod", "0711", "--", opts.root .. "/threads" },
    deadline_ms = policy.current().timeouts.file_op.budget_ms }
  self.repos = repos.open{ root = opts.root, git_base = opts.git_base, policy = policy.current, log = log,
    getenv = opts.getenv }
  self.ctx = {
    token = opts.token, policy = policy.current, build = core.build, log = log, repos = self.repos,
    threads_root = opts.root .. "/threads", stopping = core.signal(), generation = self.generation,
    getenv = opts.getenv, walls = opts.walls,
  }
  -- walled threads are held to their share of the host's file table, as sandboxd's instances
  if opts.walls then
    self.file_table = file_table.start{ instances = function() return self.ctx.threads or {} end, log = log,
      policy = policy.current }
  end
  self.life = lifecycle.new{ event = "resident", log = log,
    fields = function() return { generation = self.generation } end,
    on_close = function()
      if self.file_table then self.file_table:stop() end
      self.repos:close()
    end,
    on_kill = function() self.ctx.stopping:abort("runtime replaced") end,
  }
  local on_head, handler = request_log.wrap{ event = "resident.request", log = log,
    on_head = routes.on_head(self.ctx), handler = routes.handler(self.ctx) }
  local srv, err = self.life:listen{ host = opts.host, port = opts.port, handler = handler,
    limits = lifecycle.limits(policy.current()), on_head = on_head }
  if not srv then return nil, err end
  self.port = srv.port
  self.repos:start()
  return self
end

return M
