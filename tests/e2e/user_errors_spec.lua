-- Every user-facing failure of the binary says what went wrong in words: a walk over the error
-- paths of each command (bad arguments, missing directories, broken policies, an unreachable
-- sandbox, refusals) that holds each to three things — the status the command documents, a
-- message on the stream the user reads, and never a Lua table's address ("table: 0x…") where
-- a message should be.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local bin = require("support.bin")
local P = require("support.policies")

local ADDRESS = "table: 0x"

-- A policy directory whose one file raises at load with a value that is not a string.
local function raising_policies(value_src)
  return P.dir{ timeouts = function(src) return src .. "\nerror(" .. value_src .. ")\n" end }
end

describe("user-facing errors", function()
  local root, state
  before_each(function()
    root = tmp.dir("uerr")
    state = tmp.dir("state")
  end)
  after_each(function()
    tmp.remove_all()
    P.cleanup()
  end)

  -- Runs one case: {args, status, env?, stdin?, says?}; says: a plain text the output must hold.
  local function walk(cases)
    local problems = {}
    for _, c in ipairs(cases) do
      local env = { SWITCHBOARD_STATE_DIR = state }
      for k, v in pairs(c.env or {}) do env[k] = v end
      local r = bin.run(c.args, { env = env, stdin = c.stdin, deadline_ms = 60000 })
      local out = (r.stdout or "") .. (r.stderr or "")
      local name = table.concat(c.args, " ")
      if out:find(ADDRESS, 1, true) then
        problems[#problems + 1] = name .. ": prints a table address:\n" .. out
      end
      if c.status and r.exit ~= c.status then
        problems[#problems + 1] = ("%s: exit %s, expected %d:\n%s"):format(name, tostring(r.exit), c.status, out)
      end
      if not out:find("%S") then problems[#problems + 1] = name .. ": says nothing" end
      if c.says and not out:find(c.says, 1, true) then
        problems[#problems + 1] = ("%s: does not say %q:\n%s"):format(name, c.says, out)
      end
    end
    assert(#problems == 0, "\n" .. table.concat(problems, "\n\n"))
  end

  it("the global options and the command name", async(function()
    walk{
      { args = {}, status = 2, says = "Usage: switchboard" },
      { args = { "bogus" }, status = 2, says = 'unknown command "bogus"; the commands are exec, console, slack,' },
      -- modules beside the commands are not commands (they once ran and died with status 70)
      { args = { "walls" }, status = 2, says = 'unknown command "walls"; the commands are' },
      { args = { "prologue" }, status = 2, says = 'unknown command "prologue"; the commands are' },
      { args = { "notify" }, status = 2, says = 'unknown command "notify"; the commands are' },
      { args = { "--log-format", "xml", "version" }, status = 2, says = "--log-format must be text or json" },
      { args = { "--bogus", "version" }, status = 2, says = "unknown option --bogus" },
      { args = { "--policies" }, status = 2, says = "--policies needs a value" },
    }
  end))

  it("switchboard exec", async(function()
    local broken = P.dir{ timeouts = function(s) return s .. "\nbash.max_ms = true\n" end }
    local w = { "exec", "--workspace-root", root }
    local function a(...) local t = { table.unpack(w) }; for _, x in ipairs({ ... }) do t[#t + 1] = x end; return t end
    walk{
      { args = a("--bogus", "--", "true"), status = 2, says = "unknown option --bogus" },
      { args = a("--timeout-ms", "soon", "--", "true"), status = 2, says = "--timeout-ms needs a number" },
      { args = a(), status = 2, says = "no command given" },
      { args = a("echo", "hi"), status = 2, says = "put the command after `--`" },
      { args = a("--backend", "cloud", "--", "true"), status = 2, says = "--backend must be local, sandbox, resident, e2b or kubernetes" },
      { args = { "--policies", "/nonexistent/policies", "exec", "--", "true" }, status = 78,
        says = "cannot list the policy directory" },
      { args = { "--policies", broken, "exec", "--", "true" }, status = 78, says = "bash.max_ms" },
      { args = { "--policies", raising_policies("{}"), "exec", "--", "true" }, status = 78, says = "timeouts.lua" },
      { args = a("--backend", "sandbox", "--", "true"), status = 78, says = "SANDBOX_URL" },
      { args = a("--backend", "sandbox", "--sandbox-url", "http://127.0.0.1:1", "--", "true"),
        env = { SANDBOX_TOKEN = "t0ken" }, status = 125, says = "sandboxd" },
      { args = a("--backend", "sandbox", "--sandbox-url", "not a url", "--", "true"),
        env = { SANDBOX_TOKEN = "t0ken" }, status = 125 },
      { args = a("--agent", "nosuch", "--", "true"), status = 78, says = 'unknown agent "nosuch"' },
      { args = a("--agent", "general", "--", "true"), status = 126, says = "declares no repository" },
      { args = { "exec", "--workspace-root", "/proc/self/nope", "--", "true" }, status = 125,
        says = "workspace" },
      { args = a("--trace", "/nonexistent/dir/spans", "--", "true"), status = 2, says = "--trace" },
      { args = a("--timeout-ms", "1000", "--thread", "x", "--", "sleep 30"), status = 124, says = "timeoutMs" },
    }
  end))

  it("switchboard console", async(function()
    local broken = P.dir{ timeouts = function(s) return s .. "\nbash.max_ms = true\n" end }
    walk{
      { args = { "console", "--bogus" }, status = 2, says = "unknown option --bogus" },
      { args = { "console", "extra" }, status = 2, says = "asks come from standard input" },
      { args = { "console", "--thread", "a b" }, status = 2, says = "--thread takes a name" },
      { args = { "console", "--backend", "cloud" }, status = 2, says = "--backend must be local, sandbox, resident, e2b or kubernetes" },
      { args = { "console", "--backend", "sandbox" }, status = 78, says = "--sandbox-url" },
      { args = { "--policies", broken, "console" }, status = 78, says = "the policies do not load" },
      { args = { "--policies", "/nonexistent/policies", "console" }, status = 78 },
      { args = { "console", "--trace", "/nonexistent/dir/spans" }, status = 2, says = "--trace" },
      -- asks that fail inside a session: the card or the answer says why; the console exits 0
      { args = { "console", "--workspace-root", root, "--backend", "sandbox", "--sandbox-url", "http://127.0.0.1:1" },
        env = { SANDBOX_TOKEN = "t0ken" }, stdin = "run `true`\n", status = 0, says = "sandbox" },
      { args = { "console", "--workspace-root", root },
        stdin = "agent:nosuch run `true`\nrun true\n/bogus\n/thread a b\nagent:general run `ls`\n"
          .. "agent:general run `ls` in acme/api\nrun `exit 3`\nstop\nhelp\n",
        status = 0, says = "There is no agent" },
      { args = { "console", "--workspace-root", "/proc/self/nope" }, stdin = "run `true`\n", status = 0,
        says = "workspace" },
    }
  end))

  it("switchboard sandboxd", async(function()
    local taken = core.http.serve{ host = "127.0.0.1", port = 0, handler = function(_, res) res:send(204, {}, "") end }
    walk{
      { args = { "sandboxd" }, status = 2, says = "--listen HOST:PORT is required" },
      { args = { "sandboxd", "--listen", "nowhere", "--root", root }, status = 2, says = "--listen needs HOST:PORT" },
      { args = { "sandboxd", "--listen", "127.0.0.1:0" }, status = 2, says = "--root DIR is required" },
      { args = { "sandboxd", "--listen", "127.0.0.1:0", "--root", root, "--max-instances", "0" }, status = 2,
        says = "--max-instances" },
      { args = { "sandboxd", "--listen", "127.0.0.1:0", "--root", root }, status = 78, says = "SANDBOX_TOKEN is not set" },
      { args = { "sandboxd", "--listen", "127.0.0.1:0", "--root", "/proc/self/nope" }, env = { SANDBOX_TOKEN = "t0ken" },
        status = 78, says = "--root" },
      { args = { "sandboxd", "--listen", "127.0.0.1:" .. taken.port, "--root", root }, env = { SANDBOX_TOKEN = "t0ken" },
        status = 71, says = "cannot listen on" },
      { args = { "--policies", "/nonexistent/policies", "sandboxd", "--listen", "127.0.0.1:0", "--root", root },
        env = { SANDBOX_TOKEN = "t0ken" }, status = 78 },
    }
    taken:close()
  end))

  it("switchboard policy and version", async(function()
    local broken = P.dir{ timeouts = function(s) return s .. "\nbash.max_ms = true\n" end }
    walk{
      { args = { "policy" }, status = 2, says = "usage: switchboard policy check" },
      { args = { "policy", "lint" }, status = 2, says = 'unknown subcommand "lint"' },
      { args = { "policy", "check", "a", "b" }, status = 2 },
      { args = { "policy", "check", "--bogus" }, status = 2, says = "unknown option --bogus" },
      { args = { "policy", "check", "/nonexistent/dir" }, status = 2, says = "/nonexistent/dir does not exist" },
      { args = { "policy", "check", broken }, status = 1, says = "bash.max_ms" },
      { args = { "policy", "check", raising_policies("{}") }, status = 1, says = "timeouts.lua" },
      { args = { "policy", "check", raising_policies("setmetatable({}, {})") }, status = 1, says = "timeouts.lua" },
      { args = { "policy", "check", raising_policies("nil") }, status = 1, says = "timeouts.lua" },
      { args = { "policy", "check", P.dir{ errors = function(s) return s .. "\nassert(false, {})\n" end } },
        status = 1, says = "errors.lua" },
      { args = { "version", "--bogus" }, status = 2, says = "unknown option --bogus" },
      { args = { "version", "extra" }, status = 2 },
    }
  end))
end)
