-- Repository secrets, black-box (docs/secrets.md): a secret set with `switchboard secrets set`
-- (the value on standard input) reaches the environment of the commands an agent runs on that
-- repository — the command writes its `env` into the checkout's .git directory, where the spec
-- reads it — and nowhere else: not a thread on another repository, not the requests the
-- Messages API stand-in (tests/support/model_standin.py) received, not the card, the
-- transcript, the log, nor (Slack, against tests/support/slack_standin.py) the posted cards and
-- the thread's record (a sqlite3 dump of record.db) — neither the value nor its base64.
-- Repositories come from git's smart HTTP stand-in (tests/support/git_standin.py).
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local SL = require("support.slack")
local secrets = require("switchboard.store.secrets")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

local function capture(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local s = p:read("a")
  p:close()
  return s
end

-- Every string in a decoded JSON value, joined: JSON's escapes (\/ in base64) undone.
local function strings(v, out)
  out = out or {}
  if type(v) == "string" then out[#out + 1] = v
  elseif type(v) == "table" then
    for k, x in pairs(v) do strings(k, out); strings(x, out) end
  end
  return out
end

local function all_text(v) return table.concat(strings(v), "\n") end

-- The command the model asks for: env into .git (untracked: no change to publish), and the
-- value printed plain and as base64 at two alignments, for the redaction to meet.
local PRINT = "env > .git/seen-env; echo value=$DEPLOY_KEY; printf %s \"$DEPLOY_KEY\" | base64 -w0; echo;"
  .. " printf 'xy%s' \"$DEPLOY_KEY\" | base64 -w0; echo"

describe("repository secrets", function()
  local state, token, git, m, value, pol

  local function assert_nowhere(text, where)
    for _, form in ipairs(secrets.redaction_forms(value)) do
      assert.is_nil(text:find(form, 1, true), ("the secret (%q) in %s"):format(form, where))
    end
    assert.is_nil(text:find(core.crypto.base64_encode(value), 1, true), "the secret's base64 in " .. where)
  end

  local function cli(args, stdin)
    local r
    core.run(function()
      local proc = assert(core.spawn{ argv = { BIN, "--policies", pol, "secrets", table.unpack(args) },
        env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st" }, stdin = stdin, deadline_ms = 60000 })
      r = proc:wait()
    end)
    return r
  end

  before_each(function()
    state = files.tmpdir()
    token = "ghs_spec" .. core.crypto.hex(core.crypto.random_bytes(16))
    value = "sk-live-" .. core.crypto.hex(core.crypto.random_bytes(16))
    for _, repo in ipairs({ "api", "web" }) do
      sh(("cd %s && mkdir -p repos/acme gitd && git init -q --bare repos/acme/%s.git"
        .. " && rm -rf src && git init -q src && cd src && echo 'hello' > README"
        .. " && git add README && git -c user.email=s@x -c user.name=s commit -qm init"
        .. " && git push -q ../repos/acme/%s.git HEAD:refs/heads/main"
        .. " && git -C ../repos/acme/%s.git symbolic-ref HEAD refs/heads/main"):format(state, repo, repo, repo))
    end
    os.execute(("/usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --token %s >%s/gitd/out 2>&1 &")
      :format(state, state, token, state))
    core.run(function()
      git = model.wait_for(function() return files.read(state .. "/gitd/port") end, 180000) -- python3 on a loaded machine
    end)
    assert(git, "the git stand-in did not start: " .. (files.read(state .. "/gitd/out") or ""))
    local f = assert(io.open(state .. "/secrets.key", "wb"))
    f:write(core.crypto.hex(core.crypto.random_bytes(32)), "\n")
    f:close()
    sh("chmod 600 '" .. state .. "/secrets.key'")
    pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. git .. '/{repo}.git"\n' end,
      execution = function(src) return src .. '\nsecrets_key_file = "' .. state .. '/secrets.key"\n' end,
    }
    local r = cli({ "set", "acme/api", "DEPLOY_KEY" }, value .. "\n")
    assert.are.equal(0, r.exit, r.stderr)
    assert.are.equal("set DEPLOY_KEY of acme/api (" .. #value .. " bytes)\n", r.stdout)
  end)

  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    local pid = files.read(state .. "/gitd/pid")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  it("the CLI takes the value from standard input only, lists names, and keeps the file 0600 without the value", function()
    local listed = cli({ "list", "acme/api" })
    assert.are.equal("DEPLOY_KEY\n", listed.stdout)
    assert.are.equal("", cli({ "list", "acme/web" }).stdout)
    assert.are.equal("600", (capture("stat -c %a " .. state .. "/st/secrets.json"):gsub("%s", "")))
    assert_nowhere(files.read(state .. "/st/secrets.json"), "the store")
    local refused = cli({ "set", "acme/api", "GH_TOKEN" }, value)
    assert.are.equal(2, refused.exit)
    assert.matches("GH_TOKEN is set by the executor itself", refused.stderr, 1, true)
    sh("chmod 644 '" .. state .. "/secrets.key'")
    local open = cli({ "set", "acme/api", "OTHER" }, value)
    assert.are.equal(1, open.exit)
    assert.matches("readable or writable by group or others (mode 644); chmod 600 it", open.stderr, 1, true)
    assert.are.equal(1, cli({ "delete", "acme/api", "OTHER" }).exit)
    assert.are.equal(0, cli({ "delete", "acme/api", "DEPLOY_KEY" }).exit)
    assert.are.equal("", cli({ "list", "acme/api" }).stdout)
  end)

  -- One console session (its own process): the answers scripted, the lines piped in.
  local function console(answers, line)
    local r, reqs
    core.run(function()
      m = model.start()
      m:script(answers)
      local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", ANTHROPIC_BASE_URL = m.url,
                           ANTHROPIC_API_KEY = m.key, GH_TOKEN = token }
      local proc = assert(core.spawn{ argv = { BIN, "--policies", pol, "console" }, env = env,
        stdin = line .. "\n", deadline_ms = 120000 })
      r = proc:wait()
      reqs = m:requests()
      m.stop()
      m = nil
    end)
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs
  end

  it("console: in the env of acme/api's commands only; never in a request body, card, transcript or log", function()
    local out, err, reqs = console({
      { content = { { type = "tool_use", name = "bash", input = { command = PRINT } } } },
      { content = { { type = "text", text = "Printed." } } },
    }, "agent:coding print the deploy key of acme/api")
    local card = cards.find(out, "deploy key of acme/api")
    assert.matches("✓ done after 2 turns", card, 1, true)
    -- (1) the command's environment had it
    local api_env = capture("cat " .. state .. "/st/workspaces/*/.git/seen-env")
    assert.matches("DEPLOY_KEY=" .. value, api_env, 1, true)
    -- (2) what the model was sent: the output redacted, plain and base64
    assert.are.equal(2, #reqs)
    local result = model.tool_results(reqs[2])[1].content
    assert.matches("value=[redacted]\n[redacted]", result, 1, true)
    for i, req in ipairs(reqs) do assert_nowhere(all_text(req.body), "request " .. i) end
    -- (3) the card, the log, the transcripts
    assert_nowhere(out, "the console's output")
    assert_nowhere(err, "the log")
    assert_nowhere(capture("cat " .. state .. "/st/transcripts/*/*.jsonl"), "a transcript")
    -- (4) a thread on another repository does not get it
    local _, _, web = console({
      { content = { { type = "tool_use", name = "bash", input = { command = "echo key=[$DEPLOY_KEY]" } } } },
      { content = { { type = "text", text = "Nothing there." } } },
    }, "/thread web\nagent:coding and the deploy key of acme/web?")
    assert.are.equal(2, #web)
    assert.matches("^key=%[%]", model.tool_results(web[2])[1].content)
    -- (5) a command's own card (its output shown whole) on the repository
    local shown = console({}, "/thread cmd\nrun `echo v=$DEPLOY_KEY; printf %s \"$DEPLOY_KEY\" | base64 -w0` in acme/api")
    assert.matches("v=[redacted]\n[redacted]", cards.find(shown, "DEPLOY_KEY"), 1, true)
    assert_nowhere(shown, "a command's card")
  end)

  it("slack: never in a posted card or in the thread's record", function()
    local st, bot
    core.run(function()
      m = model.start()
      m:script{
        { content = { { type = "tool_use", name = "bash", input = { command = PRINT } } } },
        { content = { { type = "text", text = "Printed." } } },
      }
      st = SL.standin()
      bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GH_TOKEN = token, HOME = state } })
      local T = "1700000200.000100"
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding print the deploy key of acme/api" })
      local final = SL.wait(function()
        for _, c in ipairs(st:cards(T)) do if SL.is_final(c) then return c end end
      end, "the final card", 120000)
      assert.matches("done after 2 turns", SL.card_text(final), 1, true)
      local reqs = m:requests()
      for i, req in ipairs(reqs) do assert_nowhere(all_text(req.body), "request " .. i) end
      assert_nowhere(all_text(st:state()), "what Slack was sent")
      bot:signal("TERM")
      bot:wait()
      st:close()
    end)
    assert.matches("DEPLOY_KEY=" .. value, capture("cat " .. state .. "/st/workspaces/*/.git/seen-env"), 1, true)
    local dump = capture("sqlite3 " .. state .. "/st/record.db .dump")
    assert.matches("CREATE TABLE", dump, 1, true)
    assert.matches("[redacted]", dump, 1, true)
    assert_nowhere(dump, "the record")
    assert_nowhere(bot.err, "the log")
  end)
end)
