-- The background-process tools (docs/agent.md "Background processes"): `bash` with
-- run_in_background starts a command that is not awaited (M.start), `process_logs {id, tail?}`
-- reads the tails of its output, `process_kill {id}` ends its process group, and
-- `expose_port {port}` makes a port it listens on reachable from outside through a preview URL
-- (sandboxd's /processes and /ports, docs/sandboxd.md; the executor's start_process, processes,
-- process_logs, kill_process, expose_port). They are offered only where the thread's executor
-- has them (requires = "processes": sandboxd, Kubernetes), never on the local or E2B backends.
--
-- A preview URL is handed to ctx.on_preview (the card's Preview button) and remembered for the
-- thread's executor, so that a screenshot of it (agent/screenshot.lua) is taken from inside
-- the sandbox at the port itself: the URL's host is sandboxd's, which the walls do not reach.
--
--   processes.start(ex, snap, command, ctx) → outcome | nil, executor error
--   processes.inside_url(ex, url) → the same page as the instance reaches it, or nil
local core = require("switchboard.core")
local text = require("switchboard.agent.text")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

-- executor → {[preview URL] = port}; weak: a thread's executor that goes takes its URLs along
local previews = setmetatable({}, { __mode = "k" })

local function opts_of(snap, ctx)
  return { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap }
end

local function result(content) return { kind = "result", content = content, is_error = false } end
local function input_error(content) return { kind = "input", content = content, is_error = true } end

-- The record of process id among the thread's processes (nil when it is not listed).
local function record_of(ex, snap, ctx, id)
  local list = ex:processes(opts_of(snap, ctx))
  for _, p in ipairs(list or {}) do
    if p.id == id then return p end
  end
end

local function state_line(p)
  if not p then return "(not listed)" end
  if p.status == "running" then return "running" end
  if p.status == "exited" then return ("exited with code %s"):format(tostring(p.exitCode)) end
  return "killed" .. (p.reason and (" (" .. tostring(p.reason) .. ")") or "")
end

-- The last n lines of s.
local function tail(s, n)
  s = text.valid(s or "")
  local lines = {}
  for line in s:gmatch("([^\n]*)\n?") do lines[#lines + 1] = line end
  if lines[#lines] == "" then lines[#lines] = nil end
  if #lines <= n then return table.concat(lines, "\n"), 0 end
  return table.concat(lines, "\n", #lines - n + 1), #lines - n
end

local function logs_text(logs, n)
  local out = {}
  for _, stream in ipairs({ "stdout", "stderr" }) do
    local body, cut = tail(logs[stream], n)
    if body ~= "" then
      out[#out + 1] = ("--- %s%s ---\n%s"):format(stream, cut > 0 and (" (the last %d lines)"):format(n) or "", body)
    end
  end
  return #out > 0 and table.concat(out, "\n") or "(no output yet)"
end

-- bash {command, run_in_background = true}: started, then looked at once after settle_ms.
function M.start(ex, snap, command, ctx, def)
  local can = def and def.can or { processes = ex ~= nil and type(ex.start_process) == "function" }
  if not can.processes then
    return input_error("run_in_background: this agent's sandbox has no background processes; run the command without it")
  end
  local p, err = ex:start_process(command, opts_of(snap, ctx))
  if not p then return nil, err end
  local settings = snap.agents.processes
  core.sleep(math.min(settings.settle_ms, math.max(0, (ctx.remaining_ms or settings.settle_ms) - 1000)), ctx.signal)
  local logs = ex:process_logs(p.id, opts_of(snap, ctx)) or {}
  local now = record_of(ex, snap, ctx, p.id)
  return result(("started background process %s (pid %s): %s\nafter %.1f s it is %s.\n%s\n"
    .. "Read its output with process_logs {\"id\": \"%s\"}; end it with process_kill.")
    :format(p.id, tostring(math.tointeger(p.pid) or p.pid), command:match("^%s*([^\n]*)"), settings.settle_ms / 1000, state_line(now),
      logs_text(logs, settings.tail_lines), p.id))
end

local function id_of(input)
  return type(input.id) == "string" and input.id ~= "" and input.id or nil
end

function M.logs(ex, snap, input, ctx)
  local id = id_of(input)
  if not id then return input_error("process_logs needs {\"id\": \"…\"}: the id bash's run_in_background gave") end
  local n = snap.agents.processes.tail_lines
  if input.tail ~= nil then
    n = math.tointeger(input.tail)
    if not n or n < 1 then return input_error("process_logs: tail is a whole number of lines, at least 1") end
  end
  local logs, err = ex:process_logs(id, opts_of(snap, ctx))
  if not logs then return nil, err end
  local p = record_of(ex, snap, ctx, id)
  return result(("process %s (%s): %s\n%s"):format(id, p and p.command and p.command:match("^%s*([^\n]*)") or "?",
    state_line(p), logs_text(logs, n)))
end

function M.kill(ex, snap, input, ctx)
  local id = id_of(input)
  if not id then return input_error("process_kill needs {\"id\": \"…\"}: the id bash's run_in_background gave") end
  local p, err = ex:kill_process(id, opts_of(snap, ctx))
  if not p then return nil, err end
  return result(("process %s is %s: its process group was ended"):format(id, state_line(p)))
end

function M.expose(ex, snap, input, ctx)
  local port = math.tointeger(input.port)
  if not port or port < 1 or port > 65535 then
    return input_error("expose_port needs {\"port\": N}, a port number from 1 to 65535 that a process of yours listens on")
  end
  local url, err = ex:expose_port(port, opts_of(snap, ctx))
  if not url then return nil, err end
  previews[ex] = previews[ex] or {}
  previews[ex][url] = port
  if ctx.on_preview then ctx.on_preview(url, port) end
  return result(("port %d is exposed at %s — the person who asked sees a Preview button with this URL. "
    .. "A screenshot of the URL is taken from inside the sandbox, at the port itself."):format(port, url))
end

-- A preview URL of this executor's as the instance reaches it: http://127.0.0.1:PORT/…
function M.inside_url(ex, url)
  for prefix, port in pairs(previews[ex] or {}) do
    local base = prefix:gsub("/$", "")
    if url == base or url:sub(1, #base + 1) == base .. "/" then
      return ("http://127.0.0.1:%d/%s"):format(port, url:sub(#base + 2))
    end
  end
end

local ID = { "id", "string", "The process id bash's run_in_background gave.", required = true }

local DEFS = {}

function DEFS.process_logs(snap)
  return tool_schema.tool("process_logs", "Show a background process's state (running, exited with its code, "
    .. "killed) and the last lines of its output (stdout and stderr).", {
    ID,
    { "tail", "integer", ("How many of the last lines of each stream (default %d)."):format(snap.agents.processes.tail_lines) },
  })
end

function DEFS.process_kill()
  return tool_schema.tool("process_kill", "End a background process: its whole process group is killed.", { ID })
end

function DEFS.expose_port()
  return tool_schema.tool("expose_port", "Make a port that a background process listens on (on 127.0.0.1 in the "
    .. "sandbox) reachable from outside: returns its preview URL, which the person who asked gets as a "
    .. "Preview button. Take a screenshot of the URL to see the page as they will.", {
    { "port", "integer", "The port, 1-65535.", required = true },
  })
end

M.TOOLS = {
  { name = "process_logs", reaches = { "processes" }, requires = "processes", read_only = true, policy = "agents.processes",
    help = "a background process's state and the tails of its output",
    definition = DEFS.process_logs, call = M.logs },
  { name = "process_kill", reaches = { "processes" }, requires = "processes",
    help = "end a background process's group", definition = DEFS.process_kill, call = M.kill },
  { name = "expose_port", reaches = { "processes", "publish" }, requires = "processes",
    help = "a preview URL for a port in the sandbox (the card's Preview button)",
    definition = DEFS.expose_port, call = M.expose },
}

return M
