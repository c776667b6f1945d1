-- A Kubernetes API client for the `kubernetes` executor (docs/deploy.md "Kubernetes with
-- agent-sandbox"), doing what Kubernetes' own clients do, for the few calls the executor makes:
--
--   * Where and who: in a pod, the service account's token, CA and namespace
--     (/var/run/secrets/kubernetes.io/serviceaccount, with KUBERNETES_SERVICE_HOST/_PORT); else
--     a kubeconfig (the file KUBECONFIG names) in its JSON form (`kubectl config view --raw
--     --minify --flatten -o json`): its current context's server, certificate-authority(-data),
--     token or client-certificate-data + client-key-data, and namespace. The token file is
--     read again once a minute (the kubelet rotates bound tokens). No credential is ever put in
--     a URL, a log line or a message.
--   * JSON over HTTPS through libcurl (core.http.request with the CA).
--   * Errors are the API's Status objects: {status, reason, message} (reason AlreadyExists,
--     NotFound, Forbidden …), the message quoted short. 429 (and 503) with Retry-After are
--     waited out and sent again, at most timeouts kubernetes.max_retries times, each wait at
--     most kubernetes.max_retry_after_ms.
--   * watch_until(path, rv, done): a watch from resourceVersion rv (bookmarks asked for, so the
--     version stays fresh while nothing changes), resumed from the last version seen when the
--     stream ends or is cut, and — when the server says that version is gone (410 Expired, as
--     an ERROR event or as the answer) — relisted with a GET of the object and watched again
--     from there. done(event_type, object) says when to stop.
local core = require("switchboard.core")
local tracing = require("switchboard.exec.tracing")
local watch_mod = require("switchboard.exec.kubernetes_watch")

local M = {}
M.__index = M

M.SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
M.TOKEN_REREAD_MS = 60 * 1000
M.QUOTE_BYTES = 200
M.RESUME_PAUSE_MS = 250

local json = core.json

local function first_line(s) return (tostring(s or ""):match("^[^\n]*")) end
local function quote(s) return first_line(s):sub(1, M.QUOTE_BYTES) end

local function read(path) return (core.fs.read_file(path)) end

local function trim(s) return s and (s:gsub("^%s+", ""):gsub("%s+$", "")) or nil end

local function named(list, name)
  for _, e in ipairs(type(list) == "table" and list or {}) do
    if type(e) == "table" and e.name == name then return e end
  end
end

-- The kubeconfig's current context → config, or nil, err (kind config).
local function from_kubeconfig(path)
  local text = read(path)
  if not text then return nil, core.error("config", ("the kubeconfig %s cannot be read"):format(path)) end
  local doc = json.decode(text)
  if type(doc) ~= "table" then
    return nil, core.error("config", ("the kubeconfig %s is not JSON; write it with `kubectl config view --raw --minify "
      .. "--flatten -o json`"):format(path))
  end
  local ctx = named(doc.contexts, doc["current-context"])
  ctx = ctx and ctx.context
  if type(ctx) ~= "table" then return nil, core.error("config", ("the kubeconfig %s has no current context"):format(path)) end
  local cluster = named(doc.clusters, ctx.cluster)
  local user = named(doc.users, ctx.user)
  cluster, user = cluster and cluster.cluster, user and user.user or {}
  if type(cluster) ~= "table" or type(cluster.server) ~= "string" then
    return nil, core.error("config", ("the kubeconfig %s names no server for context %s"):format(path, tostring(doc["current-context"])))
  end
  local b64 = core.crypto.base64_decode
  local cfg = {
    server = cluster.server:gsub("/+$", ""),
    namespace = type(ctx.namespace) == "string" and ctx.namespace or nil,
    ca_file = type(cluster["certificate-authority"]) == "string" and cluster["certificate-authority"] or nil,
    ca_pem = type(cluster["certificate-authority-data"]) == "string" and b64(cluster["certificate-authority-data"]) or nil,
    token = type(user.token) == "string" and user.token or nil,
    token_file = type(user.tokenFile) == "string" and user.tokenFile or nil,
  }
  if type(user["client-certificate-data"]) == "string" and type(user["client-key-data"]) == "string" then
    cfg.cert_pem = b64(user["client-certificate-data"])
    cfg.key_pem = b64(user["client-key-data"])
  end
  return cfg
