-- Connect protocol envelopes (connectrpc.com/docs/protocol, "Streaming"): the framing E2B's
-- in-sandbox daemon (envd) streams a process's events in. Every message is
--
--   1 flag byte | 4-byte big-endian length | that many bytes of JSON
--
-- flag 0x01 says the message is compressed (never negotiated here, so refused) and 0x02 marks
-- the end-of-stream message, `{"error"?: {code, message}, "metadata"?: …}`, the last one.
--
-- The bytes come from the network in whatever pieces TCP and HTTP chunking make of them, so
-- the decoder takes any split — a header cut after one byte, many frames in one chunk — and
-- refuses what no honest peer sends: unknown flag bits, a compressed message, a frame longer
-- than the limit (said before its bytes are buffered), anything after the end-of-stream frame.
-- Pure Lua, no engine: tests/fuzz/fuzz_connect.c drives it with arbitrary input.
local M = {}

M.FLAG_COMPRESSED = 0x01
M.FLAG_END_STREAM = 0x02
M.HEADER_BYTES = 5
M.DEFAULT_MAX_MESSAGE = 4 << 20 -- bytes of one message's JSON

-- One envelope: flags (0..255) and the payload bytes.
function M.encode(flags, payload)
  assert(type(payload) == "string", "connect.encode: payload must be a string")
  assert(math.type(flags) == "integer" and flags >= 0 and flags <= 255, "connect.encode: bad flags")
  return string.pack(">BI4", flags, #payload) .. payload
end

local Decoder = {}
Decoder.__index = Decoder

-- opts.max_message: the longest payload accepted, bytes (default DEFAULT_MAX_MESSAGE).
function M.decoder(opts)
  opts = opts or {}
  local max = opts.max_message or M.DEFAULT_MAX_MESSAGE
  assert(math.type(max) == "integer" and max >= 0, "connect.decoder: max_message must be an integer")
  return setmetatable({
    max = max,
    chunks = {},  -- received bytes not yet consumed, in order
    buffered = 0, -- their total length
    need = nil,   -- the payload length of the frame whose header was read, or nil
    flags = nil,
    ended = false, -- the end-of-stream frame was decoded
    failed = nil,  -- the first error; the decoder refuses everything after it
  }, Decoder)
end

local function fail(self, message)
  self.failed = message
  return nil, message
end

-- The header of the next frame: flags and length, or nil, message when the peer broke the rules.
local function header(self, flags, len)
  if flags & ~(M.FLAG_COMPRESSED | M.FLAG_END_STREAM) ~= 0 then
    return nil, ("unknown envelope flags 0x%02x"):format(flags)
  end
  if flags & M.FLAG_COMPRESSED ~= 0 then
    return nil, "a compressed message, though no compression was negotiated"
  end
  if len > self.max then
    return nil, ("a %d-byte message, over the %d-byte limit"):format(len, self.max)
  end
  return true
end

-- Feeds bytes; returns the list of frames they completed ({flags, data, end_stream}), possibly
-- empty, or nil, message on a framing error (and on every call after one).
-- The pieces are joined once there is enough for the next step (a header, or the whole
-- payload), so a long message arriving in many small chunks is copied once, not once a chunk.
function Decoder:feed(bytes)
  if self.failed then return nil, self.failed end
  assert(type(bytes) == "string", "connect decoder: feed takes a string")
  local frames = {}
  if bytes == "" then return frames end
  if self.ended then return fail(self, "bytes after the end-of-stream frame") end
  self.chunks[#self.chunks + 1] = bytes
  self.buffered = self.buffered + #bytes
  local wanted = self.need or M.HEADER_BYTES
  if self.buffered < wanted then return frames end
  local buf = table.concat(self.chunks)
  local pos = 1
  while true do
    local left = #buf - pos + 1
    if self.need == nil then
      if left < M.HEADER_BYTES then break end
      local flags, len = string.unpack(">BI4", buf, pos)
      local ok, why = header(self, flags, len)
      if not ok then return fail(self, why) end
      pos = pos + M.HEADER_BYTES
      self.need, self.flags = len, flags
    else
      if left < self.need then break end
      local data = buf:sub(pos, pos + self.need - 1)
      pos = pos + self.need
      local end_stream = self.flags & M.FLAG_END_STREAM ~= 0
      frames[#frames + 1] = { flags = self.flags, data = data, end_stream = end_stream }
      self.need, self.flags = nil, nil
      if end_stream then
        self.ended = true
        if pos <= #buf then return fail(self, "bytes after the end-of-stream frame") end
        break
      end
    end
  end
  local rest = pos <= #buf and buf:sub(pos) or ""
  self.chunks = rest ~= "" and { rest } or {}
  self.buffered = #rest
  return frames
end

-- Bytes of an unfinished frame (header or payload) still waiting for the rest: a stream that
-- stops while this is nonzero was cut mid-frame.
function Decoder:partial()
  if self.need ~= nil then return M.HEADER_BYTES + self.buffered end
  return self.buffered
end

return M
