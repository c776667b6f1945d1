-- A toy front from the test tree (tests/lua/registry_spec.lua): what a new front is — one
-- module declaring itself, registered with fronts/registry.lua's register (a shipped one is a
-- line in its MODULES). `switchboard toy --asks FILE` reads its asks from a file, prints each
-- final card, and is served by launch/host.lua like Slack and the console: the record, the
-- listeners (here /metrics), READY, the reload and the drain are the host's. Its own setting:
-- policies/timeouts.lua `toy = {drain_ms = N}` (optional).
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local dispatcher = require("switchboard.dispatch.dispatcher")
local S = require("switchboard.policy.schema").S

local M = {}

M.HELP = [[
Usage: switchboard toy --asks FILE [--metrics-listen HOST:PORT] [--workspace-root DIR]

A toy front from the test tree: each line of FILE is an ask in thread main; each final card
is printed. It stays up, serving /metrics, until TERM/INT drains it.
]]

local Toy = {}
Toy.__index = Toy

-- The dispatcher's side of the front (dispatch/dispatcher.lua: post, update): final cards printed.
local function cards_for(p)
  local cards = {}
  function cards.post(_, thread, message)
    if message.final then p:say(message.text) end
    return { thread = thread }
  end
  function cards.update(_, _, message)
    if message.final then p:say(message.text) end
  end
  return cards
end

function M.open(p)
  local f = io.open(p.opts.asks, "r")
  if not f then return nil, core.error("config", "--asks: cannot read " .. p.opts.asks) end
  local asks = {}
  for line in f:lines() do asks[#asks + 1] = line end
  f:close()
  local self = setmetatable({ p = p, asks = asks, done = core.signal() }, Toy)
  self.listeners = { { "--metrics-listen", p.opts.metrics_listen, "metrics" } } -- the host's /metrics
  M.last = self -- the spec's handle on the running front
  return self
end

function Toy:dispatcher(hosted)
  self.hosted = hosted
  self.d = dispatcher.new(hosted:dispatcher_options{
    front = cards_for(self.p), policy = policy.current,
    stack = self.p:stack_options(nil, "toy"),
    thread_key = function(thread) return "toy:" .. thread end,
  })
  return self.d
end

function Toy:ready() return ("toy: %d asks"):format(#self.asks) end

function Toy:drain(name, kill_now)
  self.done:abort("SIG" .. name)
  local own = policy.current().timeouts.toy
  self.d:drain(own and own.drain_ms or 0, kill_now)
end

function Toy:serve()
  for _, text in ipairs(self.asks) do self.d:handle{ thread = "main", user = "toy", text = text } end
  self.d:wait_idle()
  self.idle = true
  core.sleep(10 * 60 * 1000, self.done) -- until the drain
  self.d:wait_idle()
end

M.front = {
  name = "toy",
  summary = "a toy front from the test tree: asks from a file, final cards on standard output",
  help = M.HELP,
  options = { asks = "string", ["metrics-listen"] = "string", ["workspace-root"] = "string" },
  usage = function(p) if not p.opts.asks then return "--asks FILE is required" end end,
  settings = { timeouts = S.optional(S.record { drain_ms = S.ms(0, 10 * 60 * 1000) }) },
  open = M.open,
}

return M
