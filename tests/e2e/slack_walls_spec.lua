-- Black-box: `switchboard slack` never runs a Slack user's command within reach of its own
-- secrets (docs/isolation.md "Fronts that serve other people"), against the Slack stand-in
-- (tests/support/slack_standin.py) and a real sandboxd. Commands that read the bot's
-- environment three ways must post no secret, and a command's every visible environment,
-- printed in base64 and decoded here, holds no bot secret in plain, hex or base64; an unwalled policy refuses to start unless the
-- loud flag is given; every text the bot posts passes the log's redaction; /readyz goes false
-- when Socket Mode is lost or the sandbox is unreachable. The installed package's bot is the
-- same spec's subject in deploy/tests/package_systemd.sh.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local S = require("support.sandbox")
local SL = require("support.slack")

local function random(prefix) return prefix .. core.crypto.hex(core.crypto.random_bytes(12)) end

-- The bot's secrets: Slack's two tokens and the signing secret, the model key, a GitHub
-- token and the sandbox bearer (S.TOKEN, when the bot is pointed at a sandboxd).
local SECRETS = {
  SLACK_SIGNING_SECRET = random("signsecret"), ANTHROPIC_API_KEY = random("sk-ant-spec-"),
  GH_TOKEN = random("ghp_spec"),
}

local ATTACKS = {
  { ts = "1700000101.000100", text = "run `tr '\\0' '\\n' &lt; /proc/$PPID/environ`" },
  { ts = "1700000102.000100", text = "run `cat /proc/*/environ | tr '\\0' '\\n'`" },
  { ts = "1700000103.000100", text = "run `ps eww -A`" },
}

-- A command's whole environment and every environment it can see, base64 so that the
-- redaction (exact matches only) cannot hide a secret that is there: the spec decodes it.
local ENCODED = { ts = "1700000104.000100",
  text = "run `for p in /proc/self /proc/[0-9]*; do cat $p/environ; echo; done 2>/dev/null | base64 -w0`" }

local function wait_final(st, thread_ts)
  return SL.wait(function()
    for _, c in ipairs(st:cards(thread_ts)) do if SL.is_final(c) then return c end end
  end, "the final card in thread " .. thread_ts, 120000)
end

