-- `switchboard console`: a terminal stand-in for Slack that drives the same dispatcher.
-- The console front (fronts/console.lua) reads standard input and speaks the cards; this
-- command wires it to the dispatcher after the shared prologue (launch/prologue.lua).
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local repo_secrets = require("switchboard.store.secrets")
local policy = require("switchboard.policy")
local flat = require("switchboard.policy.flat")
local state = require("switchboard.state")
local card = require("switchboard.dispatch.card")
local dispatcher = require("switchboard.dispatch.dispatcher")
local console_front = require("switchboard.fronts.console")
local host_mod = require("switchboard.launch.host")

local M = {
  name = "console",
  summary = "talk to the agents from a terminal or a pipe, the way Slack will (no setup needed)",
  quiet_logs = true,
}

M.EXIT = prologue.EXIT

M.help = [[
Usage: switchboard console [OPTIONS]

Reads asks from standard input, one per line, as if they were messages in a Slack thread,
and answers each with a status card. Works with no configuration: commands run on this host
in a workspace per thread under the state directory.

  run `COMMAND`                          the default agent runs COMMAND
  agent:NAME run `COMMAND` [in OWNER/REPO]
  [agent:NAME] ANYTHING ELSE             an agent run: the model works with its tools until
                                         done (needs $ANTHROPIC_API_KEY; a repository named
                                         as `in OWNER/REPO` or a GitHub URL is cloned first)
  stop                                   stop this thread's running command or agent run
  help                                   the grammar and the agents
  /thread NAME                           switch to thread NAME (each has its own workspace);
                                         a thread's conversation is kept in the state
                                         directory's record: started again, the console's
                                         threads continue where they stopped
  /new                                   start a fresh thread (a new name)

On a terminal the running asks' elapsed time updates in place, on a status line cut to the
window's width, above the line you type (Backspace, Ctrl-U, Ctrl-W; Enter sends it; Ctrl-D on
an empty line ends input); from a pipe each final card is printed, and the console exits once
input ends and the last ask has finished. SIGHUP reloads the policies; TERM/INT (Ctrl-C)
stop reading, let running asks finish (timeouts console.drain_ms), then kill them and exit 0;
a second TERM/INT kills at once.

Options:
  --backend NAME          override policy's backend, one of:
                            {backends}
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

local function usage_problem(p)
  if #p.words > 0 then
    return ("unexpected %q (asks come from standard input; see --help)"):format(p.words[1])
  end
  if p.opts.thread and not console_front.valid_thread(p.opts.thread) then
    return "--thread takes a name of " .. console_front.THREAD_RULE
  end
end

-- The console front for this process's standard streams. On a terminal the status line is cut
-- to its width (again at each SIGWINCH); when standard input is that terminal too, the front
-- owns the input line, with the terminal in raw mode (no echo: the front draws what is typed)
-- until the console ends — core.tty_mode's own hooks restore it on any other way out.
local function terminal_front()
  local tty = core.isatty(1)
  if not tty then return console_front.new{ tty = false } end
  local width = core.tty_size(1)
  local edit = core.isatty(0) and core.tty_mode("raw") or false
  local front = console_front.new{ tty = true, edit = edit, width = width }
  core.on_signal("WINCH", function() front:resize((core.tty_size(1))) end)
  return front
end

function M.run(argv, ctx)
  local p, status = prologue.start_with_backend(M, argv, ctx, SPEC, usage_problem)
  if not p then return status end
  local opts = p.opts
  local sink, trace_status = p:trace_sink()
  if opts.trace and not sink then return trace_status end

  -- the threads' record: a thread continues where it stopped when the console starts again
  -- with the same state directory (launch/host.lua, as the Slack bot's)
  return host_mod.serve(p, M.front{ p = p, sink = sink })
end

-- The console front as launch/host.lua hosts it: standard input's asks, the cards on
-- standard output (fronts/console.lua).
local Front = {}
Front.__index = Front

function M.front(w)
  local self = setmetatable(w, Front)
  self.reading = core.signal()
  self.thread = w.p.opts.thread or "main"
  return self
end

function Front:dispatcher(hosted)
  self.screen = terminal_front() -- once the record opened: a failure to open leaves the terminal as it was
  self.d = dispatcher.new(hosted:dispatcher_options{
    front = self.screen,
    policy = policy.current,
    -- a person's own terminal (policies/isolation.lua local_walls)
    stack = repo_secrets.with_source(self.p:stack_options(self.sink, "console"), state.dir()),
    thread_key = function(thread) return "console:" .. thread end,
    help_extra = console_front.HELP_EXTRA,
  })
  return self.d
end

function Front:reloaded(new, errs, changes, old_version)
  if new then
    local lines = { ("policies reloaded (version %s → %s); new asks use them"):format(
      (old_version or "none"):sub(1, 12), new.version:sub(1, 12)) }
    for _, c in ipairs(changes or {}) do
      lines[#lines + 1] = "  " .. c.file .. ": " .. flat.change_text(c)
        .. (c.restart and " (takes effect on restart)" or "")
    end
    self.screen:say(table.concat(lines, "\n"))
  else
    self.screen:say("policy reload failed, nothing changed:\n  " .. table.concat(errs, "\n  "))
  end
end

function Front:ready()
  if core.isatty(0) then
    self.screen:say(("switchboard console — thread %s. Type `help` for the grammar, /thread NAME to "
      .. "switch threads, /new for a fresh one, Ctrl-D to quit."):format(self.thread))
  end
  return "reading asks from standard input, thread " .. self.thread
end

-- TERM/INT: stop reading, let running asks finish for the drain time, then kill them.
function Front:drain(name, kill_now)
  self.reading:abort("SIG" .. name)
  local grace = policy.current().timeouts.console.drain_ms
  if not self.d:is_idle() then
    self.screen:say(("SIG%s: not reading any more; running asks get %s to finish (again to kill them now)")
      :format(name, card.seconds_text(grace)))
  end
  self.d:drain(grace, kill_now)
end

function Front:serve()
  self.screen:serve(self.d, { thread = self.thread, user = os.getenv("USER") or "console", stop = self.reading })
  self.d:wait_idle()
end

function Front:close()
  self.screen:close()
  if self.screen.edit then core.tty_mode("normal") end
  if self.sink and self.sink.close then self.sink:close() end
end

return M
