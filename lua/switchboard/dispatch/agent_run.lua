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
--   agent_run.before(ctx, run) → true | false (the card has ended: no model credential)
--   agent_run.run(ctx, run)           in the thread's worker task, the executor provisioned
--   agent_run.raised(ctx, run, why)   the run raised (a bug; logged by the lifecycle)
--   agent_run.ended(ctx, run)         after the release
--   agent_run.repo_in(text) → "OWNER/REPO" | nil  the repository a free-text ask names
-- run: {thread, ask, built, released}; the steps keep their own state on it (client,
-- transcript, state, answer, problem, tally).
--
-- ctx is the run's narrow context (dispatch/dispatcher.lua run_context), all it reaches of the
-- dispatcher: now_ms, shutdown, thread_key, credentials, model_client, transcripts_dir,
-- accounts, record and remember (the record subscriber's), page_url, show() (the card now),
-- base_since(repo), attach_file(file)?, history(), keep_conversation(messages),
-- forget_conversation(). What the run does goes to its event stream (ask.events,
-- dispatch/run_events.lua), never to the card or the record directly: the card and the
-- dispatcher's thread subscribe when the ask is queued, the transcript, the record and the
-- GitHub reply when the run starts.
local core = require("switchboard.core")
local client_mod = require("switchboard.agent.client")
local repo_mod = require("switchboard.agent.repo")
local instructions = require("switchboard.agent.instructions")
local facts_mod = require("switchboard.agent.facts")
local tools_mod = require("switchboard.agent.tools")
local publish = require("switchboard.agent.publish")
local diff_mod = require("switchboard.agent.diff")
local agent = require("switchboard.agent.run")
local transcript = require("switchboard.agent.transcript")
local parser = require("switchboard.dispatch.parser")
local run_events = require("switchboard.dispatch.run_events")
local run_record = require("switchboard.dispatch.run_record")
local github_reply = require("switchboard.dispatch.github_reply")

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
local function make_client(ctx, snap, agent_def)
  local factory = ctx.model_client or function(s, def) return client_mod.from_env(os.getenv, s, def) end
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
function M.publishes(ctx, ask, state)
  if not M.publishes_at_all(ask) then return nil end
  if ctx.shutdown and ctx.shutdown.aborted then return nil end
  if state == "done" and not ask.stop.aborted then return "ready" end
  local stopped = ask.stop.aborted and "stopped" or state
  if UNFINISHED[stopped] and ask.snap.agents.pull_request.unfinished == "draft" then return "draft", UNFINISHED[stopped] end
  if UNFINISHED[stopped] then
    ask.events:emit{ type = "note", text = ("no pull request: the run stopped before it was done (%s), and "
      .. "pull_request.unfinished in policies/agents.lua is \"none\"; its changes stay in the thread's workspace for "
      .. "a follow-up"):format(UNFINISHED[stopped]) }
  end
  return nil
end

function M.publish(ctx, run, deadline, draft)
  local thread, ask, built = run.thread, run.ask, run.built
  local events = ask.events
  events:emit{ type = "activity", text = "git: committing and pushing the changes" }
  ctx.show()
  -- a run stopped by `stop` or by its clock still publishes its draft: with a signal of its
  -- own (a shutdown still ends it) and policy's grace
  local signal, remaining = ask.stop, deadline - ctx.now_ms()
  if draft then
    signal = core.signal(ctx.shutdown)
    remaining = math.max(remaining, ask.snap.agents.pull_request.publish_grace_ms)
  end
  local res, err = publish.run{
    executor = built.executor, snap = ask.snap, repo = ask.repo, thread = thread.name,
    thread_key = ctx.thread_key, link = ask.link, ask = ask.text, agent = ask.agent,
    answer = run.answer, turns = run.tally.turns, creds = ctx.credentials, scope = ask.agent_def.token_scope,
    signal = signal, remaining_ms = remaining, draft = draft, fixes = ask.issue and ask.issue.number,
  }
  events:emit{ type = "activity" }
  local problem, kind = err and tostring(err), err and err.kind
  local pull_request
  if res and res.state == "published" then
    pull_request = { url = res.pr.url, number = res.pr.number, action = res.pr.action, branch = res.branch,
                     draft = res.pr.draft }
  end
  -- the card, the record, the thread and the GitHub reply read it from here
  events:emit{ type = "publish", state = res and res.state or "failed", kind = kind, branch = res and res.branch,
               sha = res and res.sha, pull_request = pull_request, problem = problem, draft = draft }
  core.log(res and "info" or "warn", "agent.publish", { thread = thread.name, repo = ask.repo,
    state = res and res.state or "failed", kind = kind, pr = pull_request and pull_request.number,
    draft = draft ~= nil })
end

-- What the executor said about the thread's workspace on a wake (sandboxd: kept from its sleep,
-- or expired by the slept workspaces' budget; docs/sandboxd.md "Slept workspaces"), on the
-- card ("workspace expired (policy …): re-cloned acme/api on branch X" after a re-clone).
local function say_workspace(events, executor, done, on_branch, repo)
  local note = executor.take_workspace_note and executor:take_workspace_note()
  if not note then return end
  if note.state == "expired" and done == "cloned" then
    events:emit{ type = "note", text = ("%s: re-cloned %s on branch %s"):format(note.text, repo, on_branch or "(the default branch)") }
  else
    events:emit{ type = "note", text = note.text }
  end
end

-- The front's context for this run (Slack: the thread's earlier messages on its first run, the
-- ask's files): content blocks put before the ask's text, notes on the card. It is fetched from
-- the run's start, beside the clone (issue 36: a cold thread's first request waits for the
-- slower of the two, not their sum); the function returned waits for it and applies it, so
-- its notes come after the repository's, as before.
function M.start_context(ctx, thread, ask)
  if not ask.prepare then return function() end end
  local got
  local done = core.signal()
  core.go(function()
    local history = ctx.history()
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
    ask.events:emit{ type = "note", text = "the context from the front could not be read: " .. tostring(blocks):match("^[^\n]*") }
    return
  end
  for _, n in ipairs(notes or {}) do ask.events:emit{ type = "note", text = n } end
  if blocks and #blocks > 0 then
    local content = {}
    for i, b in ipairs(blocks) do content[i] = b end
    content[#content + 1] = { type = "text", text = ask.text }
    ask.content = content
  end
end

-- The run's own count of its turns and tokens (what its end reports), from its events.
local function tally(run)
  local t = { turns = 0, tokens_in = 0, tokens_out = 0 }
  run.tally = t
  return function(e)
    if e.type == "turn" then
      t.turns = e.turn
    elseif e.type == "usage" then
      t.tokens_in, t.tokens_out, t.cache_read, t.cache_write, t.cost_usd =
        e.tokens_in, e.tokens_out, e.cache_read, e.cache_write, e.cost_usd
    end
  end
end

-- The run's subscribers beside the card and the thread (which the dispatcher subscribed when
-- the ask was queued): its tally, the transcript, the record (the run page reads it) and the
-- GitHub reply, in that order. Then the run says it started (the record makes its row).
local function start_events(ctx, run)
  local thread, ask, events = run.thread, run.ask, run.ask.events
  events:subscribe("tally", tally(run))
  local t = transcript.open(ctx.transcripts_dir, ctx.thread_key, ask.id)
  run.transcript = t
  -- an image's bytes are the run page's (the record's), never a transcript line
  events:subscribe("transcript", t:follow(function(e) return run_events.kept(e) and e.type ~= "image" end))
  if ctx.record then
    events:subscribe("record", run_record.follow{ record = ctx.record, remember = ctx.remember, thread = thread.name,
      ask = ask, backend = run.built.backend, instance = ctx.thread_key, page_url = ctx.page_url,
      emit = function(e) events:emit(e) end })
  end
  local reply = github_reply.follow{ ask = ask, thread = thread.name, credentials = ctx.credentials,
    note = function(text) events:emit{ type = "note", text = text } end }
  if reply then events:subscribe("github_reply", reply) end
  events:emit{ type = "started", transcript_path = t.path }
  if ctx.record and ask.user_name then
    core.go(function()
      local ok, name = pcall(ask.user_name)
      if ok and type(name) == "string" and name ~= ask.user then events:emit{ type = "asker", user = ask.user, name = name } end
    end)
  end
end

-- Before provisioning: a run without a model client ends at once (its card says how to set
-- the key), provisioning nothing.
function M.before(ctx, run)
  local client, why = make_client(ctx, run.ask.snap, run.ask.agent_def)
  if not client then
    run.ask.events:finish{ type = "run_end", state = "no_key", problem = tostring(why) }
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
local function fetch_beside(ctx, run, deadline)
  local ask, built, events = run.ask, run.built, run.ask.events
  local ready = core.signal(ask.stop)
  local done = false
  core.go(function()
    local ok, got, err = pcall(repo_mod.fetch, built.executor, ask.snap, ask.repo,
      { signal = ask.stop, remaining_ms = deadline - ctx.now_ms() })
    if not ok then got, err = nil, got end
    events:emit{ type = "repository", repo = ask.repo, outcome = got or (type(err) == "table" and err.kind) or "error",
                 problem = err and tostring(err) }
    if got then
      events:emit{ type = "note", text = "fetched " .. ask.repo }
    elseif not ask.stop.aborted then
      events:emit{ type = "note", text = ("the fetch of %s failed; the workspace's copy is used: %s"):format(ask.repo,
        tostring(err):match("^[^\n]*")) }
    end
    done = true
    ready:abort("ready")
  end)
  run.workspace_ready = function(quiet)
    if done or ask.stop.aborted then return end
    if not quiet then events:emit{ type = "activity", text = "waiting for the workspace: git fetch " .. ask.repo } end
    while not done and not ask.stop.aborted do core.sleep(3600 * 1000, ready) end
    if not quiet then events:emit{ type = "activity" } end
  end
end

-- The repository, cloned in the thread's workspace (or found there, then fetched beside the
-- run). Returns nil, or the state the run ends in when the repository could not be made ready.
local function prepare_repo(ctx, run, deadline)
  local thread, ask, built, events = run.thread, run.ask, run.built, run.ask.events
  local snap = ask.snap
  events:emit{ type = "phase", state = "preparing", text = "git: " .. ask.repo }
  ctx.show()
  local done, err, setup = repo_mod.prepare(built.executor, snap, ask.repo, {
    signal = ask.stop, remaining_ms = deadline - ctx.now_ms(), defer_fetch = true,
    base_since = ctx.base_since(ask.repo), -- a push heard since: the prepared base is stale
    branch = publish.branch(snap, thread.name, ctx.thread_key),
  })
  if done ~= "present" then
    events:emit{ type = "repository", repo = ask.repo, outcome = done or err.kind, problem = err and tostring(err) }
  end
  if not done then
    if err.kind == "aborted" or ask.stop.aborted then return "stopped" end
    run.problem = tostring(err)
    return err.kind == "infra" and "infra" or "clone_failed"
  end
  if done == "present" then
    fetch_beside(ctx, run, deadline)
  else
    local on_branch = err -- a fresh clone that checked out the thread's branch names it
    events:emit{ type = "note", text = done .. " " .. ask.repo .. (on_branch and (" on the thread's branch " .. on_branch) or "") }
    if setup then
      events:emit{ type = "note", text = ".switchboard/setup.sh " .. (setup == "ok" and "ran"
        or ("failed (" .. setup:gsub("^failed%-", "exit ") .. "; its output is in .git/switchboard-setup.log)")) }
    end
  end
  say_workspace(events, built.executor, done, err, ask.repo) -- (err: the branch a fresh clone took)
  -- the record binds the thread's repository
  events:emit{ type = "phase", state = "running", repo = ask.repo }
  return nil
end

-- The repository's instruction files (the system prompt's end).
local function read_instructions(ctx, run, deadline)
  local ask = run.ask
  run.guide = instructions.read(run.built.executor, ask.snap, { signal = ask.stop, remaining_ms = deadline - ctx.now_ms() })
  if run.guide.note then ask.events:emit{ type = "note", text = run.guide.note } end
  ask.events:emit{ type = "instructions", files = run.guide.files }