end

-- Where the API server is and how to authenticate. opts: getenv, sa_dir, kubeconfig_env
-- (the variable naming the kubeconfig, policies/execution.lua). → config | nil, why
function M.config(opts)
  opts = opts or {}
  local getenv = opts.getenv or os.getenv
  local sa = opts.sa_dir or M.SA_DIR
  local host, port = getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
  if host and host ~= "" and read(sa .. "/token") then
    if host:find(":", 1, true) then host = "[" .. host .. "]" end
    return {
      server = "https://" .. host .. ":" .. (port ~= nil and port ~= "" and port or "443"),
      token_file = sa .. "/token", ca_file = sa .. "/ca.crt",
      namespace = trim(read(sa .. "/namespace")),
      in_cluster = true,
    }
  end
  local kc = getenv(opts.kubeconfig_env or "KUBECONFIG")
  if kc and kc ~= "" then return from_kubeconfig(kc:match("^[^:]+")) end
  return nil, core.error("config", "neither in a pod with a service account (" .. sa .. ") nor given a kubeconfig ("
    .. (opts.kubeconfig_env or "KUBECONFIG") .. ")")
end

-- cfg: M.config's; opts: timeouts (fn → the policy's timeouts.kubernetes), request, sleep, now_ms
function M.new(cfg, opts)
  opts = opts or {}
  return setmetatable({
    cfg = cfg, timeouts = opts.timeouts,
    -- each request an http.request child of the operation's span (exec/tracing.lua)
    request = tracing.http(opts.request or core.http.request, "kubernetes"),
    sleep = opts.sleep or core.sleep, now_ms = opts.now_ms or core.now_ms,
    token_read_ms = nil,
  }, M)
end

local function bearer(self)
  if self.cfg.token_file and (self.token_read_ms == nil or self.now_ms() - self.token_read_ms > M.TOKEN_REREAD_MS) then
    self.token = trim(read(self.cfg.token_file)) or self.token
    self.token_read_ms = self.now_ms()
  end
  return self.token or self.cfg.token
end

local function headers(self, content_type)
  local h = { accept = "application/json" }
  local token = bearer(self)
  if token then h.authorization = "Bearer " .. token end
  if content_type then h["content-type"] = content_type end
  return h
end

local function base_request(self, method, path, extra)
  local req = {
    method = method, url = self.cfg.server .. path, headers = headers(self, extra.content_type),
    ca_file = self.cfg.ca_file, ca_pem = self.cfg.ca_pem,
    client_cert_pem = self.cfg.cert_pem, client_key_pem = self.cfg.key_pem,
    max_body = 4 << 20,
  }
  for k, v in pairs(extra) do if k ~= "content_type" then req[k] = v end end
  return req
end

-- An API failure: {status, reason, message, retry_after_ms?} (status nil for a transport failure,
-- with kind timeout | transport | aborted).
local function failure(status, hdrs, raw)
  local st = watch_mod.status_of(json.decode(raw or ""))
  local ra = tonumber(hdrs and hdrs["retry-after"] or nil)
  return {
    status = status, reason = st and st.reason or ("HTTP " .. status),
    message = quote(st and st.message or (raw ~= "" and raw) or "no body"),
    retry_after_ms = ra and math.floor(ra * 1000) or nil,
  }
end

-- One call: method, path, body (a table, sent as JSON; content_type for PATCH), signal.
-- → status, doc | nil, failure. 429 and 503 with Retry-After are sent again after the wait.
function M:call(method, path, body, opts)
  opts = opts or {}
  local t = self.timeouts()
  local payload = body ~= nil and json.encode(body) or nil
  local tries = 0
  while true do
    local status, hdrs, raw = self.request(base_request(self, method, path, {
      body = payload, deadline_ms = t.api_timeout_ms, signal = opts.signal,
      content_type = payload and (opts.content_type or "application/json") or nil,
    }))
    if status == nil then
      local e = hdrs or {}
      return nil, core.error(e.kind or "transport", quote(e.message or e.kind))
    end
    if status >= 200 and status < 300 then
      local doc = json.decode(raw or "")
      if type(doc) ~= "table" then
        return nil, { status = status, reason = "BadAnswer", message = "an answer that is not a JSON object" }
      end
      return status, doc
    end
    local f = failure(status, hdrs, raw)
    tries = tries + 1
    if (status == 429 or (status == 503 and f.retry_after_ms)) and tries <= t.max_retries then
      local wait = math.min(math.max(f.retry_after_ms or 1000, 100), t.max_retry_after_ms)
      if not self.sleep(wait, opts.signal) then return nil, core.error("aborted", "stopped") end
    else
      return nil, f
    end
  end
