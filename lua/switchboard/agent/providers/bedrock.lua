-- Claude through Amazon Bedrock: InvokeModelWithResponseStream (docs/agent.md "Model
-- providers").
--
--   request   POST {base}/model/{modelId}/invoke-with-response-stream, base
--             https://bedrock-runtime.{region}.amazonaws.com; the Messages API body without
--             `model` (it is in the path) and `stream`, with anthropic_version
--             "bedrock-2023-05-31"; signed with AWS Signature Version 4 (service "bedrock")
--             from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (optional)
--   answer    application/vnd.amazon.eventstream: binary frames (prelude: total length,
--             headers length, CRC32; headers; payload; CRC32 of the whole). A frame with
--             :message-type "event" and :event-type "chunk" carries {"bytes": base64} whose
--             bytes are one of the Messages API's stream events ({"type": …}); an
--             "exception" frame names its :exception-type (throttlingException,
--             modelStreamErrorException, …) with {"message"}
local core = require("switchboard.core")

local M = {}
local P = {}
P.__index = P

M.VERSION = "bedrock-2023-05-31"
M.SERVICE = "bedrock"
M.MAX_FRAME = 16 * 1024 * 1024 -- bytes; a larger frame's prelude is a broken stream

local FIX = {
  [400] = "Bedrock refused the request as invalid (400 %s: %s) — check the agent's model (a Bedrock model or inference profile id) and max_tokens in policies/agents.lua",
  [403] = "Bedrock refused the credentials (403 %s: %s) — check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) and that the account has access to the model, and restart switchboard",
  [404] = "Bedrock has no such model or endpoint (404 %s: %s) — check the agent's model and the provider's region in policies/agents.lua",
}

-- opts: base_url, region, key_id, secret, token (optional), wall_ms (default core.wall_ms)
function M.new(opts)
  return setmetatable({ base = opts.base_url:gsub("/+$", ""), region = opts.region, key_id = opts.key_id,
    secret = opts.secret, token = opts.token, keys = { opts.secret, opts.token }, fix = FIX,
    wall_ms = opts.wall_ms or core.wall_ms }, P)
end

-- RFC 3986 unreserved characters stay; everything else is %XX (SigV4's UriEncode).
local function uri_encode(s, keep_slash)
  return (s:gsub("[^%w%-%._~" .. (keep_slash and "/" or "") .. "]", function(c)
    return ("%%%02X"):format(c:byte())
  end))
end
M.uri_encode = uri_encode

local function hex_sha256(s) return core.crypto.hex(core.crypto.sha256(s)) end

-- Signature Version 4 for one request. r: method, url, headers (name → value; host is added),
-- body; cred: key_id, secret, token?, region, service; amz_date "YYYYMMDDTHHMMSSZ".
-- Returns the headers to send (the given ones plus host, x-amz-date, x-amz-security-token and
-- authorization). The canonical URI is the request's path URI-encoded once more, as every
-- service but S3 expects.
function M.sign(r, cred, amz_date)
  local authority, path = r.url:match("^https?://([^/]+)(/[^?]*)")
  local pairs_ = {}
  for pair in (r.url:match("%?(.*)$") or ""):gmatch("[^&]+") do pairs_[#pairs_ + 1] = pair end
  table.sort(pairs_)
  local headers = {}
  for k, v in pairs(r.headers) do headers[k:lower()] = v end
  headers.host = authority
  headers["x-amz-date"] = amz_date
  if cred.token then headers["x-amz-security-token"] = cred.token end
  local names = {}
  for k in pairs(headers) do names[#names + 1] = k end
  table.sort(names)
  local canon = {}
  for _, k in ipairs(names) do
    canon[#canon + 1] = k .. ":" .. tostring(headers[k]):gsub("^%s+", ""):gsub("%s+$", ""):gsub("%s+", " ") .. "\n"
  end
  local signed = table.concat(names, ";")
  local canonical = table.concat({ r.method, uri_encode(path, true), table.concat(pairs_, "&"), table.concat(canon), signed,
    hex_sha256(r.body or "") }, "\n")
  local day = amz_date:sub(1, 8)
  local scope = ("%s/%s/%s/aws4_request"):format(day, cred.region, cred.service)
  local to_sign = table.concat({ "AWS4-HMAC-SHA256", amz_date, scope, hex_sha256(canonical) }, "\n")
  local hmac = core.crypto.hmac_sha256
  local k = hmac(hmac(hmac(hmac("AWS4" .. cred.secret, day), cred.region), cred.service), "aws4_request")
  headers.authorization = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s")
    :format(cred.key_id, scope, signed, core.crypto.hex(hmac(k, to_sign)))
  return headers
end

function P:encode(body)
  local copy = {}
  for k, v in pairs(body) do copy[k] = v end
  copy.model, copy.stream = nil, nil
  copy.anthropic_version = M.VERSION
  return core.json.encode(copy), body.model
end

function P:request(bytes, model)
  local url = ("%s/model/%s/invoke-with-response-stream"):format(self.base, uri_encode(tostring(model)))
  local headers = M.sign({ method = "POST", url = url, body = bytes, headers = {
    ["content-type"] = "application/json", accept = "application/vnd.amazon.eventstream",
  } }, { key_id = self.key_id, secret = self.secret, token = self.token, region = self.region,
    service = M.SERVICE }, os.date("!%Y%m%dT%H%M%SZ", self.wall_ms() // 1000))
  headers.host = nil -- libcurl sends the URL's own, which is what was signed
  return url, headers
end

-- CRC-32 (IEEE 802.3, as zlib's crc32) of s.
local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC[i] = c
end
function M.crc32(s, crc)
  crc = (crc or 0) ~ 0xFFFFFFFF
  for i = 1, #s do crc = CRC[(crc ~ s:byte(i)) & 0xFF] ~ (crc >> 8) end
  return crc ~ 0xFFFFFFFF
end

-- The value sizes of the header types the encoding defines (6 bytes and 7 string: u16 length).
local FIXED = { [0] = 0, [1] = 0, [2] = 1, [3] = 2, [4] = 4, [5] = 8, [8] = 8, [9] = 16 }

local function read_headers(s)
  local out, pos = {}, 1
  while pos <= #s do
    local n = s:byte(pos)
    if pos + n + 1 > #s then return nil, core.error("bad_event", "a header runs past its block") end
    local name, t = s:sub(pos + 1, pos + n), s:byte(pos + n + 1)
    pos = pos + n + 2
    local value
    if t == 6 or t == 7 then
      if pos + 1 > #s then return nil, core.error("bad_event", "a header's length runs past its block") end
      local len = string.unpack(">I2", s, pos)
      if pos + 1 + len > #s then return nil, core.error("bad_event", "a header's value runs past its block") end
      value = s:sub(pos + 2, pos + 1 + len)
      pos = pos + 2 + len
    elseif FIXED[t] then
      if pos + FIXED[t] - 1 > #s then return nil, core.error("bad_event", "a header's value runs past its block") end
      value = t == 0 or (t ~= 1 and s:sub(pos, pos + FIXED[t] - 1))
      pos = pos + FIXED[t]
    else
      return nil, core.error("bad_event", ("a header of unknown type %d"):format(t))
    end
    out[name] = value
  end
  return out
end

-- The framing decoder: feed(bytes) → {frame, …} | nil, core.error("bad_event", why), where
-- frame = {headers, payload}.
-- Bytes of a frame not yet complete are kept (at most max_frame); a failure is sticky.
function M.frames(max_frame)
  max_frame = max_frame or M.MAX_FRAME
  local buf, failed = "", nil
  local function fail(why)
    failed = core.is_error(why) and why or core.error("bad_event", why)
    buf = ""
    return nil, failed
  end
  return function(bytes)
    if failed then return nil, failed end
    buf = buf .. bytes
    local out = {}
    while #buf >= 12 do
      local total, hlen, pcrc = string.unpack(">I4I4I4", buf)
      if M.crc32(buf:sub(1, 8)) ~= pcrc then return fail("a frame's prelude fails its CRC") end
      if total < 16 + hlen or total > max_frame then
        return fail(("a frame of %d bytes with %d bytes of headers"):format(total, hlen))
      end
      if #buf < total then break end
      local frame = buf:sub(1, total)
      buf = buf:sub(total + 1)
      if M.crc32(frame:sub(1, total - 4)) ~= string.unpack(">I4", frame, total - 3) then
        return fail("a frame fails its CRC")
      end
      local headers, why = read_headers(frame:sub(13, 12 + hlen))
      if not headers then return fail(why) end
      out[#out + 1] = { headers = headers, payload = frame:sub(13 + hlen, total - 4) }
    end
    return out
  end
end

-- Bedrock's exceptions as the stream's error types the client retries (or not).
local RETRY_AS = { throttlingException = "rate_limit_error", serviceUnavailableException = "overloaded_error",
  internalServerException = "api_error", modelStreamErrorException = "api_error" }

-- One frame into the assembler: nil, or why it cannot be read.
local function deliver(asm, frame)
  local h = frame.headers
  local mtype = h[":message-type"]
  if mtype == "exception" or mtype == "error" then
    local doc = core.json.decode(frame.payload)
    local name = tostring(h[":exception-type"] or h[":error-code"] or "exception")
    local message = type(doc) == "table" and type(doc.message) == "string" and doc.message
      or tostring(h[":error-message"] or "(no message)")
    return asm:event("error", core.json.encode({ error = { type = RETRY_AS[name] or name,
      message = name .. ": " .. message } }))
  end
  if mtype ~= "event" or h[":event-type"] ~= "chunk" then return nil end -- other events: skipped
  local doc = core.json.decode(frame.payload)
  local b64 = type(doc) == "table" and doc.bytes
  local inner = type(b64) == "string" and core.crypto.base64_decode(b64)
  if not inner then return core.error("bad_event", "a chunk without base64 bytes") end
  local event = core.json.decode(inner)
  if type(event) ~= "table" or type(event.type) ~= "string" then
    return core.error("bad_event", "a chunk whose bytes are not a stream event")
  end
  return asm:event(event.type, inner)
end
M.deliver = deliver

-- The body's bytes reach the decoder before the status is known: an error answer is JSON, whose
-- "{" can never start a frame (a frame's first byte is its length's highest, 0 under 16 MiB),
-- so a body that starts with anything but 0 is left to the status's handling, and is an error
-- only if the status was 200.
function P:decoder(asm, max_event_bytes)
  local feed = M.frames(math.min(M.MAX_FRAME, max_event_bytes * 2))
  local first, not_a_stream = true, false
  return function(bytes)
    if bytes == nil then
      return not_a_stream and core.error("bad_event", "the answer is not an event stream") or nil
    end
    if first and #bytes > 0 then
      first = false
      not_a_stream = bytes:byte(1) ~= 0
    end
    if not_a_stream then return nil end
    local frames, why = feed(bytes)
    if not frames then return why end
    for _, frame in ipairs(frames) do
      local e = deliver(asm, frame)
      if e then return e end
    end
  end
end

-- {"message": "…"} (every Bedrock error answer).
function P:api_error(body)
  local doc = core.json.decode(body or "")
  local message = type(doc) == "table" and (doc.message or doc.Message)
  return "error", (type(message) == "string" and message or "(no message)"):sub(1, 500)
end

return M
