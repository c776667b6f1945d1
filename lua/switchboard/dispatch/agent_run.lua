-- A free-text ask as a kind of run: one agent in one thread. The dispatcher queues it like a
-- command (one at a time per thread) and runs it through the same lifecycle
-- (dispatch/dispatcher.lua: provision → stop re-check → run → release); these are the
-- agent's steps in it: the model client before provisioning, then the repository, the
-- context, agent/run.lua and the pull request, and after the release the card's end, the
-- transcript's and the record's. Nothing but the model is on the first request's path that
-- can be elsewhere (issue 36): the front's context is fetched beside the clone, a warm
-- workspace's fetch runs beside the first request (its tools wait for it), the instruction
-- files and the run's facts are read at the same time, and the toolchains are asked once per
-- image (agent/facts.lua).
--
--   agent_run.before(d, run) → true | false (the card has ended: no model credential)
--   agent_run.run(d, run)           in the thread's worker task, the executor provisioned
--   agent_run.raised(d, run, why)   the run raised (a bug; logged by the lifecycle)
--   agent_run.ended(d, run)         after the release
--   agent_run.repo_in(text) → "OWNER/REPO" | nil  the repository a free-text ask names
-- run: {thread, ask, built, released}; the steps keep their own state on it (client,
-- transcript, record row, state, answer, problem, cost).
local core = require("switchboard.core")
local client_mod = require("switchboard.agent.client")
local repo_mod = require("switchboard.agent.repo")
local pushes = require("switchboard.dispatch.pushes")
local instructions = require("switchboard.agent.instructions")
local facts_mod = require("switchboard.agent.facts")
local tools_mod = require("switchboard.agent.tools")
local publish = require("switchboard.agent.publish")
local diff_mod = require("switchboard.agent.diff")
local agent = require("switchboard.agent.run")
local transcript = require("switchboard.agent.transcript")
local pulls = require("switchboard.github.pulls")
local parser = require("switchboard.dispatch.parser")
local pr_review = require("switchboard.dispatch.pr_review")

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

-- The agent's own provider (policies/agents.lua provider) when it names one.
local function make_client(d, snap, agent_def)
  local factory = d.model_client or function(s, def) return client_mod.from_env(os.getenv, s, def) end
  return factory(snap, agent_def)
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
  local res, err = publish.run{
    executor = built.executor, snap = ask.snap, repo = ask.repo, thread = thread.name,
    thread_key = d.thread_key(thread.name), link = ask.link, ask = ask.text, agent = ask.agent,
    answer = answer, turns = c.turns, creds = d.build_opts.credentials, scope = ask.agent_def.token_scope,
    signal = signal, remaining_ms = remaining, draft = draft, fixes = ask.issue and ask.issue.number,
  }
  c:tool_done()
  local problem, kind = err and tostring(err), err and err.kind
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

-- What the executor said about the thread's workspace on a wake (sandboxd: kept from its sleep,
-- or expired by the slept workspaces' budget; docs/sandboxd.md "Slept workspaces"), on the
-- card ("workspace expired (policy …): re-cloned acme/api on branch X" after a re-clone).
local function say_workspace(c, executor, done, on_branch, repo)
  local note = executor.take_workspace_note and executor:take_workspace_note()
  if not note then return end
  if note.state == "expired" and done == "cloned" then
    c:add_note(("%s: re-cloned %s on branch %s"):format(note.text, repo, on_branch or "(the default branch)"))
  else
    c:add_note(note.text)
  end
end

