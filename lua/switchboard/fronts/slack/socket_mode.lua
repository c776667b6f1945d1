-- Socket Mode: Slack pushes events over a WebSocket the app opens (no public URL needed).
--
--   local sm = socket_mode.new{api = webapi (with the xapp- token), policy = policy.current,
--                              on_envelope = function(envelope) end}
--   local ok, err = sm:start()     -- the first connection is up (hello seen), or why not
--   sm:stop()                      -- close every connection; no reconnect
--   sm:handed_over(signal) → true  -- every envelope acked has been handed to on_envelope and
--                                  -- its call returned (false when signal fired first)
--
-- apps.connections.open gives a one-use wss:// URL; Slack says `hello` first. Every envelope
-- ({envelope_id, type, payload}) is acked ({"envelope_id": …}) the moment it is read, before
-- any work, and only then handed to on_envelope in a task of its own. An envelope acked is
-- handed over also when stop() came meanwhile (the caller runs it: shutdown waits for
-- handed_over); one read after stop() is not acked — Slack sends it again, to another
-- connection of the app (the process that replaces this one during a restart). A `disconnect`
-- (refresh_requested, warning, …) opens the new connection first and closes the old one once
-- the new one said hello, so nothing arrives on no connection; events seen on both are
-- deduplicated by the caller (event_id). A dropped connection is reopened with bounded
-- backoff (slack.socket.reconnect_ms). A ping goes out every slack.socket.ping_every_ms; a
-- connection with no pong for three of those is treated as dropped.
local core = require("switchboard.core")
local in_flight = require("switchboard.dispatch.in_flight")

local M = {}
local S = {}
S.__index = S

function M.new(opts)
  return setmetatable({
    api = opts.api, policy = opts.policy, on_envelope = opts.on_envelope,
    log = opts.log or core.log,
    stopping = core.signal(),
    conns = {},        -- every open connection record
    seq = 0,
    current = nil,     -- the connection new envelopes are expected on
    stats = { acks = 0, connections = 0, reconnects = 0 },
    pending = {},      -- envelopes whose work has not started (start_work)
    starter_idle = nil,
    handing = in_flight.new(), -- envelopes acked whose on_envelope has not returned
  }, S)
end

local function cfg(self) return self.policy().slack.socket end

local function forget(self, rec)
  for i, r in ipairs(self.conns) do
    if r == rec then table.remove(self.conns, i) break end
  end
end

