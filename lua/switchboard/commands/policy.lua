-- `switchboard policy check|show [--diff] [DIR]`: validate a policy directory offline, like
-- `nginx -t`, and print the effective values with where each came from.
--
-- A directory other than the shipped one is an overlay: it holds only the files and settings
-- the operator changes; every file it lacks, and every setting its files leave alone, comes
-- from the shipped set.

local core = require("switchboard.core")
local loader = require("switchboard.policy.loader")
local policy = require("switchboard.policy")
local flat = require("switchboard.policy.flat")
local prologue = require("switchboard.launch.prologue")

local HELP = [[
usage: switchboard policy check [DIR]
       switchboard policy show [--diff] [DIR]

DIR (default: --policies / SWITCHBOARD_POLICIES, else the shipped set) holds only what you
change: a file there is run after the shipped file of the same name, so it may set just one
value (`bash.max_ms = 30 * minute` in timeouts.lua); a file it lacks is the shipped one.

check  loads DIR exactly as a reload would: runs each file in its sandboxed environment,
       checks types, ranges and cross-field rules, runs every classification rule's examples
       and calls every policy hook on sample input under its instruction budget. Nothing
       running is touched. Prints the problems as FILE:LINE: message (the real path of the
       file you edited) and exits 1, or prints the version a reload would log and exits 0.
show   prints every effective setting, `file  key = value  # where it was set`.
       --diff: only the settings DIR changes from the shipped set (shipped → yours).

examples:
  switchboard policy check                       # the policies in use
  switchboard policy check /etc/switchboard/policies
  switchboard policy show --diff /etc/switchboard/policies
  $EDITOR /etc/switchboard/policies/timeouts.lua && \
    switchboard policy check /etc/switchboard/policies && \
    systemctl reload switchboard-sandboxd switchboard-bot     # the package's services
  switchboard reload --pid-file /run/switchboard/sandboxd.pid  # a process started by hand

exit status: 0 valid, 1 invalid, 2 usage error (including a DIR that is missing or a file)]]

local M = {
  name = "policy",
  summary = "check or show the policies (switchboard policy check|show [--diff] [DIR])",
  help = HELP,
}

local function err_writer(p)
  return p.ctx.err or function(line) io.stderr:write(line, "\n") end
end

-- nil when dir is a directory, else the words saying what it is instead.
local function not_a_dir(dir)
  local f, oerr = io.open(dir, "r")
  if not f then
    if tostring(oerr):find("No such file", 1, true) then
      return ("%s does not exist: give the directory that holds your policy files"):format(dir)
    end
    return ("%s cannot be opened: %s"):format(dir, tostring(oerr))
  end
  local _, rerr, code = f:read(1)
  f:close()
  if code == 21 then return nil end -- EISDIR: a directory
  return ("%s is a file, not a directory: give the directory that holds it (%s)"):format(
    dir, dir:match("^(.*)/[^/]*$") or ".")
end

local function load(p, dir)
  local opts = {}
  for k, v in pairs(p.ctx.load or {}) do opts[k] = v end
  opts.base = opts.base or policy.shipped_dir()
  return loader.load(dir, opts)
end

-- Each problem on its own line, then what the command says of them (given the count, the
-- plural's "s" and the directory); the status of a refused set.
local function refuse(p, errs, dir, summary)
  local err = err_writer(p)
  for _, e in ipairs(errs) do err(e) end
  err(summary:format(#errs, #errs == 1 and "" or "s", dir))
  return 1
end

-- The overlay files a service could not read although its directory lets others in: a file
-- written with root's umask 077 (mode 0600) in /etc/switchboard/policies (0750,
-- root:switchboard) loads for root — `policy check` and `doctor` run as root — and fails the
-- services' reload, which read it as their own user (Permission denied). One problem line each.
function M.unreadable_overlays(dir)
  local ok, root = pcall(core.fs.root, dir)
  if not ok or not root then return {} end
  local problems = {}
  local top = root:stat(".")
  if top and top.mode & tonumber("055", 8) ~= 0 then
    for _, name in ipairs(root:list(".") or {}) do
      local st = name:match("%.lua$") and root:stat(name)
      if st and st.type == "file" and st.mode & tonumber("044", 8) == 0 then
        problems[#problems + 1] = ("%s/%s:1: readable by its owner only (mode %04o), while the directory "
          .. "lets the services in (mode %04o): they read overlays as their own user (switchboard-bot, "
          .. "switchboard-sandboxd), so their reload would fail with Permission denied — fix: chmod 0644 %s/%s")
          :format(dir, name, st.mode, top.mode, dir, name)
      end
    end
  end
  root:close()
  return problems
end

local function check(p, dir)
  local snap, errs = load(p, dir)
  local unreadable = M.unreadable_overlays(dir)
  if snap and #unreadable > 0 then snap, errs = nil, unreadable end
  if not snap then return refuse(p, errs, dir, "policy check failed: %d problem%s in %s") end
  local c = snap.checked
  p:say(string.format("policies in %s are valid: %d files, %d rules with %d examples, %d hook calls",
    dir, c.files, c.rules, c.examples, c.hook_calls))
  p:say("version " .. snap.version)
  return 0
end

local function show(p, dir)
  local snap, errs = load(p, dir)
  if not snap then
    return refuse(p, errs, dir, "policy show: %d problem%s in %s (see switchboard policy check)")
  end
  if p.opts.diff then
    local shipped = load(p, policy.shipped_dir())
    local changes = shipped and flat.changes(shipped, snap) or {}
    local where = {}
    for _, e in ipairs(flat.entries(snap)) do where[e.key] = e.where end
    p:say(("# %s over the shipped %s: %d setting%s changed"):format(dir, policy.shipped_dir(),
      #changes, #changes == 1 and "" or "s"))
    for _, c in ipairs(changes) do
      p:say(("%-10s %s  # %s"):format(c.file, flat.change_text(c), where[c.key] or "removed"))
    end
    return 0
  end
  p:say(("# effective policies of %s (version %s)"):format(dir, snap.version))
  for _, e in ipairs(flat.entries(snap)) do
    p:say(("%-10s %s = %s  # %s%s"):format(e.file, e.path, e.text, e.where or "derived",
      e.shipped and " (shipped)" or ""))
  end
  return 0
end

local SUB = { check = check, show = show }

local function usage_problem(p)
  local words = p.words
  if not SUB[words[1]] then
    return ("%s; usage: switchboard policy check|show [DIR] (see --help)"):format(
      words[1] and ("unknown subcommand %q"):format(words[1]) or "no subcommand given")
  end
  if #words > 2 then return ("unexpected %q: %s takes one DIR"):format(words[3], words[1]) end
  if p.opts.diff and words[1] ~= "show" then return "--diff goes with show: switchboard policy show --diff [DIR]" end
end

-- argv: the words after `policy`. ctx: {policies_dir = the global --policies or
-- $SWITCHBOARD_POLICIES} from the CLI; specs add out=fn(line), err=fn(line) and load=opts
-- for the loader. Unlike the other commands this one does not load the policies it starts
-- with: checking them is the job, and a broken set is its answer (exit 1), not a failure.
function M.run(argv, ctx)
  if argv and argv[1] == "help" then argv = { "--help" } end
  local p, status = prologue.start(M, argv, ctx,
    { spec = { policies = "string", diff = "flag" }, usage = usage_problem })
  if not p then return status end
  local dir = p.words[2] or p.opts.policies or p.ctx.policies_dir or policy.default_dir()
  local why = not_a_dir(dir)
  if why then return p:fail(prologue.EXIT.usage, why) end
  return SUB[p.words[1]](p, dir)
end

return M