end

-- The OS and toolchain lines a workspace of a backend gave, per (backend, agent): a new
-- workspace of the same image gets them written instead of running the toolchains again. While
-- one workspace computes them, another of the same image waits for its lines (the toolchains
-- are asked once, not once per thread that started at the same time).
local known_facts, computing = {}, {}

-- The run's facts (agent/facts.lua): an agent without tools gets none.
local function gather_facts(ctx, run, deadline)
  local thread, ask = run.thread, run.ask
  local snap = ask.snap
  if #tools_mod.definitions(snap, ask.agent_def) == 0 then return end
  local image = tostring(run.built.backend) .. "\0" .. tostring(ask.agent) .. "\0" .. facts_mod.facts_file(snap, "")
  if not known_facts[image] and computing[image] then core.sleep(deadline - ctx.now_ms(), computing[image]) end
  local mine = not known_facts[image] and not computing[image] and core.signal(ask.stop) or nil
  if mine then computing[image] = mine end
  local ok, got = pcall(facts_mod.gather, run.built.executor, snap, { repo = ask.repo,
    branch = M.publishes_at_all(ask) and publish.branch(snap, thread.name, ctx.thread_key) or nil,
    signal = ask.stop, remaining_ms = deadline - ctx.now_ms(), known = known_facts[image] })
  if mine then
    if ok then known_facts[image] = got.known end
    computing[image] = nil
    mine:abort("computed")
  end
  if not ok then error(got, 0) end
  run.facts = got
  ask.events:emit{ type = "environment", facts = run.facts }