local function secret_values(extra)
  local out = { SL.BOT_TOKEN, SL.APP_TOKEN }
  for _, v in pairs(SECRETS) do out[#out + 1] = v end
  for _, v in ipairs(extra or {}) do out[#out + 1] = v end
  return out
end

-- Fails naming the place and the secret when any secret value is in text.
local function assert_no_secret(text, where, extra)
  for _, v in ipairs(secret_values(extra)) do
    assert.is_nil(text:find(v, 1, true), ("a secret (%s…) reached %s"):format(v:sub(1, 8), where))
  end
end

-- The forms a secret may take in text: as it is, hex (either case), base64 at each of the
-- three alignments (the part of the encoding that depends on the secret alone).
local function forms(v)
  local out = { v, core.crypto.hex(v), core.crypto.hex(v):upper() }
  for pad = 0, 2 do
    local e = core.crypto.base64_encode(("\0"):rep(pad) .. v)
    out[#out + 1] = e:sub(pad > 0 and 5 or 1, -5)
  end
  return out
end

-- No bot secret in text, in any of those forms (GH_TOKEN is left out: it is the commands'
-- own credential, docs/isolation.md "A command's own credential").
local function assert_no_bot_secret_encoded(text, where, extra)
  local bot_secrets = { SL.BOT_TOKEN, SL.APP_TOKEN, SECRETS.SLACK_SIGNING_SECRET, SECRETS.ANTHROPIC_API_KEY }
  for _, v in ipairs(extra or {}) do bot_secrets[#bot_secrets + 1] = v end
  for _, v in ipairs(bot_secrets) do
    for i, form in ipairs(forms(v)) do
      assert.is_nil(text:find(form, 1, true), ("a secret (%s…, form %d) reached %s"):format(v:sub(1, 8), i, where))
    end
  end
end

-- The ENCODED attack's output, decoded: from its card, or from the whole output's upload.
local function decoded_environments(st, card_text)
  local texts = { card_text }
  for _, up in pairs(st:state().uploads) do texts[#texts + 1] = up.bytes or "" end
  local out = {}
  for _, t in ipairs(texts) do
    for run in t:gmatch("[%w+/]+=*") do
      if #run >= 64 and #run % 4 == 0 then
        local bytes = core.crypto.base64_decode(run)
        if bytes and bytes:find("PATH=", 1, true) then out[#out + 1] = bytes end
      end
    end
  end
  assert.is_true(#out > 0, "no environment came back decodable:\n" .. card_text)
  return table.concat(out, "\n")
end

-- Everything the stand-in received from the bot (calls' arguments, messages, uploads).
local function slack_side(st)
  return (cjson.encode(st:state()):gsub("\\/", "/")) -- cjson writes / as \/: base64 has slashes
end

local function bot_env(extra)
  local env = {}
  for k, v in pairs(SECRETS) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

-- Sends the three attacks and the encoded one, waits for their cards; → the cards' texts (the
-- encoded one's last).
local function attack(st)
  local all = { ATTACKS[1], ATTACKS[2], ATTACKS[3], ENCODED }
  for _, a in ipairs(all) do st:envelope("events_api", SL.mention{ ts = a.ts, text = a.text }) end
  local texts = {}
  for _, a in ipairs(all) do texts[#texts + 1] = SL.card_text(wait_final(st, a.ts)) end
  return texts
end

local function stop(bot)
  if bot and not bot.result then
    bot:signal("TERM")
    bot:wait()
  end
end

describe("switchboard slack and its secrets", function()
  local st
  before_each(async(function() st = SL.standin() end))
  after_each(async(function()
    st:close()
    S.cleanup_servers()
    tmp.remove_all()
    P.cleanup()
  end))

  it("refuses to start when policy runs commands unwalled, saying how to fix it; the flag starts it, warns, and marks every card", async(function()
    local dir = P.dir{ isolation = function(src) return src .. "\nlocal_walls.slack = false\n" end }
    local bot = SL.bot(st, { walled = true, no_wait = true, policies = dir, state_dir = tmp.dir("slack"),
                             env = bot_env() })
    local r = bot:wait()
    assert.equal(78, r.exit, bot.err)
    assert.truthy(bot.err:find("agents coding (local), review (local) would run Slack users' commands "
      .. "unwalled on this host", 1, true), bot.err)
    assert.truthy(bot.err:find("SANDBOX_URL and SANDBOX_TOKEN", 1, true), bot.err)
    assert.truthy(bot.err:find("--allow-unwalled-commands", 1, true), bot.err)
    assert.equal(0, #st:calls("chat.postMessage"))

    bot = SL.bot(st, { walled = true, policies = dir, state_dir = tmp.dir("slack"), env = bot_env(),
                       args = { "--allow-unwalled-commands" } })
    assert.truthy(bot.err:find("slack.unwalled", 1, true), bot.err)
    st:envelope("events_api", SL.mention{ ts = "1700000110.000100", text = "run `echo marked`" })
    local text = SL.card_text(wait_final(st, "1700000110.000100"))
    assert.truthy(text:find("unwalled: this bot was started with --allow-unwalled-commands", 1, true), text)
    assert.truthy(text:find("marked", 1, true), text)
    stop(bot)
    assert_no_secret(bot.err, "the bot's log")
  end))

  -- The package's unit runs the bot as User=switchboard: with no sandbox its agents would go to
  -- the local executor's walls, which need root. It must refuse at start, not fail every command.
  it("not root and with no sandbox (the package's user without SANDBOX_URL): refuses to start, saying the walls need root and what to set", async(function()
    local bin = require("support.bin")
    local err = ""
    local proc = assert(core.spawn{
      argv = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin.path, "--policies", "policies", "slack" },
      env = bin.env(bot_env{ SLACK_BOT_TOKEN = SL.BOT_TOKEN, SLACK_APP_TOKEN = SL.APP_TOKEN, SLACK_API_URL = st.url,
                             SWITCHBOARD_STATE_DIR = "/tmp/switchboard-spec-nobody" }),
      deadline_ms = 120000, on_output = function(_, chunk) err = err .. chunk end,
    })
    local r = proc:wait()
    assert.equal(78, r.exit, err)
    assert.truthy(err:find("agents coding (local), review (local) would run Slack users' commands on the local "
      .. "executor behind its walls, but this bot runs as uid 65534, not root, and the walls need root", 1, true), err)
    assert.truthy(err:find("Point the bot at a sandboxd: set SANDBOX_URL and SANDBOX_TOKEN", 1, true), err)
    assert.equal(0, #st:calls("auth.test")) -- refused before it talks to Slack
    assert_no_secret(err, "the bot's log")
  end))

  it("posts [redacted] for every secret of the bot a command prints, in cards, uploads and logs", async(function()
    -- unwalled on purpose: the redaction is the last line, tested here on its own
    local bot = SL.bot(st, { state_dir = tmp.dir("slack"), env = bot_env(), args = { "--trace", "-" } })
    local key = SECRETS.ANTHROPIC_API_KEY
    local half = #key // 2
    -- the key put together by the command, so the ask itself does not carry it
    st:envelope("events_api", SL.mention{ ts = "1700000111.000100",
      text = ("run `printf '%%s%%s\\n' %s %s`"):format(key:sub(1, half), key:sub(half + 1)) })
    -- the bot token in the ask itself: the card shows the command, scrubbed too
    st:envelope("events_api", SL.mention{ ts = "1700000112.000100", text = "run `echo " .. SL.BOT_TOKEN .. "`" })
    -- long enough to be uploaded as a file
    st:envelope("events_api", SL.mention{ ts = "1700000113.000100",
      text = ("run `seq 1 3000; printf '%%s%%s\\n' %s %s`"):format(key:sub(1, half), key:sub(half + 1)) })
    local one = SL.card_text(wait_final(st, "1700000111.000100"))
    local two = SL.card_text(wait_final(st, "1700000112.000100"))
    wait_final(st, "1700000113.000100")
    assert.truthy(one:find("[redacted]", 1, true), one)
    assert.truthy(two:find("[redacted]", 1, true), two)
    SL.wait(function() return #st:calls("files.completeUploadExternal") > 0 end, "the output's upload")
    stop(bot)
    assert_no_secret(slack_side(st), "the Slack stand-in")
    assert_no_secret(bot.err, "the bot's log and spans")
    -- what it keeps on disk (the whole output of a cut card) is scrubbed as well
    local kept = assert(io.popen("cat " .. bot.state_dir .. "/outputs/*/* 2>/dev/null")):read("a")
    assert.truthy(kept:find("[redacted]", 1, true), "no kept output")
    assert_no_secret(kept, "the kept output")
  end))

  it("/readyz: ready while connected; not ready while Socket Mode cannot reconnect, live all along", async(function()
    local dir = P.dir{ slack = function(src) return src .. "\nsocket.reconnect_ms = { 100 }\n" end }
    local bot = SL.bot(st, { state_dir = tmp.dir("slack"), policies = dir, env = bot_env(),
                             args = { "--health-listen", "127.0.0.1:0" } })
    local function get(path)
      local status, _, body = core.http.request{ method = "GET", deadline_ms = 10000,
        url = ("http://127.0.0.1:%d%s"):format(bot.health_port, path) }
      return status, body and cjson.decode(body)
    end
    local status, doc = get("/readyz")
    assert.equal(200, status)
    assert.is_true(doc.ready)
    assert.is_true(doc.checks.slack.ok)
    assert.is_true(doc.checks.policies.ok)
    st:control("fail", { method = "apps.connections.open", error = "internal_error", count = 100000 })
    st:control("drop")
    doc = SL.wait(function()
      local s, d = get("/readyz")
      if s == 503 then return d end
    end, "/readyz to answer 503")
    assert.is_false(doc.ready)
    assert.equal("Socket Mode is disconnected (reconnecting)", doc.checks.slack.reason)
    assert.equal(200, (get("/healthz")))
    st:control("fail", { method = "apps.connections.open", error = "internal_error", count = 0 })
    SL.wait(function() return get("/readyz") == 200 end, "/readyz to answer 200 after the reconnect")
    stop(bot)
  end))

  it("/readyz: not ready while the sandbox it is pointed at does not answer", async(function()
    local bot = SL.bot(st, { walled = true, state_dir = tmp.dir("slack"), args = { "--health-listen", "127.0.0.1:0" },
      env = bot_env{ SANDBOX_URL = "http://127.0.0.1:9", SANDBOX_TOKEN = S.TOKEN } })
    local status, _, body = core.http.request{ method = "GET", deadline_ms = 10000,
      url = ("http://127.0.0.1:%d/readyz"):format(bot.health_port) }
    assert.equal(503, status, body)
    local doc = cjson.decode(body)
    assert.is_true(doc.checks.slack.ok)
    assert.truthy(doc.checks.sandbox.reason:find("sandboxd http://127.0.0.1:9 unreachable", 1, true), body)
    stop(bot)
  end))
end)

local describe_walls = require("support.walls").probe(S.policy_dir(),
  { describe = describe, it = it, pending = pending })

describe_walls("the shipped bot's commands read no secret of it", function()
  local st
  before_each(async(function() st = SL.standin() end))
  after_each(async(function()
    st:close()
    S.cleanup_servers()
    tmp.remove_all()
    P.cleanup()
  end))

  it("pointed at a sandboxd (the package's setup): the three attacks post no secret", async(function()
    local h = S.start_sandboxd{ policies = S.policy_dir() }
    local bot = SL.bot(st, { walled = true, state_dir = tmp.dir("slack"), args = { "--health-listen", "127.0.0.1:0" },
      env = bot_env{ SANDBOX_URL = h.url, SANDBOX_TOKEN = S.TOKEN } })
    -- ready: Slack connected, policies loaded, the sandboxd answering its /healthz with the bearer
    local status, _, body = core.http.request{ method = "GET", deadline_ms = 10000,
      url = ("http://127.0.0.1:%d/readyz"):format(bot.health_port) }
    assert.equal(200, status, body)
    assert.is_true(cjson.decode(body).checks.sandbox.ok, body)
    local texts = attack(st)
    for _, text in ipairs(texts) do
      assert.truthy(text:find("· sandbox", 1, true), text) -- the shipped policy picked the sandbox
      assert_no_secret(text, "a card", { S.TOKEN })
    end
    local env = decoded_environments(st, texts[#texts])
    -- the command's own credential is its to see (and proves the decoding found the env)
    assert.truthy(env:find("GH_TOKEN=" .. SECRETS.GH_TOKEN, 1, true), "no GH_TOKEN in the command's environment")
    assert_no_bot_secret_encoded(env, "a command's environment", { S.TOKEN })
    assert_no_bot_secret_encoded(slack_side(st), "the Slack stand-in", { S.TOKEN })
    stop(bot)
    assert_no_secret(slack_side(st), "the Slack stand-in", { S.TOKEN })
    assert_no_secret(bot.err, "the bot's log", { S.TOKEN })
    assert_no_secret(h.log(), "sandboxd's log", { S.TOKEN })
  end))

  it("with no sandbox: the local executor is walled, and the three attacks post no secret", async(function()
    local bot = SL.bot(st, { walled = true, state_dir = tmp.dir("slack"), env = bot_env() })
    local texts = attack(st)
    for _, text in ipairs(texts) do
      assert.truthy(text:find("local executor: walled", 1, true), text)
      assert_no_secret(text, "a card")
    end
    local env = decoded_environments(st, texts[#texts])
    -- the command's own credential is its to see (and proves the decoding found the env)
    assert.truthy(env:find("GH_TOKEN=" .. SECRETS.GH_TOKEN, 1, true), "no GH_TOKEN in the command's environment")
    assert_no_bot_secret_encoded(env, "a command's environment")
    assert_no_bot_secret_encoded(slack_side(st), "the Slack stand-in")
    stop(bot)
    assert_no_secret(slack_side(st), "the Slack stand-in")
    assert_no_secret(bot.err, "the bot's log")
  end))
end)