-- Opens one connection and waits for its hello. → rec | nil, err
function S:open_one()
  local c = cfg(self)
  local got, err = self.api:call("apps.connections.open", {}, { form = true, signal = self.stopping })
  if not got then return nil, err end
  if type(got.url) ~= "string" then
    return nil, core.error("slack", "apps.connections.open answered without a url")
  end
  local conn, cerr = core.ws.connect{ url = got.url, deadline_ms = c.open_deadline_ms,
                                      signal = self.stopping }
  if not conn then return nil, cerr end
  local first, rerr = conn:recv{ deadline_ms = c.open_deadline_ms, signal = self.stopping }
  local hello = core.json.decode(first or "")
  if not (type(hello) == "table" and hello.type == "hello") then
    conn:close()
    return nil, rerr or core.error("protocol", "the Socket Mode connection did not start with hello")
  end
  self.seq = self.seq + 1
  local rec = { conn = conn, id = self.seq, done = core.signal(self.stopping) }
  self.conns[#self.conns + 1] = rec
  self.stats.connections = self.stats.connections + 1
  self.log("info", "slack.socket_connected", { connection = rec.id,
    connections = hello.num_connections })
  return rec
end

-- Opens a connection, retrying with the policy's backoff until it works or stop() is called.
function S:open_retrying()
  local attempt = 0
  while not self.stopping.aborted do
    local rec, err = self:open_one()
    if rec then return rec end
    attempt = attempt + 1
    local waits = cfg(self).reconnect_ms
    local wait = waits[math.min(attempt, #waits)]
    self.log("warn", "slack.socket_open_failed", { attempt = attempt, retry_in_ms = wait,
      error = err and (err.error or err.kind), message = err and err.message })
    if not core.sleep(wait, self.stopping) then return nil end
  end
end

function S:ack(rec, env)
  self.stats.acks = self.stats.acks + 1
  rec.conn:send(core.json.encode({ envelope_id = env.envelope_id }))
end

-- Envelopes' work starts one per loop turn, each at least a turn after its ack went out: a
-- burst of asks would otherwise start (and spawn, which costs milliseconds on a busy host) in
-- one turn, and envelopes arriving meanwhile would wait for their acks.
function S:start_work(env, conn_id)
  self.handing:enter()
  self.pending[#self.pending + 1] = { env = env, conn = conn_id }
  local t = self.starter_idle
  if t then
    self.starter_idle = nil
    core.wake(t)
  end
end

function S:starter()
  while true do
    local item = table.remove(self.pending, 1)
    if item then
      core.sleep(0)
      core.go(function()
        local ok, err = xpcall(self.on_envelope, debug.traceback, item.env, item.conn)
        self.handing:leave()
        if not ok then error(err, 0) end
      end)
    elseif self.stopping.aborted then
      return
    else
      self.starter_idle = core.current()
      core.suspend()
    end
  end
end

-- The new connection first, then the old one closes.
function S:replace(rec, reason)
  if rec.replacing then return end
  rec.replacing = true
  core.go(function()
    local new = self:open_retrying()
    if new then self:serve(new) end
    rec.conn:close() -- its reader still takes what arrived before the close completes
  end)
end

function S:pinger(rec)
  local every = cfg(self).ping_every_ms
  local started = core.now_ms()
  while core.sleep(every, rec.done) do
    local last = rec.conn:last_pong_ms() or started
    if core.now_ms() - last > 3 * every then
      self.log("warn", "slack.socket_no_pong", { connection = rec.id })
      rec.conn:close()
      return
    end
    rec.conn:ping()
  end
end

-- Reads one connection until it ends; a drop of the current connection reconnects.
function S:reader(rec)
  while true do
    local raw, err = rec.conn:recv{ signal = rec.done }
    if not raw then
      if not rec.done.aborted and not rec.replacing then
        self.log("warn", "slack.socket_dropped", { connection = rec.id, error = err and err.kind,
          message = err and err.message })
      end
      break
    end
    local env = core.json.decode(raw or "")
    if type(env) == "table" then
      if env.envelope_id and self.stopping.aborted then
        -- read after stop(): not acked, so Slack sends it again to a connection that stays
        self.log("info", "slack.envelope_left", { connection = rec.id, envelope_id = tostring(env.envelope_id) })
      elseif env.envelope_id then
        self:ack(rec, env) -- before anything else is done with it
        self:start_work(env, rec.id)
      elseif env.type == "disconnect" then
        self.log("info", "slack.socket_disconnect", { connection = rec.id, reason = tostring(env.reason) })
        self:replace(rec, env.reason)
      end
    end
  end
  rec.conn:close()
  forget(self, rec)
  local was_current = self.current == rec
  if not rec.done.aborted then rec.done:abort("dropped") end
  if was_current and not rec.replacing and not self.stopping.aborted then
    self.stats.reconnects = self.stats.reconnects + 1
    local new = self:open_retrying()
    if new then self:serve(new) end
  end
end

function S:serve(rec)
  self.current = rec
  core.go(function() self:reader(rec) end)
  core.go(function() self:pinger(rec) end)
end

function S:start()
  local rec, err = self:open_one()
  if not rec then return nil, err end
  core.go(function() self:starter() end)
  self:serve(rec)
  return true
end

-- How many connections are open now (0 while reconnecting): the bot's readiness.
function S:open_connections()
  return #self.conns
end

function S:handed_over(signal)
  return self.handing:wait(signal)
end

function S:stop()
  self.stopping:abort("stopping")
  local t = self.starter_idle
  if t then
    self.starter_idle = nil
    core.wake(t)
  end
  for _, rec in ipairs(self.conns) do rec.conn:close() end
end

return M
