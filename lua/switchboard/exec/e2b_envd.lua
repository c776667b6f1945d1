-- The e2b executor's side of the sandbox's daemon (envd, X-Access-Token; docs/e2b.md): a
-- command run as a Connect RPC process.Process/Start stream (exec/connect.lua decodes the
-- envelopes) behind the wrapper below, its stop, the judgement of its stream, and /files.
--
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
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local connect = require("switchboard.exec.connect")
local errors = require("switchboard.exec.errors")
local api = require("switchboard.exec.e2b_api")

local M = {}

M.ENVD_PORT = 49983
M.ROUTE = "/process.Process/Start"

-- The wrapper every command runs in: `bash -c WRAPPER switchboard GRACE LIMIT COMMAND`.
--   fd 3 keeps the real stderr for the command; the wrapper's own stderr (job-control notices,
--   a kill of an empty group) goes nowhere. set -m gives the job a process group of its own
--   (its id is the job's pid, $t); timeout makes the limit reach that group; TERM to the
--   wrapper (a stop) KILLs the group; a normal end KILLs what the command left in it.
--   The trap names the group by $!, not $t: bash sets $! as soon as the job is forked, while a
--   wrapper descheduled on a loaded machine may take a TERM between the fork and `t=$!` — with
--   $t empty the kill went nowhere and a background child outlived the stop.
--   $4 is the command's mark (random hex): the wrapper keeps its pid in $TMPDIR/.switchboard-MARK.pid
--   ($TMPDIR: the sandbox's own, /tmp when unset, as in E2B's VMs; a stand-in on the host gives
--   each sandbox a directory of its own) while it runs, and does not start the command when
--   $TMPDIR/.switchboard-MARK.stop exists — so a stop that comes before envd's start event has
--   named the pid still reaches it (M.STOP_MARKED):
--   the stopper writes .stop, then TERMs the pid in .pid; the wrapper writes .pid (its trap set),
--   then looks for .stop. One of the two always sees the other's file.
M.WRAPPER = table.concat({
  'exec 3>&2 2>/dev/null',
  'm=${TMPDIR:-/tmp}/.switchboard-$4',
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
  'm=${TMPDIR:-/tmp}/.switchboard-$1',
  ': > "$m.stop"',
  'p=$(cat "$m.pid" 2>/dev/null) && [ -n "$p" ] && kill -TERM -- "$p"',
  'exit 0',
}, "\n")

local json = core.json

local first_line, quote, whole_seconds_up = api.first_line, api.quote, api.whole_seconds_up
local detail_of, infra, forget = api.detail_of, api.infra, api.forget
-- lua-cjson decodes every number as a float: a whole one back to an integer, else nil.
local function int(v) return type(v) == "number" and math.tointeger(v) or nil end

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
    return infra(api.gone_message(sb.id, route, ("HTTP %d: %s"):format(status, detail_of(raw))))
  end
  if status == 401 or status == 403 then
    self.sandbox = { id = sb.id } -- reconnect (a fresh token) before the next call
    return infra(api.token_refused_message(sb.id, route, status, detail_of(raw)), "http " .. status)
  end
  return infra(api.http_message("E2B envd", route, status, detail_of(raw)), "http " .. status)
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
    local doc = json.decode(data)
    if type(doc) ~= "table" then return broken("a message that is not a JSON object") end
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
        local doc = json.decode(f.data)
        if type(doc) ~= "table" then return broken("an end-of-stream frame that is not a JSON object") end
        st.trailer = doc
      else
        message(f.data)
        if st.broken then return end
      end
    end
  end
  return st
end


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

M.stream_reader = stream_reader -- for tests/fuzz/fuzz_connect.c
M.run_process = run_process
M.stop_command = stop_command

local ROUTE = M.ROUTE

-- Judge a finished command stream. Returns the render fields or nil, err.
function M.judge(self, snap, sb, st, status, limit_ms, elapsed_ms, budget_ms)
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
      return infra(api.gone_message(sb.id, ROUTE, "not_found: " .. text))
    end
    if code == "unauthenticated" then
      self.sandbox = { id = sb.id }
      return infra(api.token_refused_message(sb.id, ROUTE, 401, text), "http 401")
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
  if code == nil or code == json.null then code = 0 end
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

local function urlencode(s)
  return (s:gsub("[^%w%-%._~/]", function(c) return ("%%%02X"):format(c:byte()) end))
end

-- GET or POST /files?path=ABS (abs: confined by the executor). Returns the raw body of a 200,
-- or nil, err: kind "not_found" | "invalid" | "too_large" (the path's, the model's to read;
-- "invalid" carries envd's words as its message) | "aborted" (api.is_stopped) | an infra error.
function M.files(self, snap, sb, method, abs, body, signal)
  local route = method .. " /files"
  local max = snap.timeouts.sandbox.max_file_bytes
  local status, headers, raw = self.request{
    method = method, url = envd_base(self, sb) .. "/files?path=" .. urlencode(abs),
    headers = envd_headers(sb, method == "POST" and { ["content-type"] = "application/octet-stream" } or nil),
    body = body, deadline_ms = budget.file_op_deadline(snap), signal = signal, max_body = max + 1,
  }
  if status == nil then
    local e = headers or {}
    if e.kind == "aborted" then return nil, api.stopped() end
    if e.kind == "timeout" then
      return nil, errors.infra(budget.no_answer_message(snap, "E2B envd", route, snap.timeouts.file_op.budget_ms), "timeout")
    end
    if method == "GET" and tostring(e.message or ""):find("over max_body", 1, true) then
      return nil, core.error("too_large", "over max_file_bytes")
    end
    return nil, errors.infra(api.transport_message("E2B envd", route, first_line(e.message or e.kind)))
  end
  if status == 200 then return raw end
  if status == 404 and not sandbox_gone(status, raw, true) then return nil, core.error("not_found", "no such file") end
  if status == 400 then return nil, core.error("invalid", detail_of(raw)) end
  local _, failure = envd_failure(self, sb, route, status, raw, true)
  return nil, failure
end

return M