-- The front's context for this run (Slack: the thread's earlier messages on its first run, the
-- ask's files): content blocks put before the ask's text, notes on the card. It is fetched from
-- the run's start, beside the clone (issue 36: a cold thread's first request waits for the
-- slower of the two, not their sum); the function returned waits for it and applies it, so
-- its notes come after the repository's, as before.
function M.start_context(d, thread, ask)
  if not ask.prepare then return function() end end
  local got
  local done = core.signal()
  core.go(function()
    local history = M.history(d, thread)
    got = { pcall(ask.prepare, history == nil or #history == 0) }
    done:abort("done")
  end)
  return function()
    while not got do core.sleep(3600 * 1000, done) end
    M.apply_context(thread, ask, table.unpack(got, 1, 3))
  end
end

function M.apply_context(thread, ask, ok, blocks, notes)
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
  if url then ask.card.page_url = url end -- a View run button (Slack), a line (the console)
  if ask.user_name then
    core.go(function()
      local ok, name = pcall(ask.user_name)
      if ok and type(name) == "string" and name ~= ask.user then t:write{ type = "asker", user = ask.user, name = name } end
    end)
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

-- Before provisioning: a run without a model client ends at once (its card says how to set
-- the key), provisioning nothing.
function M.before(d, run)
  local client, why = make_client(d, run.ask.snap, run.ask.agent_def)
  if not client then
    run.ask.card:ended("no_key", d.now_ms(), nil, tostring(why))
    return false
  end
  run.client = client
  return true
end

-- Runs fns at the same time, each in a task of its own, and returns when all have ended; a
-- raise in one is raised here (with its traceback) once all have ended.
local function together(fns)
  local left, raised = #fns, nil
  local all_done = core.signal()
  for _, fn in ipairs(fns) do
    core.go(function()
      local ok, e = xpcall(fn, function(x) return core.is_error(x) and x or debug.traceback(tostring(x), 2) end)
      if not ok then raised = raised or e end
      left = left - 1
      if left == 0 then all_done:abort("done") end
    end)
  end
  while left > 0 do core.sleep(3600 * 1000, all_done) end
  if raised then error(raised, 0) end
end

-- A workspace that already has the repository is fetched beside the run, not before it: the
-- model's first request waits for no network but the model's (issue 36). The run's tools wait
-- for the fetch (run.workspace_ready), and so does the run's end (nothing is released or
-- published under a running fetch). A failed fetch is a note: the workspace's copy is used.
local function fetch_beside(d, run, deadline)
  local ask, built, t = run.ask, run.built, run.transcript
  local ready = core.signal(ask.stop)
  local done = false
  core.go(function()
    local ok, got, err = pcall(repo_mod.fetch, built.executor, ask.snap, ask.repo,
      { signal = ask.stop, remaining_ms = deadline - d.now_ms() })
    if not ok then got, err = nil, got end
    t:write{ type = "repository", repo = ask.repo, outcome = got or (type(err) == "table" and err.kind) or "error",
             problem = err and tostring(err) }
    if got then
      ask.card:add_note("fetched " .. ask.repo)
    elseif not ask.stop.aborted then
      ask.card:add_note(("the fetch of %s failed; the workspace's copy is used: %s"):format(ask.repo,
        tostring(err):match("^[^\n]*")))
    end
    done = true
    ready:abort("ready")
  end)
  run.workspace_ready = function(quiet)
    if done or ask.stop.aborted then return end
    if not quiet then ask.card:tool("waiting for the workspace: git fetch " .. ask.repo) end
    while not done and not ask.stop.aborted do core.sleep(3600 * 1000, ready) end
    if not quiet then ask.card:tool_done() end
  end
end

-- The repository, cloned in the thread's workspace (or found there, then fetched beside the
-- run). Returns nil, or the state the run ends in when the repository could not be made ready.
local function prepare_repo(d, run, deadline)
  local thread, ask, built, t = run.thread, run.ask, run.built, run.transcript
  local c, snap = ask.card, ask.snap
  c:preparing("git: " .. ask.repo)
  d:refresh(ask)
  local done, err, setup = repo_mod.prepare(built.executor, snap, ask.repo, {
    signal = ask.stop, remaining_ms = deadline - d.now_ms(), defer_fetch = true,
    base_since = pushes.since(d, ask.repo), -- a push heard since: the prepared base is stale
    branch = publish.branch(snap, thread.name, d.thread_key(thread.name)),
  })
  if done ~= "present" then
    t:write{ type = "repository", repo = ask.repo, outcome = done or err.kind, problem = err and tostring(err) }
  end
  if not done then
    if err.kind == "aborted" or ask.stop.aborted then return "stopped" end
    run.problem = tostring(err)
    return err.kind == "infra" and "infra" or "clone_failed"
  end
  if done == "present" then
    fetch_beside(d, run, deadline)
  else
    local on_branch = err -- a fresh clone that checked out the thread's branch names it
    c:add_note(done .. " " .. ask.repo .. (on_branch and (" on the thread's branch " .. on_branch) or ""))
    if setup then c:add_note(".switchboard/setup.sh " .. (setup == "ok" and "ran" or ("failed (" .. setup:gsub("^failed%-", "exit ") .. "; its output is in .git/switchboard-setup.log)"))) end
  end
  d:remember("thread", d.record and d.record.bind, thread.name, { repo = ask.repo, backend = built.backend })
  say_workspace(c, built.executor, done, err, ask.repo) -- (err: the branch a fresh clone took)
  c.state = "running"
  return nil
