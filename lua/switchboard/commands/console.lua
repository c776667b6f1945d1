-- `switchboard console`: a terminal stand-in for Slack that drives the same dispatcher.
-- Lines come from standard input (a terminal or a pipe) through core.read_stdin, which yields
-- the task instead of blocking the loop; every line is a message of the current thread.
local core = require("switchboard.core")
local args = require("switchboard.args")
local policy = require("switchboard.policy")
local state = require("switchboard.state")
local tracing = require("switchboard.exec.tracing")
local dispatcher = require("switchboard.dispatch.dispatcher")
local console_front = require("switchboard.fronts.console")

local M = {
  name = "console",
  summary = "talk to the agents from a terminal or a pipe, the way Slack will (no setup needed)",
  quiet_logs = true,
}

M.EXIT = { usage = 2, config = 78 }

M.help = [[
Usage: switchboard console [OPTIONS]

Reads asks from standard input, one per line, as if they were messages in a Slack thread,
and answers each with a status card. Works with no configuration: commands run on this host
in a workspace per thread under the state directory.

  run `COMMAND`                          the default agent runs COMMAND
  agent:NAME run `COMMAND` [in OWNER/REPO]
  stop                                   stop this thread's running command
  help                                   the grammar and the agents
  /thread NAME                           switch to thread NAME (each has its own workspace)

On a terminal the running asks' elapsed time updates in place; from a pipe each final card is
printed, and the console exits once input ends and the last ask has finished. SIGHUP reloads
the policies; TERM/INT stop reading, let running asks finish (timeouts console.drain_ms),
then kill them and exit 0; a second TERM/INT kills at once.

Options:
  --backend NAME          override policy's backend: local, sandbox or e2b ($E2B_API_KEY;
                          E2B_API_URL, E2B_DOMAIN, E2B_SANDBOX_URL: docs/e2b.md)
  --sandbox-url URL       the sandboxd for --backend sandbox (token: $SANDBOX_TOKEN)
  --workspace-root DIR    where local workspaces live (default: $SWITCHBOARD_STATE_DIR/workspaces)
  --thread NAME           the thread to start in (default: main)
  --trace FILE            write exec.* spans as JSON lines to FILE (`-` for stderr)

Whole outputs of cards cut to the card limit are kept under $SWITCHBOARD_STATE_DIR/outputs
(the card names the file).

Examples:
  switchboard console
  printf 'run `echo hi > marker.txt`\nrun `cat marker.txt`\n' | switchboard console
  SANDBOX_TOKEN=… switchboard console --backend sandbox --sandbox-url http://127.0.0.1:8080
]]

local SPEC = {
  backend = "string", ["sandbox-url"] = "string", ["workspace-root"] = "string",
  thread = "string", trace = "string",
}

local THREAD_NAME = "^[%w._:@/-]+$"

local function fail(status, message)
  io.stderr:write("switchboard console: ", message, "\n")
  return status
end

-- Lines of standard input, handed to on_line as they complete; the last line may lack its
-- newline. Returns "eof" or "stopped" (stop fired).
local function read_lines(stop, on_line)
  local pending = ""
  while true do
    local chunk, err = core.read_stdin(stop)
    if chunk == nil then
      if err then return "stopped" end
      if pending ~= "" then on_line(pending) end
      return "eof"
    end
    pending = pending .. chunk
    while true do
      local nl = pending:find("\n", 1, true)
      if not nl then break end
      local line = pending:sub(1, nl - 1)
      pending = pending:sub(nl + 1)
      on_line(line)
    end
  end
end

-- --backend sandbox needs a sandboxd to talk to: say so at start, not at every ask.
function M.check_sandbox(snap, url, getenv)
  local cfg = snap.execution.sandbox
  url = url or getenv(cfg.url_env)
  if url == nil or url == "" then
    return false, ("--backend sandbox needs --sandbox-url URL (or $%s): the address of a running "
      .. "`switchboard sandboxd`"):format(cfg.url_env)
  end
  local token = getenv(cfg.token_env)
  if token == nil or token == "" then
    return false, ("--backend sandbox needs $%s, the bearer token the sandboxd was started with")
      :format(cfg.token_env)
  end
  local ok, err = pcall(require, "switchboard.exec.sandbox")
  if not ok then
    return false, "this build has no sandbox backend (lua/switchboard/exec/sandbox.lua): "
      .. tostring(err):match("^[^\n]*")
  end
  return true
end

