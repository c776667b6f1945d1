-- The e2b executor: a thread's commands run in an E2B sandbox (a Firecracker micro-VM) of its
-- own, created on the thread's first command and reused by its follow-ups (docs/e2b.md;
-- docs/contract.md#e2b, #hard-stop, #failure-infra, #capacity).
--
--   * Control plane (api.<domain>, X-API-Key): POST /sandboxes {templateID, timeout, envVars,
--     metadata}, POST /sandboxes/{id}/connect {timeout}, POST /sandboxes/{id}/timeout
--     {timeout}, DELETE /sandboxes/{id}. The key lives in the bot's environment and in that
--     one header; no message, URL or body ever carries it.
--   * The sandbox's daemon (envd, X-Access-Token): Connect RPC process.Process/Start streams
--     the command's events (exec/connect.lua decodes the envelopes); /files?path= reads and
--     writes files.
--   * The deadline and the kill reach the command's whole process group (M.WRAPPER): a small
--     bash (the pid envd reports) runs `timeout -k GRACE LIMIT bash -c COMMAND` as a job of
--     its own process group (set -m), waits for it and then kills that group, so nothing the
--     command left behind outlives it. At the limit coreutils timeout TERMs the group, KILLs
--     it after the grace and answers 124, rendered with the line naming the limit. envd's own
--     Connect-Timeout-Ms (limit + kill grace + connect grace) is a backstop behind it (envd's
--     kills reach the pid only), and our side waits for the stream at most limit + margin.
--   * A hard stop drops the stream at once, then sends E2B's SendSignal SIGTERM to the
--     wrapper, whose trap KILLs the group; if that call fails, a second process call sends the
--     wrapper the same TERM. (SendSignal SIGKILL, E2B's own kill, would reach the pid only.)
--     A stop before the start event was read has no pid yet: it goes by the command's mark.
--   * Failures: a transport failure, a 5xx, a stream cut mid-command or a broken envelope is
--     ExecInfraError (span code infra, or timeout / http <status>); a refused API key or
--     access token is infra naming the key; a sandbox that disappeared (404 on connect or the
--     process API, E2B's proxy's 502 "sandbox was not found") is infra naming it — it is
--     forgotten, and the next command starts a fresh sandbox. A full account (429 on create)
--     waits like a full fleet, then ExecCapacityError. A nonzero exit is a result.
local core = require("switchboard.core")
local cjson = require("cjson")
local budget = require("switchboard.shell.budget")
local connect = require("switchboard.exec.connect")
local errors = require("switchboard.exec.errors")
local render = require("switchboard.shell.render")
local workspace = require("switchboard.shell.workspace")

local M = {}
M.__index = M

M.ENVD_PORT = 49983
M.DEFAULT_DOMAIN = "e2b.app"
M.DEFAULT_TEMPLATE = "base"
M.DEFAULT_WORKDIR = "/home/user"
M.WHERE = "E2B sandbox"
M.QUOTE_BYTES = 200

-- The wrapper every command runs in: `bash -c WRAPPER switchboard GRACE LIMIT COMMAND`.
--   fd 3 keeps the real stderr for the command; the wrapper's own stderr (job-control notices,
--   a kill of an empty group) goes nowhere. set -m gives the job a process group of its own
--   (its id is the job's pid, $t); timeout makes the limit reach that group; TERM to the
--   wrapper (a stop) KILLs the group; a normal end KILLs what the command left in it.
--   The trap names the group by $!, not $t: bash sets $! as soon as the job is forked, while a
--   wrapper descheduled on a loaded machine may take a TERM between the fork and `t=$!` — with
--   $t empty the kill went nowhere and a background child outlived the stop.
--   $4 is the command's mark (random hex): the wrapper keeps its pid in /tmp/.switchboard-MARK.pid
--   while it runs, and does not start the command when /tmp/.switchboard-MARK.stop exists — so a
--   stop that comes before envd's start event has named the pid still reaches it (M.STOP_MARKED):
--   the stopper writes .stop, then TERMs the pid in .pid; the wrapper writes .pid (its trap set),
--   then looks for .stop. One of the two always sees the other's file.
M.WRAPPER = table.concat({
  'exec 3>&2 2>/dev/null',
  'm=/tmp/.switchboard-$4',
  'set -m',
  [[trap 'kill -KILL -- "-$!"; rm -f "$m.pid" "$m.stop"; exit 143' TERM]],
  'echo "$$" > "$m.pid"',
  '[ -e "$m.stop" ] && { rm -f "$m.pid" "$m.stop"; exit 143; }',
  'timeout -k "$1" "$2" /bin/bash -c "$3" 2>&3 3>&- &',
  't=$!',
  'wait "$t"; rc=$?',
  'kill -KILL -- "-$t"',
  'rm -f "$m.pid" "$m.stop"',
  'exit "$rc"',
}, "\n")
-- The stop's fallback when SendSignal cannot be sent: the same TERM from inside ($1: the pid).
M.STOP = 'kill -TERM -- "$1"'
-- The stop of a command whose pid is not known yet ($1: its mark; see M.WRAPPER).
M.STOP_MARKED = table.concat({
  'm=/tmp/.switchboard-$1',
  ': > "$m.stop"',
  'p=$(cat "$m.pid" 2>/dev/null) && [ -n "$p" ] && kill -TERM -- "$p"',
  'exit 0',
}, "\n")

local json = cjson.new()
json.decode_invalid_numbers(false)
json.encode_invalid_numbers(false)

local function first_line(s) return (tostring(s or ""):match("^[^\n]*")) end
local function quote(s)
  s = tostring(s or ""):gsub("%s+", " "):gsub("^ ", "")
  return s:sub(1, M.QUOTE_BYTES)
end
-- lua-cjson decodes every number as a float: a whole one back to an integer, else nil.
local function int(v) return type(v) == "number" and math.tointeger(v) or nil end
local function seconds(ms) return math.floor(ms / 1000 + 0.5) end
local function whole_seconds_up(ms) return math.tointeger(math.max(1, (ms + 999) // 1000)) end

-- Where E2B lives, from the environment E2B's own SDKs read:
--   E2B_DOMAIN       the domain (default e2b.app): api.<domain>, 49983-<id>.<domain>
--   E2B_API_URL      the control plane's base URL (the SDKs' override; any scheme)
--   E2B_SANDBOX_URL  envd's base URL for every sandbox (the SDKs' override: requests then
--                    name the sandbox in E2b-Sandbox-Id / E2b-Sandbox-Port headers)
--   E2B_DEBUG=true   the SDKs' debug mode: http://localhost:3000 and http://localhost:49983
function M.endpoints(getenv)
  getenv = getenv or os.getenv
  local function env(name)
    local v = getenv(name)
    if v == nil or v == "" then return nil end
    return (v:gsub("/+$", ""))
  end
  local debug = (getenv("E2B_DEBUG") or ""):lower() == "true"
  local domain = env("E2B_DOMAIN") or M.DEFAULT_DOMAIN
  return {
    domain = domain,
    debug = debug,
    api_url = env("E2B_API_URL") or (debug and "http://localhost:3000" or ("https://api." .. domain)),
    sandbox_url = env("E2B_SANDBOX_URL"),
  }
end

local function no_envs() return {} end

-- opts: api_key, key_env (the variable it came from, for messages), thread_key,
--       policy (fn → the current snapshot; read only when a call's opts carry no snap),
--       resolve_envs (fn → NAME = value, called on every command), getenv (for the
--       endpoints), template, workdir, agent, state_dir (optional: the thread's sandbox id is
--       kept there, so a later process — the next `switchboard exec --thread` — reconnects to
--       it), request / sleep / now_ms (core's by default; specs may drive them)
function M.new(opts)
  assert(type(opts.api_key) == "string" and opts.api_key ~= "", "e2b executor: opts.api_key is required")
  assert(type(opts.policy) == "function", "e2b executor: opts.policy is required")
  local workdir = (opts.workdir or M.DEFAULT_WORKDIR):gsub("/+$", "")
  return setmetatable({
    backend = "e2b",
    api_key = opts.api_key,
    key_env = opts.key_env,
    thread_key = opts.thread_key or "default",
    agent = opts.agent,
    policy = opts.policy,
    resolve_envs = opts.resolve_envs or no_envs,
    ends = M.endpoints(opts.getenv),
    template = opts.template or M.DEFAULT_TEMPLATE,
    workdir = workdir ~= "" and workdir or "/",
    state_dir = opts.state_dir,
    request = opts.request or core.http.request,
    sleep = opts.sleep or core.sleep,
    now_ms = opts.now_ms or core.now_ms,
    sandbox = nil, -- {id, token, domain, expires_ms (our clock)}
  }, M)
end

---------------------------------------------------------------------------------------------
-- The remembered sandbox id (state_dir/e2b/<thread's directory name>)

local function id_file(self)
  if not self.state_dir then return nil end
  return self.state_dir .. "/e2b/" .. workspace.dir_name(self.thread_key)
end

local function remember(self, id)
  local f = id_file(self)
  if not f then return end
  core.fs.mkdir_p(self.state_dir .. "/e2b", tonumber("700", 8))
  core.fs.write_file(f, id)
end

local function recalled(self)
  local f = id_file(self)
  if not f then return nil end
  local id = core.fs.read_file(f)
  if type(id) == "string" and id:find("^[%w%-_]+$") then return id end
  return nil
end

local function forget(self)
  self.sandbox = nil
  local f = id_file(self)
  if f and core.fs.exists(f) then os.remove(f) end
end

---------------------------------------------------------------------------------------------
-- Messages (what the model and the person read)

local function gone_message(id, route, detail)
  return ("E2B sandbox %s is gone (%s answered: %s) — E2B reclaimed or killed it, and its files "
    .. "are lost; the next command starts a fresh sandbox: re-clone before continuing")
    :format(id, route, detail)
end

local function key_refused_message(self, status, detail)
  return ("E2B refused the API key (HTTP %d: %s) — check %s in the bot's environment (a key "
    .. "from https://e2b.dev/dashboard?tab=keys)"):format(status, detail, self.key_env or "E2B_API_KEY")
end

local function token_refused_message(id, route, status, detail)
  return ("E2B sandbox %s refused its access token on %s (HTTP %d: %s) — the sandbox may have "
    .. "been replaced; the next command reconnects"):format(id, route, status, detail)
end

local function http_message(who, route, status, detail)
  return ("%s %s answered HTTP %d: %s"):format(who, route, status, detail)
end

local function transport_message(who, route, detail)
  return ("%s %s request failed (%s) — E2B may be unreachable; the command may still be running "
    .. "in the sandbox"):format(who, route, detail)
end

local function detail_of(raw)
  local ok, doc = pcall(json.decode, raw or "")
  if ok and type(doc) == "table" and type(doc.message) == "string" and doc.message:find("%S") then
    return quote(first_line(doc.message))
  end
  raw = quote(raw)
  return raw ~= "" and raw or "no body"
end

local function infra(message, code) return nil, errors.infra(message, code or "infra") end

---------------------------------------------------------------------------------------------
-- Control plane

local function api_headers(self)
  return { ["x-api-key"] = self.api_key, ["content-type"] = "application/json" }
end

-- One control-plane call. Returns status, raw body, or nil, err (infra / stopped).
local function api_call(self, snap, method, path, body, signal)
  local status, headers, raw = self.request{
    method = method, url = self.ends.api_url .. path, headers = api_headers(self),
    body = body and json.encode(body) or nil, deadline_ms = snap.timeouts.e2b.api_timeout_ms,
    signal = signal, max_body = 1 << 20,
  }
  if status == nil then
    local err = headers or {}
    if err.kind == "aborted" or (signal and signal.aborted) then return nil, "stopped" end
    local route = method .. " " .. path:gsub("^/sandboxes/[^/]+", "/sandboxes/{id}")
    if err.kind == "timeout" then
      return infra(("E2B API %s gave no answer within %ds — E2B may be unreachable")
        :format(route, seconds(snap.timeouts.e2b.api_timeout_ms)), "timeout")
    end
    return infra(transport_message("E2B API", route, first_line(err.message or err.kind)))
  end
  if status == 401 or status == 403 then
    return infra(key_refused_message(self, status, detail_of(raw)), "http " .. status)
  end
  return status, raw
end

local function decode_object(raw)
  local ok, doc = pcall(json.decode, raw or "")
  if ok and type(doc) == "table" then return doc end
  return nil
end

local function adopt(self, snap, doc, id)
  if type(doc) ~= "table" then return nil end
  local sid = type(doc.sandboxID) == "string" and doc.sandboxID or id
  if type(sid) ~= "string" or not sid:find("^[%w%-_]+$") then return nil end
  local token = doc.envdAccessToken
  self.sandbox = {
    id = sid,
    token = type(token) == "string" and token ~= "" and token or nil,
    domain = type(doc.domain) == "string" and doc.domain ~= "" and doc.domain or self.ends.domain,
    expires_ms = self.now_ms() + snap.timeouts.e2b.sandbox_timeout_ms,
  }
  remember(self, sid)
  return self.sandbox
end

-- POST /sandboxes; a full account (429) waits like a full fleet, then capacity.
local function create(self, snap, wait_for, signal)
  local body = {
    templateID = self.template,
    timeout = whole_seconds_up(snap.timeouts.e2b.sandbox_timeout_ms),
    envVars = {}, -- credentials go with each command, never into the sandbox's environment
    metadata = { switchboard_thread = workspace.dir_name(self.thread_key), agent = self.agent },
  }
  local waits, waited, i = nil, 0, 1
  while true do
    local status, raw = api_call(self, snap, "POST", "/sandboxes", body, signal)
    if status == nil then return nil, raw end
    if status == 200 or status == 201 then
      local sb = adopt(self, snap, decode_object(raw))
      if not sb then
        return infra(("E2B API POST /sandboxes answered without a sandbox id (%s)"):format(quote(raw)))
      end
      return sb
    end
    if status ~= 429 then
      return infra(http_message("E2B API", "POST /sandboxes", status, detail_of(raw)), "http " .. status)
    end
    waits = waits or budget.fleet_busy_waits(snap, wait_for)
    local d = waits[i]
    if d == nil then
      return nil, errors.capacity(("E2B sandbox limit reached — no sandbox could be created after "
        .. "waiting %ds (HTTP 429: %s); try again in a few minutes"):format(seconds(waited), detail_of(raw)), waited)
    end
    if not self.sleep(d, signal) then return nil, "stopped" end
    waited, i = waited + d, i + 1
  end
end

-- The thread's sandbox, alive for at least need_ms more: reuse, reconnect or create.
-- Returns sandbox, notice (a line for the result when a remembered sandbox was reclaimed), or
-- nil, err | "stopped".
local function ensure(self, snap, need_ms, wait_for, signal)
  local t = snap.timeouts.e2b
  local sb = self.sandbox
  if sb and sb.token and self.now_ms() >= sb.expires_ms then
    -- Past its timeout by our clock: E2B has probably reclaimed it, as "if-clean" lets it.
    -- Reconnect if it is still there, else go on in a fresh one (below).
    sb = { id = sb.id, expired = true }
    self.sandbox = sb
  end
  if sb and sb.token then
    if self.now_ms() + need_ms <= sb.expires_ms then return sb end
    local secs = whole_seconds_up(need_ms + t.sandbox_timeout_ms)
    local status, raw = api_call(self, snap, "POST", "/sandboxes/" .. sb.id .. "/timeout", { timeout = secs }, signal)
    if status == nil then return nil, raw end
    if status == 404 then
      forget(self)
      return infra(gone_message(sb.id, "POST /sandboxes/{id}/timeout", detail_of(raw)))
    end
    if status >= 300 then
      return infra(http_message("E2B API", "POST /sandboxes/{id}/timeout", status, detail_of(raw)), "http " .. status)
    end
    sb.expires_ms = self.now_ms() + secs * 1000
    return sb
  end
  local id = (sb and sb.id) or recalled(self)
  local notice
  if id then
    local secs = whole_seconds_up(math.max(need_ms, t.sandbox_timeout_ms))
    local status, raw = api_call(self, snap, "POST", "/sandboxes/" .. id .. "/connect", { timeout = secs }, signal)
    if status == nil then return nil, raw end
    if status == 200 or status == 201 then
      local got = adopt(self, snap, decode_object(raw), id)
      if got and got.token then
        got.expires_ms = self.now_ms() + secs * 1000
        return got
      end
      return infra(("E2B API POST /sandboxes/{id}/connect answered without an access token (%s)"):format(quote(raw)))
    end
    if status ~= 404 then
      return infra(http_message("E2B API", "POST /sandboxes/{id}/connect", status, detail_of(raw)), "http " .. status)
    end
    if sb and not sb.expired then
      forget(self)
      return infra(gone_message(id, "POST /sandboxes/{id}/connect", detail_of(raw)))
    end
    -- A sandbox past its timeout, or remembered from an earlier process, reclaimed meanwhile:
    -- the thread goes on in a fresh one, and the result says so.
    forget(self)
    notice = ("[the thread's previous E2B sandbox %s was reclaimed after its idle timeout; "
      .. "this command runs in a fresh one and earlier files are gone]"):format(id)
  end
  local created, err = create(self, snap, wait_for, signal)
  if not created then return nil, err end
  return created, notice
end

---------------------------------------------------------------------------------------------
-- envd

local function envd_base(self, sb)
  if self.ends.sandbox_url then return self.ends.sandbox_url end
  if self.ends.debug then return "http://localhost:" .. M.ENVD_PORT end
  return ("https://%d-%s.%s"):format(M.ENVD_PORT, sb.id, sb.domain)
end

local function envd_headers(sb, extra)
  local h = {
    ["x-access-token"] = sb.token,
    ["e2b-sandbox-id"] = sb.id,
    ["e2b-sandbox-port"] = tostring(M.ENVD_PORT),
  }
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

-- An envd answer that says the sandbox is not there (E2B's proxy answers 502 "The sandbox was
-- not found"; a 404 on the process API means the same).
local function sandbox_gone(status, raw, route_is_files)
  if status == 502 or status == 410 then
    local text = tostring(raw or ""):lower()
    return text:find("not found", 1, true) ~= nil or status == 410
  end
  return status == 404 and not route_is_files
end

local function envd_failure(self, sb, route, status, raw, route_is_files)
  if sandbox_gone(status, raw, route_is_files) then
    forget(self)
    return infra(gone_message(sb.id, route, ("HTTP %d: %s"):format(status, detail_of(raw))))
  end
  if status == 401 or status == 403 then
    self.sandbox = { id = sb.id } -- reconnect (a fresh token) before the next call
    return infra(token_refused_message(sb.id, route, status, detail_of(raw)), "http " .. status)
  end
  return infra(http_message("E2B envd", route, status, detail_of(raw)), "http " .. status)
end

local function envelope(doc) return connect.encode(0, json.encode(doc)) end

local function status_exit(status)
  local SIGNALS = { hangup = 1, interrupt = 2, quit = 3, aborted = 6, killed = 9,
                    ["segmentation fault"] = 11, ["broken pipe"] = 13, terminated = 15 }
  local name = type(status) == "string" and status:match("^signal: (.+)$")
  local n = name and SIGNALS[name]
  return n and (128 + n) or nil
end

-- One process call's stream: the events collected while the bytes arrive (on_chunk may not
-- yield, so it only records; the caller judges once the request returned).
local function stream_reader(snap, cut)
  local st = {
    decoder = connect.decoder{ max_message = snap.timeouts.e2b.max_stream_bytes },
    stdout = {}, stderr = {}, out_len = { stdout = 0, stderr = 0 },
    truncated = { stdout = false, stderr = false },
    keepalives = 0, frames = 0, pid = nil, ended = nil, trailer = nil, broken = nil,
  }
  local cap = snap.timeouts.process.max_output_bytes
  -- A broken stream is dropped at once — once it has shown itself to be one: the bytes of a
  -- non-200 answer (a JSON error) reach on_chunk too, and the status decides those.
  local function broken(why)
    st.broken = st.broken or why
    if st.frames > 0 then cut:abort("protocol") end
  end
  local function add(stream, b64)
    if type(b64) ~= "string" then return broken("a data event whose " .. stream .. " is not a string") end
    local bytes = core.crypto.base64_decode(b64)
    if bytes == nil then return broken("a data event whose " .. stream .. " is not base64") end
    local room = cap - st.out_len[stream]
    if #bytes > room then
      st.truncated[stream] = true
      bytes = bytes:sub(1, math.max(0, room))
    end
    if bytes ~= "" then
      local list = st[stream]
      list[#list + 1] = bytes
      st.out_len[stream] = st.out_len[stream] + #bytes
    end
  end
  local function message(data)
    local ok, doc = pcall(json.decode, data)
    if not ok or type(doc) ~= "table" then return broken("a message that is not a JSON object") end
    local ev = doc.event
    if type(ev) ~= "table" then return broken("a message without an event") end
    if type(ev.start) == "table" then
      local pid = int(ev.start.pid)
      if pid == nil or pid <= 0 then return broken("a start event without a pid") end
      st.pid = pid
    elseif type(ev.data) == "table" then
      if ev.data.stdout ~= nil then add("stdout", ev.data.stdout) end
      if ev.data.stderr ~= nil then add("stderr", ev.data.stderr) end
    elseif type(ev["end"]) == "table" then
      st.ended = ev["end"]
    elseif ev.keepalive ~= nil then
      st.keepalives = st.keepalives + 1
    end -- an event kind we do not know (a newer envd) is skipped
  end
  function st.on_chunk(bytes)
    if st.broken then return end
    local frames, err = st.decoder:feed(bytes)
    if not frames then return broken(err) end
    for _, f in ipairs(frames) do
      st.frames = st.frames + 1
      if f.end_stream then
        local ok, doc = pcall(json.decode, f.data)
        if not ok or type(doc) ~= "table" then return broken("an end-of-stream frame that is not a JSON object") end
        st.trailer = doc
      else
        message(f.data)
        if st.broken then return end
      end
    end
  end
  return st
end

M.stream_reader = stream_reader -- for tests/fuzz/fuzz_connect.c

-- Start a process and read its stream to the end. call: argv (args of /bin/bash), envs,
-- connect_timeout_ms, deadline_ms, signal, route_note (for messages).
-- Returns st (the stream's record), status, err: status is the HTTP status or nil with err
-- {kind} from the transport; st.stopped / st.broken say how it ended.
local function run_process(self, snap, sb, call)
  local cut = call.signal and core.signal(call.signal) or core.signal()
  local st = stream_reader(snap, cut)
  local body = envelope{
    process = { cmd = "/bin/bash", args = call.args, envs = call.envs or {}, cwd = self.workdir },
    stdin = false,
  }
  local status, headers, raw = self.request{
    method = "POST", url = envd_base(self, sb) .. "/process.Process/Start",
    headers = envd_headers(sb, {
      ["content-type"] = "application/connect+json",
      ["connect-protocol-version"] = "1",
      ["connect-timeout-ms"] = tostring(math.tointeger(call.connect_timeout_ms)),
      ["keepalive-ping-interval"] = tostring(whole_seconds_up(snap.timeouts.e2b.keepalive_ping_ms)),
    }),
    body = body, deadline_ms = call.deadline_ms, signal = cut, on_chunk = st.on_chunk,
    max_body = snap.timeouts.e2b.max_stream_bytes,
  }
  if status == nil then st.err = headers or {} end
  st.raw = raw
  return st, status
end

-- Stop a command whose outcome we will not read (a hard stop, a stream that broke off): TERM
-- to its wrapper, which KILLs the command's process group. st: the command's stream record;
-- nothing is done once its process is known to have ended (its pid could by then be anyone's).
local function stop_command(self, snap, sb, st, by_mark)
  local pid = st.pid
  if not (sb and sb.token) or st.ended then return false end
  local stop_ms = snap.timeouts.e2b.stop_timeout_ms
  if not pid then
    -- a hard stop before the start event was read (it can come first on a loaded machine):
    -- by the command's mark. (A stream that broke off before the start is not chased: the
    -- sandbox is likely gone, and a process call would only add its wait.)
    if not (by_mark and st.mark) then return false end
    local k, kstatus = run_process(self, snap, sb, {
      args = { "-c", M.STOP_MARKED, "switchboard-stop", st.mark },
      connect_timeout_ms = stop_ms, deadline_ms = stop_ms,
    })
    return kstatus == 200 and k.ended ~= nil
  end
  local status = self.request{
    method = "POST", url = envd_base(self, sb) .. "/process.Process/SendSignal",
    headers = envd_headers(sb, { ["content-type"] = "application/json", ["connect-protocol-version"] = "1" }),
    body = json.encode{ process = { pid = pid }, signal = "SIGNAL_SIGTERM" }, deadline_ms = stop_ms,
  }
  if status == 200 then return true end
  local k, kstatus = run_process(self, snap, sb, {
    args = { "-c", M.STOP, "switchboard-stop", tostring(pid) },
    connect_timeout_ms = stop_ms, deadline_ms = stop_ms,
  })
  return kstatus == 200 and k.ended ~= nil
end

local function stop_reason(signal)
  local r = signal and signal.reason
  if type(r) == "string" and r ~= "" then return r end
  return "hard stop"
end

local function envs_of(self)
  local ok, envs, err = pcall(self.resolve_envs)
  if not ok then return nil, envs end
  if envs == nil then return nil, err end
  return envs
end

local function env_failure(err)
  local code = type(err) == "table" and errors.valid_code(err.code) and err.code or nil
  return errors.infra("credentials for this command could not be resolved: " .. first_line(tostring(err or "no reason given")), code)
end

local function join_lines(a, b)
  if a and b then return a .. "\n" .. b end
  return a or b
end

local ROUTE = "/process.Process/Start"

-- Judge a finished command stream. Returns the render fields or nil, err.
local function judge(self, snap, sb, st, status, limit_ms, elapsed_ms, budget_ms)
  if status ~= nil and status ~= 200 then return envd_failure(self, sb, ROUTE, status, st.raw, false) end
  if st.broken then
    stop_command(self, snap, sb, st)
    return infra(("E2B envd %s sent a stream this client cannot read (%s) — the sandbox's daemon "
      .. "may be incompatible or the stream corrupted"):format(ROUTE, st.broken))
  end
  if status == nil then
    local err = st.err
    if err.kind == "timeout" then
      stop_command(self, snap, sb, st)
      return infra(budget.no_answer_message(snap, "E2B envd", ROUTE, budget_ms), "timeout")
    end
    stop_command(self, snap, sb, st)
    if tostring(err.message or ""):find("over max_body", 1, true) then
      return infra(("E2B envd %s stream passed e2b.max_stream_bytes (%d bytes; output travels as "
        .. "base64) — the command was killed; send less output (redirect to a file, pipe "
        .. "through head)"):format(ROUTE, snap.timeouts.e2b.max_stream_bytes))
    end
    local when = st.pid and ("after the command started (pid " .. st.pid .. ")") or "before the command started"
    return infra(("E2B envd %s stream broke off %s (%s) — the sandbox may be gone; the command may "
      .. "still be running in it"):format(ROUTE, when, first_line(err.message or err.kind)))
  end
  if status ~= 200 then return envd_failure(self, sb, ROUTE, status, st.raw, false) end
  if st.decoder:partial() > 0 or not st.trailer then
    stop_command(self, snap, sb, st)
    local what = st.decoder:partial() > 0 and "in the middle of a frame" or "without its end-of-stream frame"
    return infra(("E2B envd %s stream ended %s%s — the sandbox may be gone; the command may still be "
      .. "running in it"):format(ROUTE, what, st.pid and (" (pid " .. st.pid .. ")") or ""))
  end
  local trailer_err = st.trailer.error
  if type(trailer_err) == "table" then
    local code = tostring(trailer_err.code or "unknown")
    local text = quote(first_line(trailer_err.message or ""))
    if code == "deadline_exceeded" then
      stop_command(self, snap, sb, st) -- envd's kill reached the wrapper only
      return { exit_code = 124, timed_out = true }
    end
    if code == "not_found" and not st.pid then
      forget(self)
      return infra(gone_message(sb.id, ROUTE, "not_found: " .. text))
    end
    if code == "unauthenticated" then
      self.sandbox = { id = sb.id }
      return infra(token_refused_message(sb.id, ROUTE, 401, text), "http 401")
    end
    stop_command(self, snap, sb, st)
    return infra(("E2B envd %s ended the stream with an error (%s: %s)"):format(ROUTE, code, text ~= "" and text or "no message"))
  end
  local e = st.ended
  if not e then
    return infra(("E2B envd %s stream finished without the process's end event — the command's "
      .. "outcome is unknown"):format(ROUTE))
  end
  local code = e.exitCode
  if code == nil or code == cjson.null then code = 0 end
  code = int(code)
  if code == nil then
    return infra(("E2B envd %s end event has a non-integer exitCode"):format(ROUTE))
  end
  if e.exited == false or code < 0 then
    local by_signal = status_exit(e.status)
    if by_signal then
      code = by_signal
    elseif type(e.error) == "string" and e.error:find("%S") then
      return infra(("E2B envd could not run the command: %s"):format(quote(first_line(e.error))))
    end
  end
  -- timeout answers 124, or dies of its own KILL after the grace (137) with the group
  local timed_out = elapsed_ms >= limit_ms and (code == 124 or code == 137)
  return { exit_code = timed_out and 124 or code, timed_out = timed_out }
end

function M:exec(command, opts)
  opts = opts or {}
  if type(command) ~= "string" or command == "" then
    return nil, errors.tool("bash needs a command to run")
  end
  local snap = opts.snap or self.policy()
  local t = snap.timeouts
  local plan, refusal = budget.within_run(snap, opts.timeout_ms, opts.remaining_ms)
  if not plan then return nil, refusal end
  local limit_ms = plan.timeout_ms or budget.clamp(snap, nil)
  local envs, env_err = envs_of(self)
  if not envs then return nil, env_failure(env_err) end

  local stopped = function()
    return render.result(snap, { aborted = true, abort_reason = stop_reason(opts.signal),
      stdout = "", stderr = "", clip_line = plan.clip_line })
  end
  local sb, notice = ensure(self, snap, limit_ms + t.call.margin_ms, limit_ms, opts.signal)
  if not sb then
    if notice == "stopped" then return stopped() end
    return nil, notice
  end

  local grace_ms = t.bash.kill_grace_ms
  local t0 = self.now_ms()
  local mark = core.crypto.hex(core.crypto.random_bytes(8))
  local st, status = run_process(self, snap, sb, {
    args = { "-c", M.WRAPPER, "switchboard", ("%.3f"):format(grace_ms / 1000), ("%.3f"):format(limit_ms / 1000),
      command, mark },
    envs = envs,
    connect_timeout_ms = limit_ms + grace_ms + t.e2b.connect_grace_ms,
    deadline_ms = budget.send_deadline(snap, limit_ms),
    signal = opts.signal,
  })
  local elapsed = self.now_ms() - t0
  st.mark = mark
  if opts.signal and opts.signal.aborted and not st.ended then
    stop_command(self, snap, sb, st, true)
    return render.result(snap, {
      aborted = true, abort_reason = stop_reason(opts.signal),
      stdout = table.concat(st.stdout), stderr = table.concat(st.stderr),
      truncated = st.truncated, duration_ms = elapsed, clip_line = join_lines(notice, plan.clip_line),
    })
  end
  local verdict, err = judge(self, snap, sb, st, status, limit_ms, elapsed, budget.clamp(snap, limit_ms))
  if not verdict then return nil, err end
  return render.result(snap, {
    exit_code = verdict.exit_code,
    stdout = table.concat(st.stdout), stderr = table.concat(st.stderr),
    truncated = st.truncated, duration_ms = elapsed,
    timed_out = verdict.timed_out, limit_ms = limit_ms, where = M.WHERE,
    clip_line = join_lines(notice, plan.clip_line),
  })
end

---------------------------------------------------------------------------------------------
-- Files: paths are relative to the workdir; climbing out of it is refused here, since envd
-- would follow any path inside the VM (the VM is the wall; symlinks inside it are not checked).

local function confine(self, path)
  if type(path) ~= "string" or path == "" then return nil, "a path is required" end
  if path:find("\0", 1, true) then return nil, "a path must not contain NUL" end
  if path:sub(1, 1) == "/" then return nil, "escape" end
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then return nil, "escape" end
      parts[#parts] = nil
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  if #parts == 0 then return nil, "not_a_file" end
  return (self.workdir == "/" and "" or self.workdir) .. "/" .. table.concat(parts, "/")
end

local FS_ERRORS = {
  escape = "%s is outside the workspace (absolute paths and `..` that climbs out are refused); "
    .. "use a path relative to the workspace",
  not_found = "%s does not exist in the workspace",
  not_a_file = "%s is not a regular file",
  too_large = "%s is too large to read whole; read part of it with bash (head, sed -n)",
}

local function fs_error(path, kind, detail)
  local tpl = FS_ERRORS[kind]
  if tpl then return errors.tool(tpl:format(path)) end
  return errors.tool(("%s: %s"):format(path, detail or kind))
end

local function urlencode(s)
  return (s:gsub("[^%w%-%._~/]", function(c) return ("%%%02X"):format(c:byte()) end))
end

local function file_call(self, path, method, body, opts)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  local abs, why = confine(self, path)
  if not abs then return nil, fs_error(path, why, why) end
  local sb, err = ensure(self, snap, snap.timeouts.file_op.budget_ms, snap.timeouts.file_op.budget_ms, opts.signal)
  if not sb then
    if err == "stopped" then return nil, errors.tool("file operation stopped: " .. stop_reason(opts.signal)) end
    return nil, err
  end
  local route = method .. " /files"
  local max = snap.timeouts.sandbox.max_file_bytes
  local status, headers, raw = self.request{
    method = method, url = envd_base(self, sb) .. "/files?path=" .. urlencode(abs),
    headers = envd_headers(sb, method == "POST" and { ["content-type"] = "application/octet-stream" } or nil),
    body = body, deadline_ms = budget.file_op_deadline(snap), signal = opts.signal, max_body = max + 1,
  }
  if status == nil then
    local e = headers or {}
    if e.kind == "aborted" then return nil, errors.tool("file operation stopped: " .. stop_reason(opts.signal)) end
    if e.kind == "timeout" then
      return nil, errors.infra(budget.no_answer_message(snap, "E2B envd", route, snap.timeouts.file_op.budget_ms), "timeout")
    end
    if method == "GET" and tostring(e.message or ""):find("over max_body", 1, true) then
      return nil, fs_error(path, "too_large")
    end
    return nil, errors.infra(transport_message("E2B envd", route, first_line(e.message or e.kind)))
  end
  if status == 200 then return raw end
  if status == 404 and not sandbox_gone(status, raw, true) then return nil, fs_error(path, "not_found") end
  if status == 400 then return nil, fs_error(path, "invalid", detail_of(raw)) end
  local _, failure = envd_failure(self, sb, route, status, raw, true)
  return nil, failure
end

function M:read_file(path, opts)
  local bytes, err = file_call(self, path, "GET", nil, opts)
  if bytes == nil then return nil, err end
  local snap = opts and opts.snap or self.policy()
  if #bytes > snap.timeouts.sandbox.max_file_bytes then return nil, fs_error(path, "too_large") end
  return bytes
end

function M:write_file(path, bytes, opts)
  if type(bytes) ~= "string" then return nil, errors.tool("write_file needs the bytes to write") end
  local ok, err = file_call(self, path, "POST", bytes, opts)
  if ok == nil then return nil, err end
  return true
end

-- "always" (a hard stop, a read-only run): delete the sandbox — the only way to end what still
-- runs in it. "if-clean": keep it for the thread's follow-ups; E2B's timeout reclaims it.
function M:release(mode)
  if mode ~= "always" then return true end
  local id = (self.sandbox and self.sandbox.id) or recalled(self)
  forget(self)
  if not id then return true end
  local snap = self.policy()
  local ok, status = pcall(api_call, self, snap, "DELETE", "/sandboxes/" .. id, nil, nil)
  if not ok then return nil, errors.infra("E2B API DELETE /sandboxes/{id} raised: " .. first_line(status)) end
  if status == nil or (status ~= 204 and status ~= 200 and status ~= 404) then
    return nil, errors.infra(("E2B sandbox %s could not be deleted (%s); E2B's timeout reclaims it")
      :format(id, status and ("HTTP " .. status) or "no answer"))
  end
  return true
end

-- The sandbox id in use (nil before the first command): for notes and tests.
function M:sandbox_id()
  return self.sandbox and self.sandbox.id or recalled(self)
end

return M
