-- The Events API and interactivity over HTTP, on the engine's HTTP server, plus the bot's own
-- health check.
--
--   local handler = http.handler{secret = signing secret, policy = policy.current,
--                                on_event = fn(payload), on_interactive = fn(payload),
--                                build = core.build, now_ms = core.wall_ms}
--   core.http.serve{host, port, handler = handler}
--
--   GET  /healthz          liveness: 200 {"ok":true,"build":{…}} while the process serves
--                          (no signature needed)
--   GET  /readyz           readiness: 200 {"ready":true,"checks":{…}} when the bot can do its
--                          job (Slack connected, policies loaded, its sandbox reachable), else
--                          503 with the same shape saying which check failed (readiness.lua)
--   GET  /runs/<token>     the run pages, when opts.pages (a pages/routes.lua handler) is given
--   POST /slack/events     Events API: url_verification → the challenge; event_callback → 200
--                          at once, then on_event in a task of its own
--   POST /slack/actions    interactivity (form field payload=JSON) → 200, then on_interactive
--   POST /github/webhook   GitHub's webhooks, when opts.on_github is given: verified by
--                          X-Hub-Signature-256 (fronts/slack/review.lua; 401 otherwise), 202,
--                          then on_github(event, delivery, payload) in a task of its own
--
-- Every POST must carry X-Slack-Request-Timestamp and X-Slack-Signature = "v0=" +
-- hex(HMAC-SHA256(secret, "v0:" .. timestamp .. ":" .. raw body)), compared in constant time,
-- with the timestamp within slack.events.window_ms of now; anything else is 401 and nothing
-- runs. Retries (x-slack-retry-num) are answered 200 like the first delivery; the caller
-- deduplicates on event_id.
--
-- A request answered 2xx is taken: its work runs in a task counted in opts.intake (an
-- in_flight: the bot's shutdown waits until every taken event reached the dispatcher). Once
-- opts.closing() is true (the bot was told to stop) events, actions and webhooks are answered
-- 503 and nothing runs: Slack sends the event again, to whichever process is up by then.
local core = require("switchboard.core")
local review = require("switchboard.fronts.slack.review")

local M = {}

local JSON = { ["content-type"] = "application/json" }
local TEXT = { ["content-type"] = "text/plain; charset=utf-8" }

-- → true | false, why (why is for the log, never for the client)
function M.verify(secret, headers, body, now_s, window_s)
  local ts = headers["x-slack-request-timestamp"]
  local sig = headers["x-slack-signature"]
  if not ts or not sig then return false, "unsigned" end
  if not ts:match("^%d+$") or #ts > 12 then return false, "bad timestamp" end
  if math.abs(now_s - tonumber(ts)) > window_s then return false, "stale timestamp" end
  local want = "v0=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, "v0:" .. ts .. ":" .. body))
  if not core.crypto.ct_equal(want, sig) then return false, "wrong signature" end
  return true
end

local function urldecode(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- fn(...) in a task of its own, counted in opts.intake while it runs.
local function take(opts, fn, ...)
  local intake = opts.intake
  if intake then intake:enter() end
  core.go(function(...)
    local ok, err = xpcall(fn, debug.traceback, ...)
    if intake then intake:leave() end
    if not ok then error(err, 0) end
  end, ...)
end

local function closing(opts, res)
  if not (opts.closing and opts.closing()) then return false end
  res:send(503, { ["content-type"] = "text/plain; charset=utf-8", ["retry-after"] = "1" },
    "shutting down: send it again\n")
  return true
end

local function form_field(body, name)
  for pair in body:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    if k and urldecode(k) == name then return urldecode(v) end
  end
  return nil
end

-- GitHub's webhook: the signature first (nothing is read from an unsigned body), then 202 at
-- once (GitHub waits 10 s at most) and the work in its own task.
function M.github(opts, req, res, log)
  if req.method ~= "POST" then
    return res:send(405, { ["content-type"] = "text/plain", allow = "POST" }, "POST only\n")
  end
  local ok, why = review.verify(opts.github_secret, req.headers, req.body)
  if not ok then
    log("warn", "github.webhook_refused", { reason = why, remote = req.remote_addr })
    return res:send(401, TEXT, "invalid signature\n")
  end
  local payload = core.json.decode(req.body or "")
  if type(payload) ~= "table" then return res:send(400, TEXT, "the body is not JSON\n") end
  if closing(opts, res) then return end
  res:send(202)
  take(opts, opts.on_github, req.headers["x-github-event"], req.headers["x-github-delivery"], payload)
end

function M.handler(opts)
  local log = opts.log or core.log
  local now_ms = opts.now_ms or core.wall_ms
  -- the build stamp as every /healthz spells it (sandboxd's, the resident's, `version --json`)
  local stamp = opts.build or core.build
  local build = { commit = stamp.commit, builtAt = stamp.built_at }
  return function(req, res)
    if req.path == "/healthz" and (req.method == "GET" or req.method == "HEAD") then
      return res:send(200, JSON, core.json.encode({ ok = true, build = build }))
    end
    if req.path == "/readyz" and (req.method == "GET" or req.method == "HEAD") and opts.readiness then
      local ready, checks = opts.readiness:check()
      return res:send(ready and 200 or 503, JSON, core.json.encode({ ready = ready, checks = checks, build = build }))
    end
    if opts.pages and opts.pages(req, res) then return end -- the run pages (pages/routes.lua)
    if req.path == "/github/webhook" and opts.on_github and not opts.health_only then
      return M.github(opts, req, res, log)
    end
    if opts.health_only or (req.path ~= "/slack/events" and req.path ~= "/slack/actions") then
      return res:send(404, TEXT, "not found: Slack posts to /slack/events and /slack/actions\n")
    end
    if req.method ~= "POST" then
      return res:send(405, { ["content-type"] = "text/plain", allow = "POST" }, "POST only\n")
    end
    local window_s = opts.policy().slack.events.window_ms / 1000
    local ok, why = M.verify(opts.secret, req.headers, req.body, now_ms() / 1000, window_s)
    if not ok then
      log("warn", "slack.events_refused", { reason = why, remote = req.remote_addr })
      return res:send(401, TEXT, "invalid request signature\n")
    end
    if closing(opts, res) then return end
    if req.path == "/slack/actions" then
      local raw = form_field(req.body, "payload")
      local payload = core.json.decode(raw or "")
      if type(payload) ~= "table" then return res:send(400, TEXT, "no payload\n") end
      res:send(200)
      return take(opts, opts.on_interactive, payload)
    end
    local payload = core.json.decode(req.body or "")
    if type(payload) ~= "table" then return res:send(400, TEXT, "the body is not JSON\n") end
    if payload.type == "url_verification" then
      return res:send(200, JSON, core.json.encode({ challenge = tostring(payload.challenge or "") }))
    end
    res:send(200)
    if payload.type == "event_callback" then take(opts, opts.on_event, payload, req.headers["x-slack-retry-num"]) end
  end
end

return M
