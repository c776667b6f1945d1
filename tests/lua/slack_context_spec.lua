-- fronts/slack/context.lua over what Slack may answer: conversations.replies bodies and file
-- objects of every shape (a randomized sweep: the reader never raises, never exceeds its
-- bounds, and leaves out what it cannot use), plus the bounds on known input. The Web API here
-- is a table answering from the case's data; the real protocol is covered end to end by
-- tests/e2e/thread_memory_spec.lua against the Slack stand-in.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local context = require("switchboard.fronts.slack.context")

local POL = { max_messages = 3, max_bytes = 200, max_files = 2, max_image_bytes = 64, max_text_file_bytes = 32,
              max_redirects = 2 }

local function api(replies, users)
  return {
    token = "xoxb-test", deadline_ms = 1000,
    call = function(_, method, args)
      if method == "conversations.replies" then return replies end
      if method == "users.info" then return users and users[args.user] end
    end,
  }
end

local seed = tonumber(os.getenv("SB_FUZZ_SEED") or "") or os.time()
math.randomseed(seed)

local ATOMS = { "x", "", 1, 1.5, -1, true, false, {}, "1700000000.000100", "1800000000.0", "U0ANA", ("é"):rep(50) }
local function any(depth)
  local r = math.random(1, 10)
  if depth > 2 or r <= 6 then return ATOMS[math.random(#ATOMS)] end
  local t = {}
  for i = 1, math.random(0, 4) do t[i] = any(depth + 1) end
  for _, k in ipairs({ "ts", "user", "text", "bot_id", "subtype", "messages", "profile", "display_name",
                       "mimetype", "name", "size", "url_private" }) do
    if math.random() < 0.3 then t[k] = any(depth + 1) end
  end
  return t
end

describe("slack context (seed " .. seed .. ")", function()
  it("never raises on any conversations.replies answer and keeps its bounds", function()
    for _ = 1, 3000 do
      local body = { ok = true, messages = any(0) }
      if math.random() < 0.2 then body = any(0) end
      local users = { U0ANA = any(0) }
      local ok, block, why, n = pcall(context.thread_block, api(body, users), POL,
        { channel = "C1", thread_ts = "1700000000.000100", ask_ts = "1700000001.000000", names = {} })
      assert.is_true(ok, tostring(block))
      if block then
        assert.equal("text", block.type)
        assert.is_true(n <= POL.max_messages)
        assert.is_true(#block.text <= POL.max_bytes + 120)
      else
        assert.is_true(why == nil or type(why) == "string")
      end
    end
  end)

  it("never raises on any file object and names every file it skips", function()
    for _ = 1, 3000 do
      local file = any(0)
      if type(file) ~= "table" then file = { name = file } end
      file.url_private = nil -- nothing is fetched: a file it would fetch has no address here
      file.url_private_download = nil
      local ok, block, note = pcall(context.file_block, api(), POL, { request = error }, file)
      assert.is_true(ok, tostring(block))
      assert.is_nil(block)
      assert.equal("string", type(note))
    end
  end)

  it("keeps the newest messages within the bounds, names authors, leaves out the bot and the ask", function()
    local body = { ok = true, messages = {
      { ts = "1.0", user = "U1", text = "oldest" }, { ts = "2.0", user = "U1", text = "two" },
      { ts = "3.0", user = "U2", text = "three" }, { ts = "3.5", bot_id = "B1", text = "a card" },
      { ts = "4.0", user = "U2", text = "four" }, { ts = "5.0", user = "U1", text = "the ask" },
    } }
    local block, _, n = context.thread_block(api(body, { U1 = { ok = true, user = { real_name = "Ana" } } }), POL,
      { channel = "C1", thread_ts = "1.0", ask_ts = "5.0", names = {} })
    assert.equal(3, n)
    assert.equal("Earlier messages in this Slack thread, oldest first (the 1 oldest left out):\n"
      .. "Ana: two\nU2: three\nU2: four", block.text)
  end)

  it("on a later run gives the messages since the bot's latest card, without mentions of the bot", function()
    local body = { ok = true, messages = {
      { ts = "1.0", user = "U1", text = "<@U0BOT> the first ask" }, { ts = "1.5", user = "U0BOT", bot_id = "B1", text = "a card" },
      { ts = "2.0", user = "U2", text = "seen by nobody yet" }, { ts = "2.5", user = "U1", text = "<@U0BOT> went to the run" },
      { ts = "3.0", user = "U2", text = "<@U1> a person's mention" }, { ts = "4.0", user = "U1", text = "<@U0BOT> the ask" },
    } }
    local block, _, n = context.thread_block(api(body, {}), POL,
      { channel = "C1", thread_ts = "1.0", ask_ts = "4.0", names = {}, first = false })
    assert.equal(2, n)
    assert.equal("Messages posted in this Slack thread since the previous run, oldest first:\n"
      .. "U2: seen by nobody yet\nU2: <@U1> a person's mention", block.text)
    -- no card of the bot before the ask: nothing is new
    body.messages[2] = { ts = "1.5", user = "U2", text = "hm" }
    assert.is_nil((context.thread_block(api(body, {}), POL,
      { channel = "C1", thread_ts = "1.0", ask_ts = "4.0", names = {}, first = false })))
  end)
end)

describe("slack context: where the bot token may go", function()
  local file_url = require("switchboard.fronts.slack.file_url")

  it("allows Slack's file host and the configured API's origin, nothing else", function()
    local local_api = file_url.origins("http://127.0.0.1:4567/api")
    local slack = file_url.origins("https://slack.com/api")
    local gov = file_url.origins("https://slack-gov.com/api")
    local cases = {
      { "https://files.slack.com/files-pri/T1-F1/a.png", true, true },
      { "https://FILES.slack.com:443/files-pri/T1-F1/a.png?x=1", true, true },
      { "http://127.0.0.1:4567/files-pri/T1-F1/a.txt?download=1", true, false },
      { "http://127.0.0.1:4568/files-pri/T1-F1/a.txt", false, false },   -- another port
      { "http://127.0.0.2:4567/files-pri/T1-F1/a.txt", false, false },   -- another loopback address
      { "https://127.0.0.1:4567/files-pri/a.txt", false, false },        -- https where http is configured
      { "http://files.slack.com/files-pri/a.png", false, false },        -- http to Slack's host
      { "https://files.slack.com@127.0.0.2/a.png", false, false },       -- userinfo
      { "https://x@files.slack.com/a.png", false, false },
      { "https://files.slack.com./a.png", false, false },
      { "https://files.slack.com:0443/a.png", false, false },
      { "https://files.slack.com%2e127.0.0.2/a.png", false, false },
      { "https://files.slack.com\\@127.0.0.2/a.png", false, false },
      { "https://files.slack.com /a.png", false, false },
      { "https://files.slack.com#@127.0.0.2/", false, false },           -- no path: an odd form
      { "https://files.slack.com?@127.0.0.2/", false, false },
      { "//files.slack.com/a.png", false, false },
      { "HTTPS://files.slack.com/a.png", false, false },
      { "ftp://files.slack.com/a.png", false, false },
      { "https://slack.com/api/files.info", false, true },
      { "https://files.slack-gov.com/a.png", false, false },
      { "https://evil.files.slack.com/a.png", false, false },
    }
    for _, c in ipairs(cases) do
      assert.equal(c[2], file_url.allowed(c[1], local_api), "local API: " .. c[1])
      assert.equal(c[3], file_url.allowed(c[1], slack), "slack.com: " .. c[1])
    end
    assert.is_true(file_url.allowed("https://files.slack-gov.com/a.png", gov))
    assert.is_false(file_url.allowed("http://127.0.0.1:4567/a", gov))
  end)

  local function recorder(answers)
    local seen = {}
    return seen, function(a)
      seen[#seen + 1] = { url = a.url, authorization = a.headers.authorization }
      local r = answers[#seen] or { 200, { ["content-type"] = "text/plain" }, "hello" }
      return r[1], r[2], r[3]
    end
  end
  local API = { token = "xoxb-test", deadline_ms = 1000, url = "http://127.0.0.1:4567/api" }

  it("fetches nothing from an address that is not Slack's, and says so", function()
    for _, mime in ipairs({ "text/plain", "image/png" }) do
      local seen, request = recorder({})
      local block, note = context.file_block(API, POL, { request = request },
        { name = "x", mimetype = mime, url_private_download = "http://127.0.0.2:4567/files-pri/T-F/x" })
      assert.is_nil(block)
      assert.equal("x not fetched: not a Slack file URL", note)
      assert.equal(0, #seen)
    end
  end)

  it("follows a redirect only to Slack, without the token", function()
    local seen, request = recorder({ { 302, { location = "/files-pri/T-F/elsewhere" }, "" } })
    local block = context.file_block(API, POL, { request = request },
      { name = "x", mimetype = "text/plain", url_private_download = "http://127.0.0.1:4567/files-pri/T-F/x" })
    assert.truthy(block)
    assert.same({ { url = "http://127.0.0.1:4567/files-pri/T-F/x", authorization = "Bearer xoxb-test" },
                  { url = "http://127.0.0.1:4567/files-pri/T-F/elsewhere" } }, seen)

    seen, request = recorder({ { 302, { location = "http://127.0.0.2:4567/steal" }, "" } })
    local none, note = context.file_block(API, POL, { request = request },
      { name = "x", mimetype = "text/plain", url_private_download = "http://127.0.0.1:4567/files-pri/T-F/x" })
    assert.is_nil(none)
    assert.equal("x not fetched: not a Slack file URL (Slack redirected it elsewhere)", note)
    assert.equal(1, #seen)

    seen, request = recorder({ { 302, { location = "/a" }, "" }, { 302, { location = "/b" }, "" },
                               { 302, { location = "/c" }, "" } })
    none, note = context.file_block(API, POL, { request = request },
      { name = "x", mimetype = "text/plain", url_private_download = "http://127.0.0.1:4567/files-pri/T-F/x" })
    assert.is_nil(none)
    assert.equal("x was not read: it could not be fetched (more than 2 redirects)", note)
    assert.equal(3, #seen)
  end)
end)