end

-- The model's turns (agent/run.lua) with the thread's conversation.
local function converse(ctx, run, deadline)
  local thread, ask, built = run.thread, run.ask, run.built
  local snap = ask.snap
  local s, a, p, res = agent.run{
    snap = snap, def = ask.agent_def, agent = ask.agent, executor = built.executor,
    tracker = built.tracker, client = run.client, events = ask.events, signal = ask.stop, deadline_ms = deadline,
    ask = ask.content or ask.text, repo = ask.repo,
    workspace = built.executor.workspace_dir and built.executor:workspace_dir() or nil,
    now_ms = ctx.now_ms, instructions = run.guide, facts = run.facts,
    history = ctx.history(), before_tools = run.workspace_ready,
    inbox = function()
      local list = ask.inbox
      if not list or #list == 0 then return nil end
      ask.inbox = {}
      return list
    end,
    on_turn = function(messages)
      ctx.keep_conversation(messages)
      -- the cost so far, so a run the bot dies in still counts towards the caps after a restart
      ask.events:emit{ type = "saved", cost_usd = run.tally.cost_usd }
    end,
    thread = thread.name, accounts = ctx.accounts,
    attach = function(image, tool_id) M.attach(ctx, run, image, tool_id) end,
  }
  run.state, run.answer, run.problem = s, a, p
  if res and res.messages then ctx.keep_conversation(res.messages) end