function M.run(argv, ctx)
  local opts, words = args.command("console", argv, SPEC, M.help)
  if not opts then return words end
  if #words > 0 then
    return fail(M.EXIT.usage, ("unexpected %q (asks come from standard input; see --help)"):format(words[1]))
  end
  if opts.backend and opts.backend ~= "local" and opts.backend ~= "sandbox" and opts.backend ~= "e2b" then
    return fail(M.EXIT.usage, "--backend must be local, sandbox or e2b")
  end
  if opts.thread and not opts.thread:match(THREAD_NAME) then
    return fail(M.EXIT.usage, "--thread takes a name of letters, digits and . _ : @ / -")
  end
  local snap, errs = policy.load_initial(ctx.policies_dir)
  if not snap then
    return fail(M.EXIT.config, "the policies do not load:\n  " .. table.concat(errs, "\n  "))
  end
  if opts.backend == "sandbox" then
    local ok, why = M.check_sandbox(snap, opts.sandbox_url, os.getenv)
    if not ok then return fail(M.EXIT.config, why) end
  end
  local key_env = snap.execution.e2b.api_key_env
  if opts.backend == "e2b" and (os.getenv(key_env) or "") == "" then
    return fail(M.EXIT.config, ("--backend e2b needs $%s, an E2B API key (https://e2b.dev/dashboard?tab=keys)"):format(key_env))
  end
  local sink, sink_err = tracing.sink_for(opts.trace)
  if opts.trace and not sink then return fail(M.EXIT.usage, "--trace: " .. tostring(sink_err)) end

  local interactive = core.isatty(0)
  local front = console_front.new{ tty = core.isatty(1) }
  local d = dispatcher.new{
    front = front,
    policy = policy.current,
    stack = {
      workspace_root = opts.workspace_root or state.workspaces(),
      sandbox_url = opts.sandbox_url,
      credentials = ctx.credentials,
      force_backend = opts.backend,
      e2b_state_dir = state.dir(),
      sink = sink,
    },
    outputs_dir = state.dir() .. "/outputs",
    thread_key = function(thread) return "console:" .. thread end,
    help_extra = { { "/thread NAME", "switch to thread NAME (each thread has its own workspace)" } },
  }

  local thread = opts.thread or "main"
  local user = os.getenv("USER") or "console"

  core.on_signal("HUP", function()
    local new, reload_errs = policy.reload()
    if new then
      front:say(("policies reloaded (version %s); new asks use them"):format(new.version:sub(1, 12)))
    else
      front:say("policy reload failed, nothing changed:\n  " .. table.concat(reload_errs, "\n  "))
    end
  end)

  local reading = core.signal()
  local kill_now = core.signal()
  local draining = false
  local function on_stop_signal(name)
    if draining then
      kill_now:abort("second SIG" .. name)
      d:kill("stopped by a second SIG" .. name)
      return
    end
    draining = true
    reading:abort("SIG" .. name)
    local grace = policy.current().timeouts.console.drain_ms
    if not d:is_idle() then
      front:say(("SIG%s: not reading any more; running asks get %s to finish (again to kill them now)")
        :format(name, require("switchboard.dispatch.card").seconds_text(grace)))
    end
    d:drain(grace, kill_now)
  end
  core.on_signal("TERM", on_stop_signal)
  core.on_signal("INT", on_stop_signal)

  if interactive then
    front:say(("switchboard console — thread %s. Type `help` for the grammar, /thread NAME to "
      .. "switch threads, Ctrl-D to quit."):format(thread))
  end

  read_lines(reading, function(line)
    line = line:gsub("\r$", "")
    local trimmed = line:gsub("^%s+", ""):gsub("%s+$", "")
    if trimmed == "" then return end
    local cmd, rest = trimmed:match("^/(%a+)%s*(.-)$")
    if cmd == "thread" then
      if rest == "" then
        front:say("thread: " .. thread)
      elseif not rest:match(THREAD_NAME) then
        front:say(("%q is not a thread name: use letters, digits and . _ : @ / -"):format(rest))
      else
        thread = rest
        front:say("thread: " .. thread)
      end
      return
    end
    if cmd and cmd ~= "help" then
      front:say(("/%s is not a console command; there are /thread NAME and /help"):format(cmd))
      return
    end
    d:handle{ thread = thread, user = user, text = trimmed }
  end)

  d:wait_idle()
  front:close()
  if sink and sink.close then sink:close() end
  return 0
end

return M