end

-- The repository's instruction files (the system prompt's end).
local function read_instructions(d, run, deadline)
  local ask = run.ask
  run.guide = instructions.read(run.built.executor, ask.snap, { signal = ask.stop, remaining_ms = deadline - d.now_ms() })
  if run.guide.note then ask.card:add_note(run.guide.note) end
  run.transcript:write{ type = "instructions", files = run.guide.files }
end

-- The OS and toolchain lines a workspace of a backend gave, per (backend, agent): a new
-- workspace of the same image gets them written instead of running the toolchains again. While
-- one workspace computes them, another of the same image waits for its lines (the toolchains
-- are asked once, not once per thread that started at the same time).
local known_facts, computing = {}, {}

-- The run's facts (agent/facts.lua): an agent without tools gets none.
local function gather_facts(d, run, deadline)
  local thread, ask = run.thread, run.ask
  local snap = ask.snap
  if #tools_mod.definitions(snap, ask.agent_def) == 0 then return end
  local image = tostring(run.built.backend) .. "\0" .. tostring(ask.agent) .. "\0" .. facts_mod.facts_file(snap, "")
  if not known_facts[image] and computing[image] then core.sleep(deadline - d.now_ms(), computing[image]) end
  local mine = not known_facts[image] and not computing[image] and core.signal(ask.stop) or nil
  if mine then computing[image] = mine end
  local ok, got = pcall(facts_mod.gather, run.built.executor, snap, { repo = ask.repo,
    branch = M.publishes_at_all(ask) and publish.branch(snap, thread.name, d.thread_key(thread.name)) or nil,
    signal = ask.stop, remaining_ms = deadline - d.now_ms(), known = known_facts[image] })
  if mine then
    if ok then known_facts[image] = got.known end
    computing[image] = nil
    mine:abort("computed")
  end
  if not ok then error(got, 0) end
  run.facts = got
  run.transcript:write{ type = "environment", facts = run.facts }
end

-- The model's turns (agent/run.lua) with the thread's conversation.
local function converse(d, run, deadline)
  local thread, ask, built = run.thread, run.ask, run.built
  local c, snap = ask.card, ask.snap
  local s, a, p, res = agent.run{
    snap = snap, def = ask.agent_def, agent = ask.agent, executor = built.executor,
    tracker = built.tracker, client = run.client, card = c, signal = ask.stop, deadline_ms = deadline,
    ask = ask.content or ask.text, repo = ask.repo,
    workspace = built.executor.workspace_dir and built.executor:workspace_dir() or nil,
    transcript = run.transcript, now_ms = d.now_ms, instructions = run.guide, facts = run.facts,
    history = M.history(d, thread), before_tools = run.workspace_ready,
    inbox = function()
      local list = ask.inbox
      if not list or #list == 0 then return nil end
      ask.inbox = {}
      return list
    end,
    on_turn = function(messages)
      M.keep_conversation(d, thread, messages)
      -- the cost so far, so a run the bot dies in still counts towards the caps after a restart
      if run.rrun and c.cost_usd then core.go(function() d:remember("run_cost", d.record.run_cost, run.rrun, c.cost_usd) end) end
    end,
    thread = thread.name, accounts = d.accounts,
    attach = function(image, tool_id) M.attach(d, run, image, tool_id) end,
  }
  run.state, run.answer, run.problem = s, a, p
  if res and res.messages then M.keep_conversation(d, thread, res.messages) end
  run.cost = res and res.cost
end

-- A screenshot the agent took: kept for the run's page (record.pages.image_max_bytes) and
-- posted in the thread when the front can (Slack: a file upload).
function M.attach(d, run, image, tool_id)
  local keep = #image.bytes <= run.ask.snap.record.pages.image_max_bytes
  if run.rrun then
    core.go(function()
      d:remember("event", d.record.event, run.rrun, { type = "image", tool_id = tool_id, url = image.url,
        media_type = image.media_type, width = image.width, height = image.height, size = #image.bytes,
        data = keep and core.crypto.base64_encode(image.bytes) or nil })
    end)
  end
  if d.front and d.front.attach_file then
    d.front:attach_file(run.thread.name, { name = "screenshot.png", bytes = image.bytes,
      title = "Screenshot of " .. tostring(image.url) })
  end
