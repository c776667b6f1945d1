-- ExecHealthTracker (docs/contract.md#fail-fast): wraps an executor and counts consecutive infra failures,
-- the seam the runner's fail-fast reads.
--   a success (a result, including a nonzero exit)  → count 0, last_error nil
--   an infra error                                  → count + 1, last_error = it
--   a capacity error (a full fleet)                 → count and last_error untouched
--   any other error                                 → passed through, nothing changes
--
--   local tracker = health.new(inner, snap)
--   tracker.count, tracker.last_error, tracker:tripped()   (count ≥ the policy's limit)

local errors = require("switchboard.exec.errors")

local M = {}

local Tracker = {}
Tracker.__index = Tracker

local function observe(self, ok, ...)
  local result = ...
  if ok and type(result) == "table" and result.runtime_replaced then
    return -- the first runtime replacement in a row: neither counted nor a reset
  elseif ok then
    self.count = 0
    self.last_error = nil
  else
    local err = select(1, ...)
    if errors.is_infra(err) then
      self.count = self.count + 1
      self.last_error = err
    end
  end
end

-- Observes a raise on its way through (a to-be-closed value sees the error without catching
-- it: the raise reaches the caller untouched, and the one place that decides about it).
local function on_raise(self)
  return setmetatable({}, { __close = function(_, err)
    if err ~= nil then observe(self, false, err) end
  end })
end

-- Call inner:method(...) and observe its outcome; returns what it returned. An error object
-- raised instead of returned is observed the same way and passes on unchanged.
local function forward(self, method, ...)
  local watch <close> = on_raise(self)
  local res = table.pack(self.inner[method](self.inner, ...))
  if res[1] == nil and res.n >= 2 then
    observe(self, false, res[2])
  else
    observe(self, true, res[1])
  end
  return table.unpack(res, 1, res.n)
end

function Tracker:exec(command, opts) return forward(self, "exec", command, opts) end
function Tracker:read_file(path, opts) return forward(self, "read_file", path, opts) end
function Tracker:write_file(path, bytes, opts) return forward(self, "write_file", path, bytes, opts) end

function Tracker:tripped()
  return self.count >= self.limit
end

M.PROCESS_METHODS = { "start_process", "processes", "process_logs", "kill_process", "expose_port", "unexpose_port" }

-- snap: the run's policy snapshot (the limit is timeouts.health.max_consecutive_infra_failures).
function M.new(inner, snap)
  local self = setmetatable({
    inner = inner,
    backend = inner.backend,
    count = 0,
    last_error = nil,
    limit = snap.timeouts.health.max_consecutive_infra_failures,
  }, Tracker)
  -- release / move_to exist only when the inner executor has them.
  if type(inner.release) == "function" then
    self.release = function(s, ...) return s.inner:release(...) end
  end
  if type(inner.move_to) == "function" then
    self.move_to = function(s, ...) return s.inner:move_to(...) end
  end
  if type(inner.take_workspace_note) == "function" then
    self.take_workspace_note = function(s) return s.inner:take_workspace_note() end
  end
  if type(inner.workspace_dir) == "function" then
    self.workspace_dir = function(s) return s.inner:workspace_dir() end
  end
  -- background processes and ports, where the backend has them: observed like exec
  for _, method in ipairs(M.PROCESS_METHODS) do
    if type(inner[method]) == "function" then
      self[method] = function(s, ...) return forward(s, method, ...) end
    end
  end
  return self
end

return M
