-- Publishing end to end (docs/agent.md "Pull requests", "Iteration from review comments"): the
-- real `switchboard console` and `switchboard slack` with a GitHub App configured against the
-- loopback stand-ins (tests/support/craft.lua) — drafts for runs that stop before they are
-- done, only intended files committed, the description kept and added to; publishing failures
-- made the way GitHub makes them (a GH006 pre-receive hook, a push racing the run, a revoked
-- token, a repository the App cannot see); a signed review comment starting a run that pushes
-- to the same branch and replies, while unsigned, forged, replayed and stale deliveries run
-- nothing.
local core = require("switchboard.core")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local SL = require("support.slack")
local craft = require("support.craft")

local sh, cat, count, cjson_text = craft.sh, craft.cat, craft.count, craft.cjson_text
local use, edit_then_say = craft.use, craft.edit_then_say

describe("agent publishing: drafts, failures, review comments", function()
  local state, gitport, m, w, H

  before_each(function()
    state = files.tmpdir()
    -- the remote's address is in git's words of every refusal: its port has 403 in it, which
    -- is no status (a 401 reached the card as a 403 once at load; such a port does it every time)
    gitport = craft.setup(state, { port_with = "403" })
    H = { state = state, gitport = gitport }
  end)

  after_each(function()
    craft.teardown(state, m or H.m)
    m, w = nil, nil
  end)

  -- One console session with the App configured; agents_edit changes policies/agents.lua.
  -- → stdout, stderr, the model's requests, the argv scan's leak (or nil) and scan count
  local function session(answers, lines, agents_edit)
    local res = table.pack(craft.session(H, answers, lines, agents_edit))
    m, w = H.m, H.w
    return table.unpack(res, 1, res.n)
  end
  local function remote(args) return craft.remote(state, args) end
  local function no_secret_anywhere(out, err, leak) return craft.no_secret_anywhere(state, w, out, err, leak) end
  local function push_files(list) return craft.push_files(state, list) end
  local function rg_barrier() return craft.rg_barrier(state) end

  it("a run stopped at its turn limit opens a draft listing its files, without scratch or ignored files; the follow-up adds to it and makes it ready", function()
    push_files{ [".gitignore"] = "build/\n" }
    local out, err, _, leak = session({
      { content = {
        use("write_file", { path = ".git/switchboard-scratch/notes.txt", content = "my plan\n" }),
        use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }),
        use("bash", { command = "mkdir -p build && echo junk > build/out.o && echo notes > .git/switchboard-scratch/log" }),
      } },
      { content = { use("write_file", { path = "NEW.md", content = "new\n" }) } },
      -- the follow-up finishes
      { content = { use("write_file", { path = "DONE.md", content = "done\n" }) } },
      { content = { { type = "text", text = "Finished: the typo is fixed and NEW.md added." } } },
    }, { "agent:coding fix the typo in README.md in acme/api", "agent:coding finish it" },
    function(src) return (src:gsub("max_turns = 80,", "max_turns = 2,", 1)) end)
    local first = cards.find(out, "fix the typo")
    assert.is_not_nil(first, out .. err)
    assert.matches("⏹ stopped at the turn limit (2)", first, 1, true)
    assert.matches("⇢ draft pull request #1 opened: https://github.com/acme/api/pull/1", first, 1, true)
    local pr = w.gh.pulls["acme/api"][1]
    local body1 = pr.bodies[1]
    assert.matches("**Draft:** the run stopped before the agent said it was done (it used its turn limit)", body1, 1, true)
    assert.matches("## Files changed\n\n- `NEW.md` (added)\n- `README.md` (modified)\n", body1, 1, true)
    -- only the intended changes: no scratch file, nothing .gitignore'd
    local tree = remote("ls-tree -r --name-only " .. pr.head)
    assert.matches("NEW.md", tree, 1, true)
    assert.not_matches("build/", tree, 1, true)
    assert.not_matches("notes.txt", tree, 1, true)
    assert.not_matches("switchboard-scratch", tree, 1, true)
    -- the follow-up: the same pull request, its description kept and added to, marked ready
    local second = cards.find(out, "finish it")
    assert.matches("✓ done after 2 turns", second, 1, true)
    assert.matches("⇢ pull request #1 updated: https://github.com/acme/api/pull/1", second, 1, true)
    assert.equal(1, #w.gh.pulls["acme/api"])
    assert.is_false(pr.draft)
    assert.equal(1, #w.gh.graphql_calls)
    assert.equal("write", w.gh.graphql_calls[1].scope)
    assert.equal(body1, pr.body:sub(1, #body1)) -- the first run's section, as it was
    assert.matches("\n\n---\n\nAsked of agent `coding` in thread main:\n\n> finish it", pr.body, 1, true)
    assert.matches("Finished: the typo is fixed and NEW.md added.", pr.body, 1, true)
    assert.matches("## Files changed\n\n- `DONE.md` (added)\n", pr.body:sub(#body1), 1, true) -- this run's own
    no_secret_anywhere(out, err, leak)
  end)


  it("a protected branch: GitHub's pre-receive refusal (GH006) reaches the card with what to do", function()
    local hook = state .. "/repos/acme/api.git/hooks/pre-receive"
    local f = assert(io.open(hook, "w"))
    f:write([[#!/bin/sh
while read old new ref; do
  case "$ref" in refs/heads/switchboard/*)
    echo "error: GH006: Protected branch update failed for $ref." >&2
    echo "error: Changes must be made through a pull request." >&2
    exit 1;;
  esac
done
]])
    f:close()
    sh("chmod +x " .. hook)
    local out, err, _, leak = session(edit_then_say(), { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("✗ no pull request — GitHub refused the push to switchboard/main%-%x+ in acme/api: the branch is protected %(GH006%)", c)
    assert.matches("Change pull_request.branch in policies/agents.lua", c, 1, true)
    assert.is_nil(w.gh.pulls["acme/api"])
    no_secret_anywhere(out, err, leak)
  end)

  it("a rejected push: someone pushed to the thread's branch meanwhile", function()
    local branch = require("switchboard.agent.publish").branch(policies.shipped(), "main", "console:main")
    local other = ("git clone -q %s/repos/acme/api.git %s/other && cd %s/other && git checkout -q -b %s"
      .. " && echo theirs > theirs.txt && git add . && git -c user.name=o -c user.email=o@x commit -qm theirs"
      .. " && git push -q origin %s"):format(state, state, state, branch, branch)
    local out, err, _, leak = session(edit_then_say(other), { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ no pull request — The push to " .. branch:gsub("%-", "%%-") .. " in acme/api was rejected: the branch on GitHub has commits this workspace lacks", c)
    assert.matches("theirs.txt", remote("ls-tree -r --name-only " .. branch), 1, true) -- theirs is kept
    assert.is_nil(w.gh.pulls["acme/api"])
    no_secret_anywhere(out, err, leak)
  end)

  it("an expired token: GitHub stops accepting the run's token before the push", function()
    -- the git stand-in reads the minted tokens at each request: emptying the file is GitHub
    -- forgetting them (an installation token expires after an hour, or is revoked)
    local out, err, _, leak = session(edit_then_say((": > %s/tokens"):format(state)),
      { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ no pull request — GitHub did not accept the token for the push to acme/api (401)", c, 1, true)
    assert.matches("ask again", c, 1, true)
    -- the push's first request, with the token GitHub no longer knows
    assert.matches("GET /acme/api.git/info/refs 401 auth=bad", files.read(state .. "/gitd/log") or "", 1, true)
    no_secret_anywhere(out, err, leak)
  end)

  it("a repository the App cannot see: the run stops before its first turn, saying where to install the App", function()
    sh(("cd %s && git clone -q --bare repos/acme/api.git repos/acme/lib.git"):format(state))
    local out, err, reqs, leak = session({ { content = { { type = "text", text = "never" } } } },
      { "agent:coding fix the typo in README.md in acme/lib" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ not run — the repository could not be cloned", c, 1, true)
    assert.matches("don't have access to acme/lib", c, 1, true)
    assert.matches("add acme/lib to the selected ones", c, 1, true)
    assert.not_matches("sandbox failure", c, 1, true)
    assert.equal(0, #reqs)
    no_secret_anywhere(out, err, leak)
  end)

  it("a signed review comment on the bot's pull request starts a run that pushes to the same branch and replies; unsigned or replayed does nothing", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local WEBHOOK_SECRET = "whsec-" .. core.crypto.hex(core.crypto.random_bytes(12))
    local T = "1700000400.000100"
    local r = {}
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) } },
        { content = { { type = "text", text = "Fixed both." } } },
        -- the run the review comment starts
        { content = { use("edit_file", { path = "README.md", old_text = "See the docs.\n", new_text = "See the docs.\nThanks.\n" }) } },
        { content = { { type = "text", text = "Added a thanks line." } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, args = { "--listen", "127.0.0.1:0" }, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET,
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding fix the typo in README.md in acme/api" })
      SL.wait(function()
        for _, c in ipairs(st:cards(T)) do
          if SL.is_final(c) and SL.card_text(c):find("pull request #1 opened", 1, true) then return c end
        end
      end, "the first run's pull request", 90000)
      local pr = w.gh.pulls["acme/api"][1]
      local function delivery(created_s)
        return require("cjson").encode{
          action = "created", repository = { full_name = "acme/api" },
          pull_request = { number = 1, html_url = pr.html_url, head = { ref = pr.head } },
          comment = { id = 9001, body = "@switchboard please thank the reader after the docs line", user = { login = "rev" },
                      author_association = "COLLABORATOR", path = "README.md", line = 2,
                      created_at = os.date("!%Y-%m-%dT%H:%M:%SZ", created_s),
                      updated_at = os.date("!%Y-%m-%dT%H:%M:%SZ", created_s),
                      diff_hunk = "@@ -1,2 +1,2 @@\n-See teh docs.\n+See the docs." },
        }
      end
      local body = delivery(os.time())
      local function post(headers)
        headers["content-type"] = "application/json"
        headers["x-github-event"] = headers["x-github-event"] or "pull_request_review_comment"
        return core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/github/webhook"):format(bot.events_port),
                                  body = body, headers = headers, deadline_ms = 10000 }
      end
      local function sig(secret) return "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body)) end
      r.unsigned = post{ ["x-github-delivery"] = "d-0" }
      r.forged = post{ ["x-github-delivery"] = "d-0", ["x-hub-signature-256"] = sig("not-the-secret") }
      r.signed = post{ ["x-github-delivery"] = "d-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function()
        local finals = 0
        for _, c in ipairs(st:cards(T)) do if SL.is_final(c) then finals = finals + 1 end end
        return finals == 2 and w.gh.comments and w.gh.comments["acme/api"]
      end, "the review comment's run and its reply", 90000)
      -- the same delivery again (a redelivery, or a captured request replayed): nothing runs
      r.replayed = post{ ["x-github-delivery"] = "d-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function() return bot.err:find("github.duplicate_delivery", 1, true) end, "the replay noticed", 30000)
      -- a captured delivery sent again under a new id, two hours on: too old to be a new comment
      body = delivery(os.time() - 2 * 3600)
      r.old = post{ ["x-github-delivery"] = "d-2", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function() return bot.err:find("older than the", 1, true) end, "the old comment refused", 30000)
      r.cards = st:cards(T)
      r.reqs = m:requests()
      r.requests = #r.reqs
      bot:signal("TERM")
      bot:wait()
      r.err = bot.err
      st:close()
      w.close()
    end)
    assert.equal(401, r.unsigned)
    assert.equal(401, r.forged)
    assert.equal(202, r.signed)
    assert.equal(202, r.replayed)
    assert.equal(202, r.old)
    assert.matches("github.webhook_refused", r.err, 1, true)
    assert.equal(2, #r.cards) -- one card per run: the replay and the refused ones started none
    assert.equal(4, r.requests)
    local second = SL.card_text(r.cards[2])
    assert.matches("started by a review comment from @rev on pull request #1", second, 1, true)
    assert.matches("pull request #1 updated", second, 1, true)
    assert.matches("replied on pull request #1", second, 1, true)
    -- the model got the comment, its file and line and the diff hunk
    local msgs = r.reqs[3].body.messages
    local ask = model.text_of(msgs[#msgs])
    assert.matches("A review comment by @rev on pull request #1 on README.md line 2 (https://github.com/acme/api/pull/1):", ask, 1, true)
    assert.matches("> @switchboard please thank the reader after the docs line", ask, 1, true)
    assert.matches("```diff\n@@ -1,2 +1,2 @@\n-See teh docs.\n+See the docs.\n```", ask, 1, true)
    local pr = w.gh.pulls["acme/api"][1]
    -- the same branch, a new commit on it
    assert.equal("Welcome to the project.\nSee the docs.\nThanks.\n", remote("show " .. pr.head .. ":README.md"))
    assert.equal(2, select(2, remote("log --format=%H main.." .. pr.head):gsub("\n", "")))
    local reply = w.gh.comments["acme/api"][1][1]
    assert.matches("^@rev I pushed the changes to `" .. pr.head:gsub("%-", "%%-") .. "`", reply.body)
    assert.matches("Added a thanks line.", reply.body, 1, true)
    assert.equal("write", reply.scope)
    assert.is_nil(w.leak(r.err))
    assert.not_matches(WEBHOOK_SECRET, r.err, 1, true)
  end)

  it("a run stopped with the Stop button still publishes what it did, as a draft", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local T = "1700000500.000100"
    local text, final_pr
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) } },
        -- the second turn's answer is held: the Stop lands in it
        { content = { { type = "text", text = "never sent" } }, hold_ms = 60000, touch = state .. "/held" },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding fix the typo in README.md in acme/api" })
      SL.wait(function() return files.read(state .. "/held") end, "the second turn under way", 90000)
      st:envelope("interactive", SL.stop_press(T))
      local final = SL.wait(function()
        for _, c in ipairs(st:cards(T)) do
          if SL.is_final(c) and SL.card_text(c):find("pull request", 1, true) then return c end
        end
      end, "the stopped run's card with its pull request", 90000)
      text = SL.card_text(final)
      final_pr = w.gh.pulls["acme/api"] and w.gh.pulls["acme/api"][1]
      bot:signal("TERM")
      bot:wait()
      st:close()
      w.close()
    end)
    assert.matches("■ stopped", text, 1, true)
    assert.matches("draft pull request #1 opened", text, 1, true)
    assert.is_not_nil(final_pr)
    assert.is_true(final_pr.draft)
    assert.matches("**Draft:** the run stopped before the agent said it was done (it was stopped)", final_pr.body, 1, true)
    assert.equal("Welcome to the project.\nSee the docs.\n", remote("show " .. final_pr.head .. ":README.md"))
  end)
end)
