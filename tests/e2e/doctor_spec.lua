-- `switchboard doctor` against the GitHub stand-in (tests/support/github_standin.lua), loopback
-- stand-ins for Slack's auth.test and Anthropic's GET /v1/models speaking their real shapes,
-- and a real sandboxd. One line per check; a wrong setting is a FAIL line with a fix.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local bin = require("support.bin")
local standin = require("support.github_standin")

-- Slack's auth.test (POST, bearer token) and Anthropic's models list (x-api-key), on loopback.
local function services(good)
  local seen = {}
  local srv = core.http.serve{ host = "127.0.0.1", port = 0, handler = function(req, res)
    local json = { ["content-type"] = "application/json" }
    seen[#seen + 1] = req.method .. " " .. req.path
    -- as Slack: an app-level token opens Socket Mode connections, auth.test is the bot token's
    if req.path == "/api/apps.connections.open" and req.method == "POST" then
      if (req.headers.authorization or "") == "Bearer " .. good.slack_app then
        return res:send(200, json, cjson.encode({ ok = true, url = "wss://wss-primary.slack.com/link/?ticket=t1" }))
      end
      return res:send(200, json, cjson.encode({ ok = false, error = "invalid_auth" }))
    end
    if req.path == "/api/auth.test" and req.method == "POST" then
      local auth = req.headers.authorization or ""
      if auth == "Bearer " .. good.slack_bot then
        return res:send(200, json, cjson.encode({ ok = true, team = "Acme", user = "switchboard", team_id = "T1", user_id = "U1" }))
      end
      return res:send(200, json, cjson.encode({ ok = false, error = "invalid_auth" }))
    end
    if req.path == "/v1/models" and req.method == "GET" then
      if req.headers["x-api-key"] == good.model and req.headers["anthropic-version"] then
        return res:send(200, json, cjson.encode({ data = { { id = "claude-x", type = "model" } }, has_more = false }))
      end
      return res:send(401, json, cjson.encode({ type = "error", error = { type = "authentication_error", message = "invalid x-api-key" } }))
    end
    res:send(404, json, "{}")
  end }
  return srv, "http://127.0.0.1:" .. srv.port, seen
end

-- Every run names a config directory of its own (SWITCHBOARD_CONFIG_DIR, empty unless a case
-- fills it): a test never reads the host's /etc/switchboard, where the package may be installed.
local NO_INSTALL = S.tmpdir() .. "/no-install"
local function doctor(env)
  local e = { SWITCHBOARD_CONFIG_DIR = NO_INSTALL }
  for k, v in pairs(env or {}) do e[k] = v end
  return bin.run({ "doctor" }, { env = e })
end

local function lines(text)
  local out = {}
  for l in text:gmatch("[^\n]+") do
    local verdict, name = l:match("^(%S+)%s+(%S+)")
    if verdict then out[name] = { verdict = verdict, text = l } end
  end
  return out
end

describe("switchboard doctor", function()
  after_each(function() S.cleanup_servers() end)

  it("checks every configured service and says what to fix", async(function()
    local good = { slack_bot = "xoxb-good-123456", slack_app = "xapp-good-123456", model = "sk-ant-good-123456" }
    local srv, url = services(good)
    local priv, pub = standin.keys()
    local gh = standin.start{ public_key = pub, app_id = "12345", installations = standin.default_installations() }
    local sb = S.start_sandboxd()
    local env = {
      GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = priv, GITHUB_API_URL = gh.api_url,
      GITHUB_APP_INSTALLATION_ID = "678",
      SLACK_BOT_TOKEN = good.slack_bot, SLACK_APP_TOKEN = good.slack_app, SLACK_API_URL = url .. "/api",
      ANTHROPIC_API_KEY = good.model, ANTHROPIC_BASE_URL = url,
      SANDBOX_URL = sb.url, SANDBOX_TOKEN = S.TOKEN,
    }
    local r = doctor(env)
    local l = lines(r.stdout)
    for _, name in ipairs({ "policies", "github", "slack", "model", "sandboxd" }) do
      assert.equal("ok", l[name] and l[name].verdict, name .. ":\n" .. r.stdout .. r.stderr)
    end
    assert.truthy(l.walls, r.stdout)
    assert.truthy(l.github.text:find("installation 678 (acme) grants", 1, true), l.github.text)
    assert.truthy(l.github.text:find("contents:write", 1, true) or l.github.text:find("contents:", 1, true), l.github.text)
    assert.truthy(l.sandboxd.text:find("with this build", 1, true))
    assert.truthy(l.sandboxd.text:find("; %d+ of %d+ instances awake$"), l.sandboxd.text) -- 25, never 25.0
    assert.truthy(l.slack.text:find("SLACK_APP_TOKEN ok (opens a Socket Mode connection)", 1, true), l.slack.text)
    for _, secret in pairs(good) do assert.falsy((r.stdout .. r.stderr):find(secret, 1, true)) end
    if l.walls.verdict == "ok" then assert.equal(0, r.exit) end

    -- each wrong setting: a FAIL line that says what to do, exit 1
    local bad = {}
    for k, v in pairs(env) do bad[k] = v end
    bad.SLACK_BOT_TOKEN = "xoxb-wrong-000000"
    bad.SLACK_APP_TOKEN = "xapp-wrong-000000"
    bad.ANTHROPIC_API_KEY = "sk-ant-wrong-00000"
    bad.SANDBOX_TOKEN = "wrong-sandbox-token"
    bad.GITHUB_APP_INSTALLATION_ID = "999"
    r = doctor(bad)
    assert.equal(1, r.exit)
    l = lines(r.stdout)
    assert.equal("FAIL", l.slack.verdict)
    assert.truthy(l.slack.text:find("SLACK_BOT_TOKEN: auth.test says invalid_auth", 1, true), l.slack.text)
    bad.SLACK_BOT_TOKEN = good.slack_bot
    l = lines(doctor(bad).stdout)
    assert.truthy(l.slack.text:find("SLACK_APP_TOKEN: apps.connections.open says invalid_auth", 1, true), l.slack.text)
    assert.equal("FAIL", l.model.verdict)
    assert.truthy(l.model.text:find("fix:", 1, true))
    assert.equal("FAIL", l.sandboxd.verdict)
    assert.truthy(l.sandboxd.text:find("401", 1, true))
    assert.equal("FAIL", l.github.verdict)
    assert.truthy(l.github.text:find("installation 999 not found", 1, true), l.github.text)

    -- nothing configured: skip lines that name the variable
    r = doctor()
    l = lines(r.stdout)
    assert.equal("skip", l.slack.verdict)
    assert.truthy(l.slack.text:find("SLACK_BOT_TOKEN", 1, true))
    assert.equal("skip", l.github.verdict)
    assert.equal("skip", l.sandboxd.verdict)
    gh.server:close()
    srv:close()
  end))

  -- The walls as `sandboxd` proves them at start: the helper runs and a throwaway instance runs
  -- a command. A host that cannot wall (no user namespaces, no cgroups) is told what to fix,
  -- which is checked here by breaking what a spec can break without root over the kernel: the
  -- helper's path, its mode, bwrap on PATH.
  it("proves the walls as sandboxd's start-up does, one FAIL line with the fix for each break", async(function()
    local dir = S.tmpdir()
    local function walls(env)
      local r = doctor(env)
      local l = lines(r.stdout).walls
      assert.truthy(l, r.stdout .. r.stderr)
      return l, r
    end
    local ok = walls()
    -- a host without the walls answers FAIL with its reason; this one (the suite's walls
    -- specs run here) must give them
    assert.equal("ok", ok.verdict, ok.text)
    assert.truthy(ok.text:find("switchboard-walls runs; a test instance", 1, true), ok.text)

    local l, r = walls({ SWITCHBOARD_WALLS_HELPER = dir .. "/missing/switchboard-walls" })
    assert.equal("FAIL", l.verdict)
    assert.equal(1, r.exit)
    assert.truthy(l.text:find(dir .. "/missing/switchboard-walls (SWITCHBOARD_WALLS_HELPER) does not run: No such file", 1, true), l.text)
    assert.truthy(l.text:find("fix: build it", 1, true), l.text)

    local f = assert(io.open(dir .. "/switchboard-walls", "w"))
    f:write("#!/bin/sh\nexit 0\n")
    f:close()
    l = walls({ SWITCHBOARD_WALLS_HELPER = dir .. "/switchboard-walls" }) -- mode 0644: not runnable
    assert.equal("FAIL", l.verdict)
    assert.truthy(l.text:find("does not run: Permission denied", 1, true), l.text)

    l = walls({ PATH = dir }) -- a PATH without bwrap
    assert.equal("FAIL", l.verdict)
    assert.truthy(l.text:find("bwrap is not installed", 1, true), l.text)
    assert.truthy(l.text:find("fix: apt-get install bubblewrap", 1, true), l.text)
    S.rm(dir)
  end))
  -- The bot's walls (docs/isolation.md "Fronts that serve other people"): what `switchboard
  -- slack` would refuse to start on is a FAIL with its fix; nothing is started or sent.
  it("reports a bot whose agents' commands would run unwalled as FAIL, with the fix", async(function()
    local P = require("support.policies")
    local open = P.dir{ isolation = function(src) return src .. "\nlocal_walls.slack = false\n" end }
    local env = { SLACK_BOT_TOKEN = "xoxb-doctor-0000000", SLACK_API_URL = "http://127.0.0.1:9/api",
                  SWITCHBOARD_POLICIES = open }
    local r = doctor(env)
    local l = lines(r.stdout)
    assert.equal("FAIL", l.bot and l.bot.verdict, r.stdout .. r.stderr)
    assert.equal(1, r.exit)
    assert.truthy(l.bot.text:find("agents coding, review would run Slack users' commands unwalled", 1, true), l.bot.text)
    assert.truthy(l.bot.text:find("fix: set SANDBOX_URL and SANDBOX_TOKEN", 1, true), l.bot.text)
    -- the same policy with a sandbox configured: every command goes there
    env.SANDBOX_URL, env.SANDBOX_TOKEN = "http://127.0.0.1:9", "doctor-sandbox-token"
    l = lines(doctor(env).stdout)
    assert.equal("ok", l.bot.verdict, l.bot.text)
    assert.truthy(l.bot.text:find("(coding: sandbox)", 1, true), l.bot.text)
    -- the shipped policy without a sandbox: walled locally
    l = lines(doctor({ SLACK_BOT_TOKEN = "xoxb-doctor-0000000",
      SLACK_API_URL = "http://127.0.0.1:9/api" }).stdout)
    assert.equal("ok", l.bot.verdict, l.bot.text)
    assert.truthy(l.bot.text:find("(coding: local, walled)", 1, true), l.bot.text)
    -- no bot configured: skip, naming the variable
    l = lines(doctor().stdout)
    assert.equal("skip", l.bot.verdict)
    assert.truthy(l.bot.text:find("SLACK_BOT_TOKEN", 1, true), l.bot.text)
    P.cleanup()
  end))

  -- An installed host, in a config directory of the spec's own: doctor reads bot.env as the
  -- bot's unit does (GH_TOKEN included), and refuses an overlay the services could not read.
  it("on an installed host reads bot.env as the service does and fails an overlay only root can read", async(function()
    local good = { slack_bot = "xoxb-good-654321", slack_app = "xapp-good-654321", model = "sk-ant-good-654321" }
    local srv, url = services(good)
    local etc = S.tmpdir()
    assert(os.execute(("mkdir -m 0750 %s/policies"):format(etc)))
    local f = assert(io.open(etc .. "/bot.env", "w"))
    f:write(("# as the package writes it\nGH_TOKEN=ghp_fromtheenvfile0000\nSLACK_BOT_TOKEN=%s\nSLACK_APP_TOKEN=%s\nSLACK_API_URL=%s/api\n")
      :format(good.slack_bot, good.slack_app, url))
    f:close()
    local r = doctor({ SWITCHBOARD_CONFIG_DIR = etc })
    local l = lines(r.stdout)
    assert.truthy(r.stdout:find("installed host: checking " .. etc .. "/policies and " .. etc .. "/bot.env", 1, true), r.stdout)
    assert.equal("ok", l.github and l.github.verdict, r.stdout)
    assert.truthy(l.github.text:find("GH_TOKEN", 1, true), l.github.text)
    assert.equal("ok", l.slack.verdict, l.slack.text)
    assert.equal("ok", l.policies.verdict, l.policies.text)
    for _, secret in pairs(good) do assert.falsy((r.stdout .. r.stderr):find(secret, 1, true)) end
    assert.falsy((r.stdout .. r.stderr):find("ghp_fromtheenvfile0000", 1, true))
    -- an overlay written with root's umask 077: root loads it, the services could not
    assert(os.execute(("umask 077; echo 'bash.max_ms = 30 * minute' > %s/policies/timeouts.lua"):format(etc)))
    l = lines(doctor({ SWITCHBOARD_CONFIG_DIR = etc }).stdout)
    assert.equal("FAIL", l.policies.verdict, l.policies.text)
    assert.truthy(l.policies.text:find("timeouts.lua:1: readable by its owner only (mode 0600)", 1, true), l.policies.text)
    local check = bin.run({ "policy", "check", etc .. "/policies" })
    assert.equal(1, check.exit)
    assert.truthy(check.stderr:find("fix: chmod 0644 " .. etc .. "/policies/timeouts.lua", 1, true), check.stderr)
    S.rm(etc)
    srv:close()
  end))
end)
