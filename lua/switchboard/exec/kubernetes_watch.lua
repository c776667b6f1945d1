-- What the Kubernetes API server sends the `kubernetes` executor, read without trusting it
-- (docs/deploy.md "Kubernetes with agent-sandbox"): the watch event stream and the objects in it.
--
--   * A watch answer (GET …?watch=true) is a stream of JSON objects, one per line:
--     {"type": "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR", "object": {…}}. The bytes
--     come in whatever pieces TCP and HTTP chunking make of them: the decoder takes any split,
--     refuses a line longer than its limit (said before the line is buffered whole), an event
--     type it does not know and an object that is not one.
--   * M.claim_state(doc) reads a SandboxClaim (extensions.agents.x-k8s.io/v1beta1, as
--     agent-sandbox's claim controller writes its status): the Ready condition, the pod's IP,
--     the bound sandbox's name, a deletion under way.
--   * M.status_of(doc) reads a metav1 Status (every API error, and a watch's ERROR event).
-- No I/O (only core.json): tests/fuzz/fuzz_kube_watch.c drives it with arbitrary input.
local json = require("switchboard.core").json

local M = {}

M.DEFAULT_MAX_LINE = 1 << 20 -- bytes of one event (a claim is a few KiB)
M.TYPES = { ADDED = true, MODIFIED = true, DELETED = true, BOOKMARK = true, ERROR = true }

local Decoder = {}
Decoder.__index = Decoder

-- opts.max_line: the longest event accepted, bytes (default DEFAULT_MAX_LINE).
function M.decoder(opts)
  opts = opts or {}
  local max = opts.max_line or M.DEFAULT_MAX_LINE
  assert(math.type(max) == "integer" and max > 0, "kubernetes_watch.decoder: max_line must be a positive integer")
  return setmetatable({ max = max, pending = {}, pending_bytes = 0, failed = nil }, Decoder)
end

local function fail(self, message)
  self.failed = message
  return nil, message
end

-- One line → an event {type, object} or nil, why.
function M.event(line)
  local doc = json.decode(line)
  if type(doc) ~= "table" then return nil, "a watch event that is not a JSON object" end
  if type(doc.type) ~= "string" or not M.TYPES[doc.type] then
    return nil, ("a watch event of unknown type %s"):format(type(doc.type) == "string" and ("%q"):format(doc.type:sub(1, 40)) or type(doc.type))
  end
  if type(doc.object) ~= "table" then return nil, "a watch event without an object" end
  return { type = doc.type, object = doc.object }
end

-- Feeds bytes; returns the list of events they completed (possibly empty), or nil, message on
-- a broken stream (and on every call after one). Blank lines are skipped.
function Decoder:feed(bytes)
  if self.failed then return nil, self.failed end
  assert(type(bytes) == "string", "kubernetes_watch decoder: feed takes a string")
  local events, pos = {}, 1
  while pos <= #bytes do
    local nl = bytes:find("\n", pos, true)
    local piece = bytes:sub(pos, nl and nl - 1 or #bytes)
    if self.pending_bytes + #piece > self.max then
      return fail(self, ("a watch event longer than %d bytes"):format(self.max))
    end
    if not nl then
      self.pending[#self.pending + 1] = piece
      self.pending_bytes = self.pending_bytes + #piece
      break
    end
    local line = #self.pending > 0 and (table.concat(self.pending) .. piece) or piece
    self.pending, self.pending_bytes = {}, 0
    if line:find("%S") then
      local ev, why = M.event(line)
      if not ev then return fail(self, why) end
      events[#events + 1] = ev
    end
    pos = nl + 1
  end
  return events
end

-- Bytes of an unfinished event: a stream that ends while this is nonzero was cut mid-event.
function Decoder:partial() return self.pending_bytes end

local function str(v) return type(v) == "string" and v or nil end

-- A resourceVersion is opaque to clients, but it is a string without spaces and not too long.
function M.resource_version(obj)
  local md = type(obj) == "table" and obj.metadata
  local rv = type(md) == "table" and str(md.resourceVersion)
  if rv and #rv <= 64 and rv:find("^[%w%-_.:]+$") then return rv end
  return nil
end

-- An IPv4 or IPv6 address as a pod's status gives it (nothing else reaches a URL).
function M.is_ip(s)
  if type(s) ~= "string" or #s > 45 then return false end
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if a then
    for _, n in ipairs({ a, b, c, d }) do if tonumber(n) > 255 or #n > 3 then return false end end
    return true
  end
  return s:find("^[%x:]+$") ~= nil and s:find(":", 1, true) ~= nil
end

-- A SandboxClaim → {name, uid, rv, labels, deleting, ready, reason, message, sandbox, ip,
-- shutdown_policy} (any field nil when absent or malformed), or nil for something that is not an
-- object. A Ready condition observed for an older generation is left out.
function M.claim_state(doc)
  if type(doc) ~= "table" then return nil end
  local md = type(doc.metadata) == "table" and doc.metadata or {}
  local st = type(doc.status) == "table" and doc.status or {}
  local out = {
    name = str(md.name), uid = str(md.uid), rv = M.resource_version(doc),
    labels = type(md.labels) == "table" and md.labels or {},
    deleting = str(md.deletionTimestamp) ~= nil, ready = false,
  }
  -- a condition the controller wrote for an older spec (its observedGeneration behind the
  -- object's generation: a moved shutdownTime not seen yet) says nothing about this one
  local gen = math.type(md.generation) and md.generation or nil
  if type(st.conditions) == "table" then
    for _, c in ipairs(st.conditions) do
      local seen = type(c) == "table" and math.type(c.observedGeneration) and c.observedGeneration or nil
      if type(c) == "table" and c.type == "Ready" and not (gen and seen and seen < gen) then
        out.ready = c.status == "True"
        out.reason = str(c.reason)
        out.message = str(c.message)
      end
    end
  end
  local spec = type(doc.spec) == "table" and doc.spec or {}
  out.shutdown_policy = type(spec.lifecycle) == "table" and str(spec.lifecycle.shutdownPolicy) or nil
  local sb = type(st.sandbox) == "table" and st.sandbox or {}
  out.sandbox = str(sb.name)
  if type(sb.podIPs) == "table" and M.is_ip(sb.podIPs[1]) then out.ip = sb.podIPs[1] end
  return out
end

-- A metav1 Status → {code, reason, message} or nil when the body is not one.
function M.status_of(doc)
  if type(doc) ~= "table" or doc.kind ~= "Status" then return nil end
  return {
    code = math.type(doc.code) and math.tointeger(doc.code) or nil,
    reason = str(doc.reason), message = str(doc.message),
  }
end

return M
