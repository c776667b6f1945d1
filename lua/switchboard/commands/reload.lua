-- `switchboard reload [--pid-file FILE]`: send SIGHUP to the one switchboard process whose id
-- FILE holds (written by `switchboard --pid-file FILE sandboxd|console|…`), after checking
-- that the id still belongs to a switchboard process. What the reload changed is in that
-- process's log (policy.reloaded, policy.changed, policy.restart_required).
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local run = require("switchboard.shell.run")

-- kill(1) returns at once; a bound only (reload reads no policy: it runs where the process it
-- signals may have policies this one cannot load)
local KILL_MS = 10000

local M = {
  name = "reload",
  summary = "reload a running process's policies (SIGHUP through its --pid-file)",
  help = [[
Usage: switchboard reload [--pid-file FILE]

Sends SIGHUP to the switchboard process whose id FILE holds (default: $SWITCHBOARD_PID_FILE).
Start the process with the global --pid-file FILE to have it write the file:

  switchboard --pid-file /run/switchboard/sandboxd.pid sandboxd --listen 127.0.0.1:8080
  switchboard policy check /etc/switchboard && \
    switchboard reload --pid-file /run/switchboard/sandboxd.pid

The process validates the whole set on the side and swaps it in one step, or keeps what it
had; its log says which: `policy.reloaded old_version=… version=… changed=N`, one
`policy.changed change="bash.max_ms 1200000 → 1800000"` per key and a warning
`policy.restart_required` for each key only a restart applies. A failed reload logs
`policy.reload_failed` and every problem with its file:line.

Exit status: 0 the signal was sent; 1 no such process, or the id is not a switchboard
process (a stale file); 2 usage (no pid file given, unreadable or malformed).
]],
}

local function read_pid(path)
  local f, err = io.open(path, "r")
  if not f then return nil, core.error("usage", ("cannot read the pid file %s: %s"):format(path, tostring(err))) end
  local text = f:read("a") or ""
  f:close()
  local pid = tonumber(text:match("^%s*(%d+)%s*$"))
  if not pid or pid < 2 then
    return nil, core.error("usage", ("%s does not hold a process id (got %q)"):format(path, text:sub(1, 40)))
  end
  return math.tointeger(pid)
end

-- Is pid a running switchboard? Its /proc/PID/cmdline's first word ends in "switchboard".
local function is_switchboard(pid)
  local f = io.open(("/proc/%d/cmdline"):format(pid), "rb")
  if not f then return false, "no such process" end
  local cmdline = f:read("a") or ""
  f:close()
  local argv0 = cmdline:match("^([^%z]*)") or ""
  if argv0:match("switchboard$") then return true end
  return false, ("it is %q, not switchboard (a stale pid file?)"):format(argv0)
end

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = { ["pid-file"] = "string" }, usage = function(p)
    if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
    local file = p.opts.pid_file or p.ctx.pid_file or os.getenv("SWITCHBOARD_PID_FILE")
    if file == nil or file == "" then
      return "which process? give --pid-file FILE (or $SWITCHBOARD_PID_FILE), the file the "
        .. "process was started with (`switchboard --pid-file FILE sandboxd …`)"
    end
  end })
  if not p then return status end
  local file = p.opts.pid_file or p.ctx.pid_file or os.getenv("SWITCHBOARD_PID_FILE")
  local pid, err = read_pid(file)
  if not pid then return p:fail(prologue.EXIT.usage, err) end
  local ok, why = is_switchboard(pid)
  if not ok then return p:fail(1, ("process %d from %s: %s"):format(pid, file, why)) end
  local r = assert(run.tool{ argv = { "kill", "-HUP", tostring(pid) }, deadline_ms = KILL_MS })
  if r.exit ~= 0 then
    return p:fail(1, ("kill -HUP %d: %s"):format(pid, (r.stderr or ""):gsub("%s+$", "")))
  end
  p:say(("sent SIGHUP to switchboard process %d (from %s); its log says what changed"):format(pid, file))
  return 0
end

return M
