-- One event stream per agent run: the run says what happened once (agent/run.lua,
-- dispatch/agent_run.lua), and whoever shows or keeps it subscribes — the card
-- (dispatch/run_card.lua follow), the transcript (agent/transcript.lua follow), the record and
-- the run page (dispatch/run_record.lua), the GitHub reply (dispatch/github_reply.lua), the
-- dispatcher's thread.
--
--   local s = run_events.new{ log = core.log, fields = {thread = …, ask = …} }
--   local off = s:subscribe(name, fn)     fn(event); off() unsubscribes
--   s:emit{type = "…", …}                 every subscriber, in the order they subscribed
--   s:finish{type = "run_end", …}         the last event; then every subscriber is dropped
--   run_events.kept(event) → bool         whether a transcript and the record keep it
--
-- Events are delivered one at a time, in the order they were emitted, each to every
-- subscriber before the next: an event emitted while another is being delivered (by a
-- subscriber, or by another task while a subscriber yields) waits its turn, and the task
-- delivering delivers it. A subscriber that raises is logged (run_events.subscriber_failed,
-- with its traceback) and the others still get the event. finish returns once its event (and
-- what its subscribers emitted meanwhile) was delivered; what is emitted after it is dropped.
--
-- Two kinds of event: facts the transcript and the record keep (their types are the
-- transcript's lines: run_start, answer, model_error, tool_result, todos, compaction,
-- message_in, instructions, environment, repository, asker, publish, diff, image, run_end;
-- docs/agent.md), and LIVE ones only a live view shows (the card): what the run does now.
local core = require("switchboard.core")

local M = {}
local S = {}
S.__index = S

-- What only the card shows: kept nowhere (a transcript has each fact once, as a line).
M.LIVE = {
  started = true,     -- the run began (its record row, page and card address)
  phase = true,       -- {state = "preparing" | "running", text?}
  turn = true,        -- {turn}: a model turn begins
  activity = true,    -- {text?}: what runs now (a tool call, a git step, a wait); nil: nothing
  thinking = true,    -- the model thinks (extended thinking streams)
  commentary = true,  -- {text}: the model's text beside its calls
  usage = true,       -- {tokens_in, tokens_out, cache_read, cache_write, cost_usd}: so far
  waiting = true,     -- {text?}: the model API makes the run wait (nil: no longer)
  note = true,        -- {text, key?}: a line on the card; key: replaces the note of that key
  page = true,        -- {url}: the run's page
  steered = true,     -- {user, text}: a thread message went to the running run
  preview = true,     -- {url}: an exposed port's preview URL (agent/processes.lua): the Preview button
  saved = true,       -- {cost_usd}: a turn's conversation was kept (the record's cost so far)
}

function M.kept(event) return not M.LIVE[event.type] end

function M.new(opts)
  opts = opts or {}
  return setmetatable({ subs = {}, queue = {}, delivering = false, closed = false,
                        log = opts.log or core.log, fields = opts.fields or {} }, S)
end

function S:subscribe(name, fn)
  local sub = { name = name, fn = fn }
  self.subs[#self.subs + 1] = sub
  return function()
    for i, s in ipairs(self.subs) do
      if s == sub then table.remove(self.subs, i) return end
    end
  end
end

local function traced(e)
  if core.is_error(e) then return ("%s: %s\n%s"):format(e.kind, tostring(e), e.traceback or debug.traceback("", 2)) end
  return debug.traceback(tostring(e), 2)
end

function S:deliver(event)
  -- a copy of the list: a subscriber that unsubscribes (itself or another) does not skip one
  local subs = { table.unpack(self.subs) }
  for _, sub in ipairs(subs) do
    local ok, err = xpcall(sub.fn, traced, event)
    if not ok then
      local fields = { subscriber = sub.name, event = tostring(event.type), error = err }
      for k, v in pairs(self.fields) do fields[k] = v end
      self.log("error", "run_events.subscriber_failed", fields)
    end
  end
end

-- Delivers what is queued, in order, in the calling task (the one that found nobody
-- delivering). After the last event (finish), what its subscribers emitted while it was
-- delivered (the GitHub reply's note) is delivered too; then the stream closes.
function S:drain()
  self.delivering = true
  while #self.queue > 0 do
    local item = table.remove(self.queue, 1)
    self:deliver(item.event)
    if item.last then self.ending = item.last end
  end
  self.delivering = false
  if self.ending then
    self.closed, self.subs = true, {}
    self.ending:abort("delivered")
  end
end

function S:emit(event)
  if self.closed then return end
  self.queue[#self.queue + 1] = { event = event }
  if not self.delivering then self:drain() end
end

function S:finish(event)
  if self.finishing then return end
  self.finishing = true
  local done = core.signal()
  self.queue[#self.queue + 1] = { event = event, last = done }
  if not self.delivering then return self:drain() end
  -- another task is delivering (a subscriber of an earlier event yields): it delivers this one too
  while not done.aborted do core.sleep(3600 * 1000, done) end
end

return M
