-- A free-text ask in the dispatcher: the run of one agent in one thread, from its card's first
-- line to its last. The dispatcher queues the ask like a command (one at a time per thread)
-- and hands it here; this file provisions the thread's executor the same way, prepares the
-- repository, runs agent/run.lua and ends the card.
--
--   agent_run.run(dispatcher, thread, ask)     in the thread's worker task
--   agent_run.repo_in(text) → "OWNER/REPO" | nil  the repository a free-text ask names
local core = require("switchboard.core")
local client_mod = require("switchboard.agent.client")
local repo_mod = require("switchboard.agent.repo")
local instructions = require("switchboard.agent.instructions")
local facts_mod = require("switchboard.agent.facts")
local tools_mod = require("switchboard.agent.tools")
local publish = require("switchboard.agent.publish")
local run = require("switchboard.agent.run")
local transcript = require("switchboard.agent.transcript")
local identity = require("switchboard.github.identity")
local pulls = require("switchboard.github.pulls")
local parser = require("switchboard.dispatch.parser")

local M = {}

-- A GitHub URL anywhere, or OWNER/REPO right after "in", "on", "of", "for", "repo" or
-- "repository" ("the tests in octo/app fail"): a bare a/b elsewhere is too often prose
-- ("and/or", "src/main").
function M.repo_in(text)
  for url in text:gmatch("https?://github%.com/[%w._/-]+") do
    local owner, name = url:match("^https?://github%.com/([^/]+)/([^/]+)")
    if owner then
      name = name:gsub("%.+$", ""):gsub("%.git$", "")
      if parser.valid_repo(owner .. "/" .. name) then return owner .. "/" .. name end
    end
  end
  local words = {}
  for w in text:gmatch("%S+") do words[#words + 1] = w end
  local lead = { ["in"] = true, on = true, of = true, ["for"] = true, repo = true, repository = true }
  for i = 2, #words do
    if lead[words[i - 1]:lower()] then
      local w = words[i]:gsub("^[<(`'\"]+", ""):gsub("[>)`'\",;:!?]+$", ""):gsub("%.$", "")
      if w:find("/", 1, true) and parser.valid_repo(w) then return w end
    end
  end
  return nil
end

local function finish(d, ask, state, answer, problem)
  ask.card:ended(state, d.now_ms(), answer, problem)
  d:finish_card(ask)
end

local function workspace_of(built)
  local inner = built.tracker and built.tracker.inner
  return inner and inner.dir or nil
end

local function make_client(d, snap)
  local factory = d.model_client or function(s) return client_mod.from_env(os.getenv, s) end
  local ok, c, why = pcall(factory, snap)
  if not ok then return nil, "the model client could not be made: " .. tostring(c) end
  return c, why
end

-- Whether an ask's agent publishes at all: a repository, an agent whose policy lets it open
-- pull requests, never a readonly one.
function M.publishes_at_all(ask)
  local def = ask.agent_def
  return ask.repo ~= nil and def.pull_requests == true and not def.readonly
end

-- Why a run that ended in this state stopped before it was done (its pull request is then a
-- draft), in words; nil for a finished run.
local UNFINISHED = {
  turns = "it used its turn limit", spend = "it reached a spend cap",
  budget = "its time ran out", stopped = "it was stopped",
}

-- What a run that ended in state publishes: "ready" (done), "draft" (stopped before it was
-- done, as policy's pull_request.unfinished says), or nil. A shutdown publishes nothing.
function M.publishes(d, ask, state)
  if not M.publishes_at_all(ask) then return nil end
  if d.shutdown and d.shutdown.aborted then return nil end
  if state == "done" and not ask.stop.aborted then return "ready" end
  local stopped = ask.stop.aborted and "stopped" or state
  if UNFINISHED[stopped] and ask.snap.agents.pull_request.unfinished == "draft" then return "draft", UNFINISHED[stopped] end
  if UNFINISHED[stopped] then
    ask.card:add_note(("no pull request: the run stopped before it was done (%s), and pull_request.unfinished "
      .. "in policies/agents.lua is \"none\"; its changes stay in the thread's workspace for a follow-up"):format(UNFINISHED[stopped]))
  end
  return nil
end

function M.publish(d, thread, ask, built, t, answer, deadline, draft)
  local c = ask.card
  c:tool("git: committing and pushing the changes")
  d:refresh(ask)
  -- a run stopped by `stop` or by its clock still publishes its draft: with a signal of its
  -- own (a shutdown still ends it) and policy's grace
  local signal, remaining = ask.stop, deadline - d.now_ms()
  if draft then
    signal = core.signal(d.shutdown)
    remaining = math.max(remaining, ask.snap.agents.pull_request.publish_grace_ms)
  end
  local ok, res, problem, kind = pcall(publish.run, {
    executor = built.executor, snap = ask.snap, repo = ask.repo, thread = thread.name,
    thread_key = d.thread_key(thread.name), link = ask.link, ask = ask.text, agent = ask.agent,
    answer = answer, turns = c.turns, creds = d.build_opts.credentials, scope = ask.agent_def.token_scope,
    signal = signal, remaining_ms = remaining, draft = draft,
  })
  c:tool_done()
  if not ok then res, problem, kind = nil, "internal error while publishing: " .. tostring(res), "internal" end
  if res and res.state == "published" then
    c.pull_request = { url = res.pr.url, number = res.pr.number, action = res.pr.action, branch = res.branch,
                       draft = res.pr.draft }
    thread.branch, thread.pr = res.branch, { number = res.pr.number, url = res.pr.url }
    d:remember("thread", d.record and d.record.bind, thread.name,
      { branch = res.branch, pr_number = res.pr.number, pr_url = res.pr.url })
  elseif res == nil then
    c.publish_problem = problem
  end
  t:write{ type = "publish", state = res and res.state or "failed", kind = kind, branch = res and res.branch,
           sha = res and res.sha, pull_request = c.pull_request, problem = problem, draft = draft }
  core.log(res and "info" or "warn", "agent.publish", { thread = thread.name, repo = ask.repo,
    state = res and res.state or "failed", kind = kind, pr = c.pull_request and c.pull_request.number,
    draft = draft ~= nil })
end

-- A run a review comment started answers on the pull request: what it pushed (or why
-- nothing), and its summary (policies/agents.lua review_comments.reply).
function M.reply_on_review(d, thread, ask, state, answer, problem)
  local c, snap, card = ask.review, ask.snap, ask.card
  local pr = card.pull_request
  local what
  if pr then
    what = ("I pushed the changes to `%s` (pull request updated)."):format(pr.branch)
  elseif card.publish_problem then
    what = "I could not push the changes: " .. card.publish_problem
  else
    what = ("I changed nothing (the run ended: %s%s)."):format(state, problem and (" — " .. problem) or "")
  end
  local body = require("switchboard.policy.template").fill(snap.agents.review_comments.reply, {
    user = tostring(c.user), what = what,
    summary = (answer and answer ~= "") and answer or "(no summary)",
  })
  local creds = d.build_opts.credentials
  local envs, err = creds and creds:resolve_envs(ask.agent_def.token_scope, { repo = c.repo })
  local ok
  if envs and envs.GH_TOKEN then
    ok, err = pulls.comment{ api_url = creds:api_url(), token = envs.GH_TOKEN, repo = c.repo,
      number = math.tointeger(c.pr_number) or c.pr_number, body = body, timeout_ms = snap.github.request_timeout_ms }
  end
  if ok then
    card:add_note(("replied on pull request #%s"):format(tostring(c.pr_number)))
  else
    card:add_note(("the reply on pull request #%s failed: %s"):format(tostring(c.pr_number),
      tostring(err or "no GitHub token"):match("^[^\n]*")))
  end
  core.log(ok and "info" or "warn", "agent.review_reply", { thread = thread.name, pr = c.pr_url, ok = ok == true })
end

-- The front's context for this run (Slack: the thread's earlier messages on its first run, the
-- ask's files): content blocks put before the ask's text, notes on the card.
function M.gather_context(d, thread, ask)
  if not ask.prepare then return end
  local history = M.history(d, thread)
  local ok, blocks, notes = pcall(ask.prepare, history == nil or #history == 0)
  if not ok then
    core.log("error", "agent.context_failed", { thread = thread.name, error = tostring(blocks) })
    ask.card:add_note("the context from the front could not be read: " .. tostring(blocks):match("^[^\n]*"))
    return
  end
  for _, n in ipairs(notes or {}) do ask.card:add_note(n) end
  if blocks and #blocks > 0 then
    local content = {}
    for i, b in ipairs(blocks) do content[i] = b end
    content[#content + 1] = { type = "text", text = ask.text }
    ask.content = content
  end
end

-- The thread's conversation so far: this process's copy, or the record's after a restart.
function M.history(d, thread)
  if thread.history == nil and d.record then
    thread.history = d:remember("conversation", d.record.conversation, thread.name)
    if thread.history then thread.mark = { refs = { table.unpack(thread.history) } } end
  end
  return thread.history
end

-- After each turn and at the end: the conversation as sent is the thread's (and the record's,
-- committed before the next request goes out).
function M.keep_conversation(d, thread, messages)
  thread.history = messages
  if d.record then
    thread.mark = d:remember("conversation", d.record.save_conversation, thread.name, messages, thread.mark)
  end
end

-- The run's row in the record, and its transcript lines going there too (the page reads them).
function M.record_start(d, thread, ask, built, t)
  if not d.record then return nil end
  local rrun = d:remember("run_start", d.record.run_start, { thread = thread.name, ask = ask.text,
    agent = ask.agent, model = ask.agent_def.model, user = ask.user, backend = built.backend })
  if not rrun then return nil end
  -- the thread's backend, and the key its sandbox or resident instance is bound by
  d:remember("thread", d.record.bind, thread.name, { backend = built.backend, instance = d.thread_key(thread.name) })
  local url = d.page_url and d.page_url(rrun.token)
  if url then
    ask.card.page_url = url
    ask.card:add_note("run page: " .. url)
  end
  local write = t.write
  -- events are not waited for (the FIFO keeps their order, and the conversation's save after
  -- each turn, which is waited for, commits after them): the run does not pay two more
  -- thread-pool round trips per turn
  t.write = function(self, rec)
    write(self, rec)
    core.go(function() d:remember("event", d.record.event, rrun, rec) end)
  end
  return rrun
end

function M.run(d, thread, ask)
  local c = ask.card
  local snap = ask.snap
  if ask.stop.aborted then
    c:cancelled(ask.stop.reason or "stopped", d.now_ms())
    return d:finish_card(ask)
  end
  local client, why = make_client(d, snap)
  if not client then return finish(d, ask, "no_key", nil, why) end

  c:provisioning()
  d:refresh(ask)
  local built, err = d:executor_for(thread, ask)
  if not built then
    c:unprovisioned(err, d.now_ms())
    return d:finish_card(ask)
  end
  c:provisioned(built.backend, built.notes or built.note)
  local no_token = identity.notice_for(d.build_opts.credentials, ask.agent_def)
  if no_token then c:add_note(no_token) end

  c:running(d.now_ms())
  local ticker_done = core.signal()
  core.go(function()
    while core.sleep(snap.timeouts.console.refresh_ms, ticker_done) do d:refresh(ask) end
  end)
  -- the run's clock starts when it runs (a follow-up queued behind a long run keeps its budget)
  local deadline = (ask.started_ms or d.now_ms()) + ask.agent_def.max_run_minutes * 60 * 1000
  local t = transcript.open(d.transcripts_dir, d.thread_key(thread.name), ask.id)
  if t.path then c.transcript_path = t.path end
  local rrun = M.record_start(d, thread, ask, built, t)
  core.log("info", "agent.run", { thread = thread.name, agent = ask.agent, backend = built.backend, ask = ask.id })

  local state, answer, problem, guide, cost
  if ask.repo then
    c:preparing("git: " .. ask.repo)
    d:refresh(ask)
    local branch = publish.branch(snap, thread.name, d.thread_key(thread.name))
    local done, prep_problem, kind, on_branch = repo_mod.prepare(built.executor, snap, ask.repo, {
      signal = ask.stop, remaining_ms = deadline - d.now_ms(), branch = branch,
    })
    t:write{ type = "repository", repo = ask.repo, outcome = done or kind, problem = prep_problem }
    if done then
      c:add_note(done .. " " .. ask.repo .. (on_branch and (" on the thread's branch " .. on_branch) or ""))
      d:remember("thread", d.record and d.record.bind, thread.name, { repo = ask.repo, backend = built.backend })
      c.state = "running"
      guide = instructions.read(built.executor, snap, { signal = ask.stop, remaining_ms = deadline - d.now_ms() })
      if guide.note then c:add_note(guide.note) end
      t:write{ type = "instructions", files = guide.files }
    elseif kind == "stopped" or ask.stop.aborted then
      state = "stopped"
    elseif kind == "infra" then
      state, problem = "infra", prep_problem
    else
      state, problem = "clone_failed", prep_problem
    end
  end
  if not state then M.gather_context(d, thread, ask) end
  local facts
  if not state and #tools_mod.definitions(snap, ask.agent_def) > 0 then
    facts = facts_mod.gather(built.executor, snap, { repo = ask.repo,
      branch = M.publishes_at_all(ask) and publish.branch(snap, thread.name, d.thread_key(thread.name)) or nil,
      signal = ask.stop, remaining_ms = deadline - d.now_ms() })
    t:write{ type = "environment", facts = facts }
  end
  if not state then
    local ok, s, a, p, res = xpcall(run.run, debug.traceback, {
      snap = snap, def = ask.agent_def, agent = ask.agent, executor = built.executor,
      tracker = built.tracker, client = client, card = c, signal = ask.stop, deadline_ms = deadline,
      ask = ask.content or ask.text, repo = ask.repo, workspace = workspace_of(built), transcript = t,
      now_ms = d.now_ms, instructions = guide, facts = facts, history = M.history(d, thread),
      on_turn = function(messages)
        M.keep_conversation(d, thread, messages)
        -- the cost so far, so a run the bot dies in still counts towards the caps after a restart
        if rrun and c.cost_usd then core.go(function() d:remember("run_cost", d.record.run_cost, rrun, c.cost_usd) end) end
      end,
      thread = thread.name, accounts = d.accounts,
    })
    if ok then
      state, answer, problem = s, a, p
      if res and res.messages then M.keep_conversation(d, thread, res.messages) end
      cost = res and res.cost
    else
      core.log("error", "agent.internal_error", { thread = thread.name, error = tostring(s) })
      state, problem = "model_error", "internal error in the agent run: " .. tostring(s):match("^[^\n]*")
    end
  end
  local publishes, unfinished = M.publishes(d, ask, state)
  if publishes then M.publish(d, thread, ask, built, t, answer, deadline, unfinished) end
  if ask.review then M.reply_on_review(d, thread, ask, state, answer, problem) end
  -- with a record, the conversation lives there between runs: a bot with many threads does
  -- not hold every conversation (images included) in memory; the next run reads it back
  if d.record and thread.mark then thread.history, thread.mark = nil, nil end
  ticker_done:abort("finished")
  if state == "stopped" or ask.stop.aborted then
    state = "stopped"
    d:release(thread, ask.agent, "always")
  elseif built.tracker:tripped() then
    d:release(thread, ask.agent, "always")
  end
  t:write{ type = "run_end", state = state, turns = c.turns, tokens_in = c.tokens_in,
           tokens_out = c.tokens_out, cache_read = c.cache_read, cache_write = c.cache_write, cost_usd = c.cost_usd, duration_ms = d.now_ms() - (c.started_ms or d.now_ms()),
           problem = problem, answer = answer }
  t:close()
  if rrun then
    d:remember("run_end", d.record.run_end, rrun, { outcome = state, turns = c.turns, tokens_in = c.tokens_in,
      tokens_out = c.tokens_out, cost = cost, answer = answer, problem = problem or c.publish_problem,
      pr_url = c.pull_request and c.pull_request.url })
  end
  core.log("info", "agent.done", { thread = thread.name, agent = ask.agent, ask = ask.id, state = state,
                                   turns = c.turns, tokens_in = c.tokens_in, tokens_out = c.tokens_out,
                                   cost_usd = c.cost_usd })
  finish(d, ask, state, answer, problem)
end

return M