end

-- A screenshot the agent took: kept for the run's page (record.pages.image_max_bytes) and
-- posted in the thread when the front can (Slack: a file upload).
function M.attach(ctx, run, image, tool_id)
  local keep = #image.bytes <= run.ask.snap.record.pages.image_max_bytes
  run.ask.events:emit{ type = "image", tool_id = tool_id, url = image.url,
    media_type = image.media_type, width = image.width, height = image.height, size = #image.bytes,
    data = keep and core.crypto.base64_encode(image.bytes) or nil }
  if ctx.attach_file then
    ctx.attach_file{ name = "screenshot.png", bytes = image.bytes, title = "Screenshot of " .. tostring(image.url) }
  end
end

-- The run's changes against the commit it started from, for its page and card.
local function capture_diff(ctx, run, deadline)
  local ask = run.ask
  local snap = ask.snap
  local opts = { signal = core.signal(ctx.shutdown),
                 remaining_ms = math.max(deadline - ctx.now_ms(), snap.agents.find_tools.timeout_ms) }
  local got, err = diff_mod.capture(run.built.executor, snap, run.base, opts)
  if not got then
    core.log("warn", "agent.diff_failed", { thread = run.thread.name, error = tostring(err) })
    return
  end
  ask.events:emit{ type = "diff", base = got.base, files = got.files, added = got.added,
    removed = got.removed, patch = got.patch, cut = got.cut }