end

-- The watch: path is the collection's, query names the object (fieldSelector); get_path reads
-- it again for a relist. done(type, object) → true stops. bound_ms: the whole wait.
-- Returns "done", object | "gone" (a DELETED or a 404 on relist) | nil, failure (kind timeout
-- when bound_ms passed, aborted, or an API failure). self.resumes / self.relists count.
function M:watch_until(w, done)
  local t = self.timeouts()
  local deadline = self.now_ms() + w.bound_ms
  local rv = w.rv
  while true do
    local left = deadline - self.now_ms()
    if left <= 0 then return nil, core.error("timeout", "the wait ended") end
    if w.signal and w.signal.aborted then return nil, core.error("aborted", "stopped") end
    local cut = w.signal and core.signal(w.signal) or core.signal()
    local dec = watch_mod.decoder()
    local outcome, stale, broken = nil, false, nil
    local function on_chunk(bytes)
      if outcome or stale or broken then return end
      local events, why = dec:feed(bytes)
      if not events then broken = why; cut:abort("broken"); return end
      for _, ev in ipairs(events) do
        if ev.type == "ERROR" then
          local st = watch_mod.status_of(ev.object)
          if st and st.code == 410 then stale = true else broken = "an ERROR event: " .. quote(st and st.message) end
          cut:abort("error event")
          return
        end
        rv = watch_mod.resource_version(ev.object) or rv
        if ev.type ~= "BOOKMARK" then
          local verdict = done(ev.type, ev.object)
          if verdict then outcome = { verdict, ev.object }; cut:abort("done"); return end
        end
      end
    end
    local secs = math.max(1, math.min(t.watch_seconds, math.ceil(left / 1000)))
    local query = ("%s&watch=true&allowWatchBookmarks=true&timeoutSeconds=%d&resourceVersion=%s")
      :format(w.query, secs, rv or "")
    local status, hdrs, raw = self.request(base_request(self, "GET", w.path .. "?" .. query, {
      deadline_ms = math.min(left, secs * 1000 + t.api_timeout_ms), signal = cut, on_chunk = on_chunk,
      max_body = 64 << 20,
    }))
    if outcome then return outcome[1], outcome[2] end
    if broken then return nil, { reason = "BadWatch", message = broken } end
    if status ~= nil and status ~= 200 and status ~= 410 then
      local f = failure(status, hdrs, raw)
      if status == 429 and f.retry_after_ms then
        if not self.sleep(math.min(f.retry_after_ms, t.max_retry_after_ms), w.signal) then
          return nil, core.error("aborted", "stopped")
        end
      else
        return nil, f
      end
    elseif stale or status == 410 then
      -- the version is compacted away: read the object anew and watch from its version
      self.relists = (self.relists or 0) + 1
      local st, doc = self:call("GET", w.get_path, nil, { signal = w.signal })
      if st == nil then
        if doc.status == 404 then return "gone" end
        return nil, doc
      end
      local verdict = done("RELIST", doc)
      if verdict then return verdict, doc end
      rv = watch_mod.resource_version(doc) or rv
    else
      if status == nil and (hdrs or {}).kind == "aborted" and w.signal and w.signal.aborted then
        return nil, core.error("aborted", "stopped")
      end
      -- the stream ended (its timeoutSeconds) or was cut: resume from the last version seen
      -- (after a short pause when nothing answered, so an unreachable server is not spun on)
      self.resumes = (self.resumes or 0) + 1
      if status == nil and not self.sleep(math.min(M.RESUME_PAUSE_MS, math.max(1, left)), w.signal) then
        return nil, core.error("aborted", "stopped")
      end
    end
  end
end

return M
