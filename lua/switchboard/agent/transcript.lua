-- An agent run's transcript: one JSON document per line under the state directory
-- (<dir>/<thread>/<UTC time>-<ask>.jsonl): the ask, every request's messages as sent, every
-- answer, tool call, tool result, timing and usage, and how the run ended. Every line goes
-- through core.log_scrub first, so no registered secret (the model key, GitHub tokens, the
-- sandbox token) is ever written, even when a command printed one.
--
--   local t = transcript.open(dir, thread_key, ask_id)   -- never fails: a file that cannot be
--   t:write{type = "…", …}                               -- opened leaves t.error and drops lines
--   t:close()
--   stream:subscribe("transcript", t:follow(keep))   -- the run's events (dispatch/run_events.lua)
--                                        each event keep(event) says a line is written; closed at run_end
local core = require("switchboard.core")
local workspace = require("switchboard.shell.workspace")

local M = {}
local T = {}
T.__index = T

function M.open(dir, thread_key, ask_id, opts)
  opts = opts or {}
  local self = setmetatable({ scrub = opts.scrub or core.log_scrub, now = opts.wall_ms or core.wall_ms }, T)
  if not dir then return self end
  local sub = dir .. "/" .. workspace.dir_name(thread_key)
  local ok, err = core.fs.mkdir_p(sub, tonumber("700", 8))
  if not ok then
    self.error = tostring(err and err.message or err)
    return self
  end
  self.path = ("%s/%s-%d.jsonl"):format(sub, os.date("!%Y%m%dT%H%M%SZ"), ask_id)
  local f, open_err = io.open(self.path, "ab")
  if not f then
    self.error = open_err
    return self
  end
  self.file = f
  return self
end

function T:write(record)
  if not self.file then return end
  record.t = record.t or self.now()
  self.file:write(self.scrub(core.json.encode(record)), "\n")
  self.file:flush()
end

-- The transcript as a subscriber of its run's events: a line per kept event; run_end is the last.
function T:follow(keep)
  return function(e)
    if keep(e) then self:write(e) end
    if e.type == "run_end" then self:close() end
  end
end

function T:close()
  if self.file then self.file:close() end
  self.file = nil
end

return M
