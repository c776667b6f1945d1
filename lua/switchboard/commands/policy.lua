-- `switchboard policy check [DIR]`: validate a policy directory offline, like `nginx -t`.

local loader = require("switchboard.policy.loader")
local policy = require("switchboard.policy")

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

local function writer(stream)
  return function(s) stream:write(s, "\n") end
end

local function check(dir, out, err, opts)
  local snap, errs = loader.load(dir, opts)
  if not snap then
    for _, e in ipairs(errs) do err(e) end
    err(string.format("policy check failed: %d problem%s in %s", #errs, #errs == 1 and "" or "s", dir))
    return 1
  end
  local c = snap.checked
  out(string.format("policies in %s are valid: %d files, %d rules with %d examples, %d hook calls",
    dir, c.files, c.rules, c.examples, c.hook_calls))
  out("version " .. snap.version)
  return 0
end

-- args: the words after `policy`. ctx: {policies_dir = the global --policies or
-- $SWITCHBOARD_POLICIES} from the CLI; specs add out=fn(line), err=fn(line) and load=opts
-- for the loader.
local function run(args, ctx)
  ctx = ctx or {}
  local out = ctx.out or writer(io.stdout)
  local err = ctx.err or writer(io.stderr)
  args = args or {}
  local words, dir = {}, nil
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-h" or a == "--help" or a == "help" then
      out(HELP)
      return 0
    elseif a == "--policies" then
      dir = args[i + 1]
      if not dir then err("--policies needs a directory"); return 2 end
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      err("unknown option " .. a .. "\n" .. HELP)
      return 2
    else
      words[#words + 1] = a
    end
    i = i + 1
  end
  if words[1] ~= "check" or #words > 2 then
    err(HELP)
    return 2
  end
  dir = words[2] or dir or ctx.policies_dir or policy.default_dir()
  return check(dir, out, err, ctx.load)
end

return {
  name = "policy",
  summary = "validate the policy files offline (switchboard policy check [DIR])",
  help = HELP,
  run = run,
}
