-- Slack's Web API: POST <api_url>/<method> with a bearer token; every answer says `ok`.
--
--   local api = webapi.new{url = "https://slack.com/api", token = …, deadline_ms = 10000,
--                          request = core.http.request}
--   api:call(method, args, opts) → body | nil, err
--     opts: form = true (form-encoded, for methods that do not take JSON), channel = id (the
--           rate-limit gate to share), give_up_ms = how long 429s and transport failures are
--           retried (default 0: once, but a 429 is always waited out once), signal
--     err: core.error "slack" with error = "channel_not_found" (Slack's word) | "transport" |
--          "rate_limited" | "timeout" | "aborted"
--   api:upload(url, bytes, opts) → true | nil, err       the raw POST of the upload flow (scrub
--                                                        the bytes first: their length is sent ahead)
--
-- A 429 is waited out by its Retry-After (capped at max_retry_after_ms), and every later call
-- for the same channel waits for it too (one gate per channel), so a rate limit is honoured
-- rather than hammered. The token is never in a message, a log line or an error.
--
-- Every string of every call's arguments goes through the log's redaction (core.log_scrub)
-- before it leaves: whatever a card, an answer or an error carries, a secret the process
-- registered (the bot's tokens, the model key, the sandbox bearer, GitHub's) is posted as
-- [redacted] (docs/isolation.md "Fronts that serve other people").
local core = require("switchboard.core")

local M = {}
local A = {}
A.__index = A

function M.new(opts)
  return setmetatable({
    url = (opts.url or "https://slack.com/api"):gsub("/+$", ""),
    token = opts.token,
    deadline_ms = opts.deadline_ms or 10000,
    max_retry_after_ms = opts.max_retry_after_ms or 60000,
    request = opts.request or core.http.request,
    gates = {},            -- channel → wall-clock ms before which calls wait
    log = opts.log or core.log,
    scrub = opts.scrub or core.log_scrub,
    counts = { calls = 0, rate_limited = 0 },
  }, A)
end

local function urlencode(s)
  return (tostring(s):gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function form(args)
  local keys = {}
  for k in pairs(args) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = args[k]
    if type(v) == "table" then v = core.json.encode(v) end
    parts[#parts + 1] = urlencode(k) .. "=" .. urlencode(v)
  end
  return table.concat(parts, "&")
end

-- A copy of v with every string (keys too) scrubbed of the registered secrets.
local function scrubbed(v, scrub)
  if type(v) == "string" then return scrub(v) end
  if type(v) ~= "table" or v == core.json.null then return v end
  local out = {}
  for k, x in pairs(v) do out[scrubbed(k, scrub)] = scrubbed(x, scrub) end
  return setmetatable(out, getmetatable(v)) -- keeps cjson's empty-array marker
end
M.scrubbed = scrubbed

local function wait_gate(self, channel, signal)
  local until_ms = channel and self.gates[channel]
  if not until_ms then return true end
  local wait = until_ms - core.wall_ms()
  if wait <= 0 then
    self.gates[channel] = nil
    return true
  end
  return core.sleep(wait, signal)
end

local function once(self, method, args, opts)
  args = scrubbed(args or {}, self.scrub)
  local body, ctype
  if opts.form then
    body, ctype = form(args or {}), "application/x-www-form-urlencoded"
  else
    body, ctype = core.json.encode(args or {}), "application/json; charset=utf-8"
  end
  self.counts.calls = self.counts.calls + 1
  local status, headers, answer = self.request{
    method = "POST", url = self.url .. "/" .. method, body = body,
    headers = { authorization = "Bearer " .. self.token, ["content-type"] = ctype },
    deadline_ms = self.deadline_ms, signal = opts.signal, max_body = 4 << 20,
  }
  if not status then
    return nil, core.error(headers and headers.kind or "transport",
      ("Slack %s: %s"):format(method, headers and headers.message or "failed"), { retry = true })
  end
  if status == 429 then
    self.counts.rate_limited = self.counts.rate_limited + 1
    local after = tonumber(headers["retry-after"] or "") or 1
    local ms = math.min(math.max(after, 0) * 1000, self.max_retry_after_ms)
    return nil, core.error("rate_limited", ("Slack %s: rate limited (Retry-After %ss)"):format(method, after),
      { retry = true, retry_after_ms = ms })
  end
  local decoded = core.json.decode(answer or "")
  if status >= 500 then
    return nil, core.error("transport", ("Slack %s: HTTP %d"):format(method, status), { retry = true })
  end
  if type(decoded) ~= "table" then
    return nil, core.error("transport", ("Slack %s: HTTP %d with a body that is not JSON")
      :format(method, status))
  end
  if decoded.ok ~= true then
    local e = tostring(decoded.error or "unknown_error")
    return nil, core.error("slack", ("Slack %s answered %s"):format(method, e), { error = e })
  end
  return decoded
end

function A:call(method, args, opts)
  opts = opts or {}
  local started = core.now_ms()
  local give_up = opts.give_up_ms or 0
  local backoff = 500
  local limited = 0 -- 429s waited out so far
  while true do
    local ok, aerr = wait_gate(self, opts.channel, opts.signal)
    if not ok then return nil, aerr end
    local res, err = once(self, method, args, opts)
    if res then return res end
    if not err.retry then return nil, err end
    local waited = core.now_ms() - started
    local wait
    if err.kind == "rate_limited" then
      wait = err.retry_after_ms
      if opts.channel then
        self.gates[opts.channel] = math.max(self.gates[opts.channel] or 0, core.wall_ms() + wait)
      end
      if limited > 0 and waited + wait > give_up then return nil, err end
      limited = limited + 1
    else
      if waited + backoff > give_up then return nil, err end
      wait = backoff
      backoff = math.min(backoff * 2, 10000)
    end
    local slept, serr = core.sleep(wait, opts.signal)
    if not slept then return nil, serr end
  end
end

-- The upload step of files.getUploadURLExternal → POST → files.completeUploadExternal.
function A:upload(url, bytes, opts)
  opts = opts or {}
  local status, headers = self.request{
    method = "POST", url = url, body = self.scrub(bytes),
    headers = { ["content-type"] = "application/octet-stream" },
    deadline_ms = opts.deadline_ms or 60000, signal = opts.signal,
  }
  if not status then
    return nil, core.error("transport", "uploading the file: " .. tostring(headers and headers.message))
  end
  if status ~= 200 then
    return nil, core.error("slack", ("uploading the file: HTTP %d"):format(status), { error = "upload_failed" })
  end
  return true
end

return M