end

function M.run(ctx, run)
  local thread, ask, built = run.thread, run.ask, run.built
  -- the lifecycle's clock: from when the run started, not when it was queued
  local deadline = run.deadline_ms
  start_events(ctx, run)
  core.log("info", "agent.run", { thread = thread.name, agent = ask.agent, backend = built.backend, ask = ask.id })
  local context_ready = M.start_context(ctx, thread, ask)
  if ask.repo then run.state = prepare_repo(ctx, run, deadline) end
  if run.state then return end
  -- the instruction files and the facts are read at the same time (each is executor work)
  -- (and the commit the run's diff is taken against: the run page's and the card's changes)
  together{
    function() if ask.repo then read_instructions(ctx, run, deadline) end end,
    function() gather_facts(ctx, run, deadline) end,
    function()
      if ask.repo then
        run.base = diff_mod.base(built.executor, ask.snap, { signal = ask.stop, remaining_ms = deadline - ctx.now_ms() })
      end
    end,
  }
  context_ready()
  converse(ctx, run, deadline)
  if run.workspace_ready then run.workspace_ready(true) end
  local publishes, unfinished = M.publishes(ctx, ask, run.state)
  if publishes then M.publish(ctx, run, deadline, unfinished) end
  if run.base then capture_diff(ctx, run, deadline) end
end

-- A raise in the run (a bug, in this file or below it) ends it as a model error whose problem
-- says so; the lifecycle has logged it with its traceback.
function M.raised(_, run, why)
  run.state, run.problem = "model_error", "internal error in the agent run: " .. why
end

-- The run's end: its last event (the card ends, the transcript's and the record's last line,
-- the GitHub reply), then its stream is closed.
function M.ended(ctx, run)
  local thread, ask = run.thread, run.ask
  local state, answer, problem = run.state, run.answer, run.problem
  if ask.stop.aborted then state = "stopped" end
  -- with a record, the conversation lives there between runs: a bot with many threads does
  -- not hold every conversation (images included) in memory; the next run reads it back
  ctx.forget_conversation()
  local n = run.tally or { turns = 0, tokens_in = 0, tokens_out = 0 }
  core.log("info", "agent.done", { thread = thread.name, agent = ask.agent, ask = ask.id, state = state,
                                   turns = n.turns, tokens_in = n.tokens_in, tokens_out = n.tokens_out,
                                   cost_usd = n.cost_usd })
  ask.events:finish{ type = "run_end", state = state, turns = n.turns, tokens_in = n.tokens_in,
    tokens_out = n.tokens_out, cache_read = n.cache_read, cache_write = n.cache_write, cost_usd = n.cost_usd,
    duration_ms = ctx.now_ms() - (run.running_ms or ctx.now_ms()), problem = problem, answer = answer }
end

return M
