-- `switchboard policy check [DIR]`: validate a policy directory offline, like `nginx -t`.

local loader = require("switchboard.policy.loader")
local policy = require("switchboard.policy")
local prologue = require("switchboard.commands.prologue")

local HELP = [[
usage: switchboard policy check [DIR]

Loads every policy file in DIR (default: --policies / SWITCHBOARD_POLICIES, else the shipped
set) exactly as a reload would: runs each file in its sandboxed environment, checks types,
ranges and cross-field rules, runs every classification rule's examples and calls every
policy hook on sample input under its instruction budget. Nothing running is touched.

Prints the problems as FILE:LINE: message and exits 1, or prints the version a reload of
this directory would log and exits 0.

examples:
  switchboard policy check                       # the policies in use
  switchboard policy check /etc/switchboard/policies
  $EDITOR /etc/switchboard/policies/timeouts.lua && \
    switchboard policy check /etc/switchboard/policies && \
    kill -HUP "$(pidof switchboard)"

exit status: 0 valid, 1 invalid, 2 usage error]]

local M = {
  name = "policy",
  summary = "validate the policy files offline (switchboard policy check [DIR])",
  help = HELP,
}

local function check(p, dir)
  local snap, errs = loader.load(dir, p.ctx.load)
  if not snap then
    local err = p.ctx.err or function(line) io.stderr:write(line, "\n") end
    for _, e in ipairs(errs) do err(e) end
    err(string.format("policy check failed: %d problem%s in %s", #errs, #errs == 1 and "" or "s", dir))
    return 1
  end
  local c = snap.checked
  p:say(string.format("policies in %s are valid: %d files, %d rules with %d examples, %d hook calls",
    dir, c.files, c.rules, c.examples, c.hook_calls))
  p:say("version " .. snap.version)
  return 0
end

local function usage_problem(p)
  local words = p.words
  if words[1] ~= "check" then
    return ("%s; usage: switchboard policy check [DIR] (see --help)"):format(
      words[1] and ("unknown subcommand %q"):format(words[1]) or "no subcommand given")
  end
  if #words > 2 then return ("unexpected %q: check takes one DIR"):format(words[3]) end
end

-- argv: the words after `policy`. ctx: {policies_dir = the global --policies or
-- $SWITCHBOARD_POLICIES} from the CLI; specs add out=fn(line), err=fn(line) and load=opts
-- for the loader. Unlike the other commands this one does not load the policies it starts
-- with: checking them is the job, and a broken set is its answer (exit 1), not a failure.
function M.run(argv, ctx)
  if argv and argv[1] == "help" then argv = { "--help" } end
  local p, status = prologue.start(M, argv, ctx, { spec = { policies = "string" }, usage = usage_problem })
  if not p then return status end
  return check(p, p.words[2] or p.opts.policies or p.ctx.policies_dir or policy.default_dir())
end

return M
