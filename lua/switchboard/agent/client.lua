-- The model client: Anthropic's Messages API with streaming, over the engine's HTTP client
-- (core.http.request) and SSE parser (core.sse). One call, create(), is one turn: it returns
-- the whole assistant message, retrying on its own what the API says to retry:
--
--   as Anthropic's SDKs do: 408, 409, 429, 5xx (529 too), an answer with `x-should-retry:
--   true` (and never one with `x-should-retry: false`), an error event (overloaded,
--   api_error) or a stream cut before message_stop (nothing was acted on yet, so the request
--   is simply sent again)
--       → wait `retry-after-ms`, else `retry-after` (seconds), when the answer gives one
--         within max_retry_after_ms; else a doubling backoff shortened by a random jitter
--         (policy: agents.lua model_api.retry); never past the run's deadline, at most
--         max_attempts sends
--   400 "prompt is too long" and 413 → kind "too_long" (the run compacts its conversation)
--   400, 401, 403, 404 and other 4xx → a fatal error whose message says what to fix
--
-- The API key travels only in the x-api-key header. It is registered with the log's redaction
-- when the client is made, and every message this module builds is scrubbed of it.
--
--   local c, why = client.from_env(getenv, snap)      -- why: core.error("no_key", the card's text)
--   local msg, err = c:create(body, {signal, deadline_ms, on_progress, on_wait})
--     msg = {id, content, stop_reason, usage = {input_tokens, output_tokens}}
--     err = core.error(kind, message, {status?}), kind "aborted" | "fatal" | "too_long" |
--           "exhausted" | "budget"
local core = require("switchboard.core")
local stream = require("switchboard.agent.stream")
local anthropic = require("switchboard.agent.providers.anthropic")
local providers = require("switchboard.agent.providers")

local M = {}
local C = {}
C.__index = C

M.KEY_ENV = "ANTHROPIC_API_KEY"
M.URL_ENV = "ANTHROPIC_BASE_URL"

M.NO_KEY = "no model credential: ANTHROPIC_API_KEY is not set in switchboard's environment. "
  .. "Set it to an Anthropic API key (console.anthropic.com → API keys) and start switchboard "
  .. "again, e.g. `export ANTHROPIC_API_KEY=sk-ant-…`; to use a proxy or a stand-in, set "
  .. "ANTHROPIC_BASE_URL as well."

-- opts: api_key, base_url, settings (the snapshot's agents.model_api), request, sleep, now_ms,
-- redact, random (math.random's [0, 1) form: the jitter), provider (agent/providers/: who is
-- spoken to and how; default Anthropic's API with api_key and base_url)
function M.new(opts)
  local provider = opts.provider
  if provider == nil then
    assert(type(opts.api_key) == "string" and opts.api_key ~= "", "client.new: api_key is required")
    provider = anthropic.new{ api_key = opts.api_key, base_url = opts.base_url or opts.settings.base_url,
      version = opts.settings.version }
  end
  local redact = opts.redact or core.log_redact
  for _, key in pairs(provider.keys) do redact(key) end
  return setmetatable({
    provider = provider,
    keys = provider.keys,
    settings = opts.settings,
    request = opts.request or core.http.request,
    sleep = opts.sleep or core.sleep,
    now_ms = opts.now_ms or core.now_ms,
    random = opts.random or math.random,
  }, C)
end

-- The client switchboard's environment describes, or nil and the text a card shows. An agent
-- whose policy names a provider (agent_def.provider) gets that provider's client.
function M.from_env(getenv, snap, agent_def)
  getenv = getenv or os.getenv
  local name = agent_def and agent_def.provider
  if name ~= nil and name ~= "anthropic" then
    local provider, why = providers.from_env(getenv, snap, name)
    if not provider then return nil, why end
    return M.new{ provider = provider, settings = snap.agents.model_api }
  end
  local key = getenv(M.KEY_ENV)
  if key == nil or key == "" then return nil, core.error("no_key", M.NO_KEY) end
  local base = getenv(M.URL_ENV)
  if base == "" then base = nil end
  return M.new{ api_key = key, base_url = base, settings = snap.agents.model_api }
end

function C:scrub(text)
  text = tostring(text or "")
  for _, key in pairs(self.keys) do
    if key ~= "" then text = text:gsub(key:gsub("%p", "%%%0"), "[redacted]") end -- every plain occurrence
  end
  return text
end

-- The window is full: the run compacts its conversation and sends it again.
local function too_long(status, message)
  return status == 413 or (status == 400 and message:find("prompt is too long", 1, true) ~= nil)
end

local function retryable(status, headers)
  local should = headers and headers["x-should-retry"]
  if should == "true" then return true end
  if should == "false" then return false end
  return status == 408 or status == 409 or status == 429 or status >= 500
end

local function number_in(v)
  return v and tonumber(v:match("^%s*(%d+%.?%d*)%s*$"))
end

-- The wait the answer asks for, in ms: retry-after-ms first, then retry-after in seconds (an
-- HTTP date there is not honoured: the backoff applies).
local function retry_after_ms(headers)
  if not headers then return nil end
  local ms = number_in(headers["retry-after-ms"])
  if ms then return math.floor(ms) end
  local s = number_in(headers["retry-after"])
  if s then return math.floor(s * 1000) end
  return nil
end

function M.backoff_ms(r, attempt, random)
  local base = math.min(r.first_ms * 2 ^ (attempt - 1), r.max_ms)
  return math.floor(base * (1 - r.jitter_percent / 100 * random()))
end

-- One send. Returns "ok", message | "retry", why, wait_ms? | "fatal", err | "aborted", err
function C:attempt(body_json, opts, timeout_ms, route)
  local asm = stream.new{ on_progress = opts.on_progress }
  local decode = self.provider:decoder(asm, self.settings.max_event_bytes)
  local url, req_headers = self.provider:request(body_json, route)
  if not url then
    if req_headers.kind == "retry" then return "retry", self:scrub(req_headers.message) end
    return "fatal", core.error("fatal", self:scrub(req_headers.message))
  end
  local cut = opts.signal and core.signal(opts.signal) or core.signal()
  local parse_err
  local status, headers, resp_body = self.request{
    method = "POST", url = url, body = body_json, signal = cut,
    deadline_ms = timeout_ms, max_body = self.settings.max_answer_bytes,
    headers = req_headers,
    on_chunk = function(bytes)
      if parse_err then return end
      local e = decode(bytes)
      if e then
        parse_err = e.message
        return cut:abort("unreadable stream")
      end
    end,
  }
  if status == 200 and not parse_err then
    local e = decode(nil)
    if e then parse_err = e.message end
  end
  if opts.signal and opts.signal.aborted then
    return "aborted", core.error("aborted", tostring(opts.signal.reason or "stopped"))
  end
  if parse_err then return "retry", "the answer stream could not be read: " .. parse_err end
  if status == nil then
    local e = headers
    return "retry", ("the model API did not answer (%s: %s)"):format(tostring(e.kind), self:scrub(e.message))
  end
  if status == 200 then
    if asm.error then
      local t = asm.error.type
      local text = ("the model API failed mid-answer (%s: %s)"):format(t, self:scrub(asm.error.message))
      if t == "overloaded_error" or t == "api_error" or t == "rate_limit_error" then return "retry", text end
      return "fatal", core.error("fatal", text)
    end
    if not asm.done then
      return "retry", ("the answer stream was cut after %d events, before message_stop"):format(asm.events)
    end
    return "ok", asm:message()
  end
  local kind, message = self.provider:api_error(resp_body)
  message = self:scrub(message)
  if retryable(status, headers) then
    return "retry", ("the model API answered %d %s: %s"):format(status, kind, message), retry_after_ms(headers)
  end
  if too_long(status, message) then
    return "fatal", core.error("too_long", ("the conversation is larger than the model's window (%d %s: %s)")
      :format(status, kind, message), { status = status })
  end
  local fix = self.provider.fix[status] or ("the model API refused the request (%d %%s: %%s)"):format(status)
  return "fatal", core.error("fatal", fix:format(kind, message), { status = status })
end

-- body: the request as a table (model, max_tokens, system, messages, tools); stream is set here.
-- opts: signal (the run's hard stop), deadline_ms (core.now_ms clock: the run's end),
-- on_progress(kind, stream), on_wait(ms, why) (a retry is about to wait)
function C:create(body, opts)
  opts = opts or {}
  local body_json, route = self.provider:encode(body)
  local r = self.settings.retry
  local last
  for attempt = 1, r.max_attempts do
    local left = opts.deadline_ms and (opts.deadline_ms - self.now_ms()) or self.settings.request_timeout_ms
    if left <= 0 then
      return nil, core.error("budget", "the run's time ran out while waiting for the model"
        .. (last and (" (" .. last .. ")") or ""))
    end
    local timeout = math.floor(math.min(self.settings.request_timeout_ms, left))
    local outcome, a, b = self:attempt(body_json, opts, timeout, route)
    if outcome == "ok" then return a end
    if outcome ~= "retry" then return nil, a end
    last = a
    core.log("warn", "agent.model_retry", { attempt = attempt, reason = a })
    if attempt == r.max_attempts then break end
    local wait = b
    if not wait or wait <= 0 or wait > r.max_retry_after_ms then wait = M.backoff_ms(r, attempt, self.random) end
    left = opts.deadline_ms and (opts.deadline_ms - self.now_ms()) or math.huge
    if wait >= left then
      return nil, core.error("budget", ("the model API asked to wait %ds, longer than the run has left (%s)")
        :format(math.ceil(wait / 1000), a))
    end
    if opts.on_wait then opts.on_wait(wait, a) end
    if not self.sleep(wait, opts.signal) then
      return nil, core.error("aborted", tostring(opts.signal and opts.signal.reason or "stopped"))
    end
  end
  return nil, core.error("exhausted", ("the model API failed %d times in a row; the last: %s")
    :format(r.max_attempts, last))
end

return M