end

-- The run's changes against the commit it started from, for its page and card.
local function capture_diff(d, run, deadline)
  local ask = run.ask
  local snap = ask.snap
  local opts = { signal = core.signal(d.shutdown),
                 remaining_ms = math.max(deadline - d.now_ms(), snap.agents.find_tools.timeout_ms) }
  local got, err = diff_mod.capture(run.built.executor, snap, run.base, opts)
  if not got then
    core.log("warn", "agent.diff_failed", { thread = run.thread.name, error = tostring(err) })
    return
  end
  ask.card.diff = { added = got.added, removed = got.removed, files = #got.files }
  run.transcript:write{ type = "diff", base = got.base, files = got.files, added = got.added,
    removed = got.removed, patch = got.patch, cut = got.cut }
end

function M.run(d, run)
  local thread, ask, built = run.thread, run.ask, run.built
  local c = ask.card
  -- the lifecycle's clock: from when the run started, not when it was queued
  local deadline = run.deadline_ms
  local t = transcript.open(d.transcripts_dir, d.thread_key(thread.name), ask.id)
  if t.path then c.transcript_path = t.path end
  run.transcript = t
  run.rrun = M.record_start(d, thread, ask, built, t)
  core.log("info", "agent.run", { thread = thread.name, agent = ask.agent, backend = built.backend, ask = ask.id })
  local context_ready = M.start_context(d, thread, ask)
  if ask.repo then run.state = prepare_repo(d, run, deadline) end
  if run.state then return end
  -- the instruction files and the facts are read at the same time (each is executor work)
  -- (and the commit the run's diff is taken against: the run page's and the card's changes)
  together{
    function() if ask.repo then read_instructions(d, run, deadline) end end,
    function() gather_facts(d, run, deadline) end,
    function()
      if ask.repo then
        run.base = diff_mod.base(built.executor, ask.snap, { signal = ask.stop, remaining_ms = deadline - d.now_ms() })
      end
    end,
  }
  context_ready()
  converse(d, run, deadline)
  if run.workspace_ready then run.workspace_ready(true) end
  local publishes, unfinished = M.publishes(d, ask, run.state)
  if publishes then M.publish(d, thread, ask, built, t, run.answer, deadline, unfinished) end
  if run.base then capture_diff(d, run, deadline) end
end

-- A raise in the run (a bug, in this file or below it) ends it as a model error whose problem
-- says so; the lifecycle has logged it with its traceback.
function M.raised(_, run, why)
  run.state, run.problem = "model_error", "internal error in the agent run: " .. why
end

function M.ended(d, run)
  local thread, ask, c = run.thread, run.ask, run.ask.card
  local state, answer, problem = run.state, run.answer, run.problem
  if ask.stop.aborted then state = "stopped" end
  if ask.review then M.reply_on_review(d, thread, ask, state, answer, problem) end
  if ask.pr_review then pr_review.post(d, thread, ask, state, answer, problem) end
  -- with a record, the conversation lives there between runs: a bot with many threads does
  -- not hold every conversation (images included) in memory; the next run reads it back
  if d.record and thread.mark then thread.history, thread.mark = nil, nil end
  local t = run.transcript
  if t then
    t:write{ type = "run_end", state = state, turns = c.turns, tokens_in = c.tokens_in,
             tokens_out = c.tokens_out, cache_read = c.cache_read, cache_write = c.cache_write, cost_usd = c.cost_usd,
             duration_ms = d.now_ms() - (c.started_ms or d.now_ms()), problem = problem, answer = answer }
    t:close()
  end
  if run.rrun then
    d:remember("run_end", d.record.run_end, run.rrun, { outcome = state, turns = c.turns, tokens_in = c.tokens_in,
      tokens_out = c.tokens_out, cost = run.cost, answer = answer, problem = problem or c.publish_problem,
      pr_url = c.pull_request and c.pull_request.url })
  end
  core.log("info", "agent.done", { thread = thread.name, agent = ask.agent, ask = ask.id, state = state,
                                   turns = c.turns, tokens_in = c.tokens_in, tokens_out = c.tokens_out,
                                   cost_usd = c.cost_usd })
  c:ended(state, d.now_ms(), answer, problem)
end

return M
