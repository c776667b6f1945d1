-- The dispatcher: a message {thread, user, text} from a front (the console, later Slack)
-- becomes an answer in that thread.
--
--   * The ask is parsed (dispatch/parser.lua); help, a malformed ask, an unknown agent or a
--     repository that cannot be used is answered at once with what is possible
--     (dispatch/help.lua), from the policy snapshot the message saw.
--   * A run goes into its thread's queue: asks of one thread run one after the other (a
--     follow-up sees what the previous command left in the workspace); threads run at the
--     same time.
--   * Each (thread, agent) is provisioned once through exec/stack.build (the factory's note
--     goes on the card) and its executor is reused by the thread's follow-ups. One agent per
--     executor, because the credential scope is the agent's: a review follow-up in a coding
--     thread shares the workspace, never the write token.
--   * The policy snapshot is read once, when the message arrives (ask.snap); provisioning and
--     the executor decide with that one (ctx.snap, opts.snap), so a reload while the ask
--     waits or runs never gives it two policies.
--   * Every run — a command, an agent's — has one lifecycle here: provision → a stop that came
--     meanwhile ends it before anything runs → the kind's run (dispatch/command_run.lua,
--     dispatch/agent_run.lua) → release ("always" after a stop or too many infra failures, on
--     every way out); one catch around it all keeps a raise's traceback in the log.
--   * A command runs under the ask's hard-stop signal and the run's remaining wall clock
--     (the agent's max_run_minutes); its status card is refreshed while it runs and ends
--     with the result, cut to the card limit, the whole output kept in a file.
--   * `stop` kills the thread's running command at once (its process group), drops the
--     thread's queued asks and releases the executor with "always"; the next ask provisions
--     again (the same workspace for the local backend).
--
-- The front interface (a table):
--   front:post(thread, message, reply_to) → handle     message = {text, final, summary, card?};
--                                            reply_to: the message's msg.reply_to (the front's
--                                            own address of the ask: Slack's channel, thread
--                                            and ask ts), carried in the ask, opaque here
--   front:update(handle, message)            the same message shape; final cards are complete
--   front:link_for(thread, reply_to)?        → function() → the thread's link | nil
--   front:attach_file(thread, file, reply_to)?  a file (a screenshot) posted in the thread
--   front.steers                             true: a message in a thread whose agent run works
--                                            goes to that run (D:deliver), not the queue
-- A front that cannot edit messages (a pipe) shows only final ones.
--
--   local d = dispatcher.new{front = f, stack = {workspace_root = dir, …}, outputs_dir = dir}
--   d:handle{thread = "main", user = "ana", text = "run `ls`"}   -- returns at once
--   d:wait_idle()          -- yields until every ask has ended
--   d:drain(grace_ms)      -- take nothing new; running asks get grace_ms, then are killed
local core = require("switchboard.core")
local policy = require("switchboard.policy")
local stack = require("switchboard.exec.stack")
local identity = require("switchboard.github.identity")
local workspace = require("switchboard.shell.workspace")
local card_mod = require("switchboard.dispatch.card")
local run_card = require("switchboard.dispatch.run_card")
local pushes = require("switchboard.dispatch.pushes")
local agent_run = require("switchboard.dispatch.agent_run")
local command_run = require("switchboard.dispatch.command_run")
local help = require("switchboard.dispatch.help")
local in_flight = require("switchboard.dispatch.in_flight")
local parser = require("switchboard.dispatch.parser")
local spend = require("switchboard.agent.spend")

local M = {}
local D = {}
D.__index = D

-- opts:
--   front          the front interface (above), required
--   policy         function → the snapshot new work captures (default policy.current)
--   stack          exec/stack.build's opts (workspace_root, sandbox_url, force_backend, sink,
--                  backends, credentials, getenv); policy is filled in
--   outputs_dir    where whole outputs of cut cards are kept (nil: not kept; the card says so)
--   thread_key     function(thread) → the executor's thread key (default: the thread itself)
--   help_extra     more grammar rows for the help text (a front's own commands)
--   now_ms         clock (default core.now_ms)
--   model_client   function(snap) → a model client (agent/client.lua) | nil, why (default: from
--                  ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL); free-text asks are agent runs
--   transcripts_dir where agent runs' transcripts go (nil: not kept)
--   record         the thread's record (store/record.lua) or nil: conversations, runs, the
--                  thread's repository/branch/pull request survive a restart; call
--                  d:restore() once, in a task, before the first message
--   page_url       function(token) → the run page's address, or nil (no pages)
--   accounts       the spend totals per thread and per day (agent/spend.lua); default: with a
--                  record, the dispatcher's own, which d:restore() fills from the record's
--                  runs (so the caps hold across a restart); without, the shared in-memory ones
function M.new(opts)
  assert(type(opts) == "table" and opts.front, "dispatcher.new: opts.front is required")
  local build_opts = {}
  for k, v in pairs(opts.stack or {}) do build_opts[k] = v end
  local self = setmetatable({
    front = opts.front,
    policy = opts.policy or policy.current,
    build_opts = build_opts,
    outputs_dir = opts.outputs_dir,
    thread_key = opts.thread_key or function(thread) return thread end,
    help_extra = opts.help_extra,
    now_ms = opts.now_ms or core.now_ms,
    model_client = opts.model_client,
    transcripts_dir = opts.transcripts_dir,
    record = opts.record,
    page_url = opts.page_url,
    accounts = opts.accounts or (opts.record and spend.new_accounts() or nil),
    threads = {},
    asks = in_flight.new(), -- asks queued or running
    closed = false,
    shutdown = core.signal(), -- aborting it stops every ask
    seq = 0,
  }, D)
  build_opts.policy = build_opts.policy or self.policy
  return self
end

local function log(level, event, fields)
  core.log(level, event, fields)
end

---------------------------------------------------------------------------------------------
-- Answers

function D:answer(msg, text)
  self.front:post(msg.thread, { text = text, final = true }, msg.reply_to)
end

function D:help_text(snap, lead)
  return help.text(snap, lead, self.help_extra)
end

---------------------------------------------------------------------------------------------
-- Threads and idleness

-- A thread: its queue and executors (this process's), and what the record keeps of it —
-- repo, branch, pr ({number, url}), and history (the conversation as last sent; nil until
-- loaded from the record by the thread's first agent run here) with its save mark.
function D:thread(name)
  local t = self.threads[name]
  if t == nil then
    t = { name = name, queue = {}, running = nil, executors = {}, repo = nil }
    self.threads[name] = t
  end
  return t
end

-- Reads every thread the record keeps (their repository, branch and pull request), so that a
-- follow-up after a restart is resolved against the thread as it was. Yields.
function D:restore()
  if not self.record then return 0 end
  local rows, err = self.record:threads()
  if not rows then
    log("error", "record.restore_failed", { error = tostring(err) })
    return nil, err
  end
  for _, r in ipairs(rows) do
    local t = self:thread(r.key)
    t.repo = t.repo or r.repo
    t.branch = r.branch
    if r.pr_number then t.pr = { number = r.pr_number, url = r.pr_url } end
  end
  self:restore_spend()
  log("info", "record.restored", { threads = #rows })
  return #rows
end

-- The spend caps' totals from the runs the record keeps: each thread's, and each workspace's
-- per UTC day (a run counts on the day it started). The last two days are enough: a cap only
-- ever asks about today.
local DAY_MS = 24 * 3600 * 1000

function D:restore_spend()
  if not self.accounts then return end
  local totals, err = self.record:spend(core.wall_ms() - 2 * DAY_MS)
  if not totals then
    log("error", "record.restore_failed", { what = "spend", error = tostring(err) })
    return
  end
  for _, r in ipairs(totals.threads) do self.accounts:add("thread", r.thread, r.cost) end
  for _, r in ipairs(totals.runs) do
    self.accounts:add("day", spend.day_key(spend.workspace_of(r.thread), r.started_ms // 1000), r.cost)
  end
end

-- The thread's conversation so far: this process's copy, or the record's after a restart.
function D:history(thread)
  if thread.history == nil and self.record then
    thread.history = self:remember("conversation", self.record.conversation, thread.name)
    if thread.history then thread.mark = { refs = { table.unpack(thread.history) } } end
  end
  return thread.history
end

-- After each turn and at the end: the conversation as sent is the thread's (and the record's,
-- committed before the next request goes out).
function D:keep_conversation(thread, messages)
  thread.history = messages
  if self.record then
    thread.mark = self:remember("conversation", self.record.save_conversation, thread.name, messages, thread.mark)
  end
end

-- With a record, the conversation lives there between runs: a bot with many threads does not
-- hold every conversation (images included) in memory; the next run reads it back.
function D:forget_conversation(thread)
  if self.record and thread.mark then thread.history, thread.mark = nil, nil end
end

-- Writes to the record without letting its failure end an ask: the run goes on, the log says
-- what was not kept.
function D:remember(what, fn, ...)
  if not self.record then return nil end
  local ok, res, err = pcall(fn, self.record, ...)
  if not ok or res == nil then
    log("error", "record.write_failed", { what = what, error = tostring(ok and err or res) })
    return nil
  end
  return res
end

function D:is_idle() return self.asks.count == 0 end

-- Yields until no ask is queued or running (true), or until signal fires (false).
function D:wait_idle(signal)
  return self.asks:wait(signal)
end

---------------------------------------------------------------------------------------------
-- Cards

function D:card_message(ask, final)
  local c = ask.card
  local now = self.now_ms()
  local max = ask.snap.timeouts.card.max_chars
  return { text = c:render({ max_chars = max, now_ms = now }), final = final, summary = c:summary(now),
           card = c } -- the card itself, for fronts that render it their own way (Slack)
end

function D:refresh(ask)
  local msg = self:card_message(ask, false)
  if msg.text == ask.shown then return end -- elapsed is shown in whole seconds: ≤ 1 change/s
  ask.shown = msg.text
  self.front:update(ask.handle, msg)
end

-- Keep the whole output in a file when the card cannot show it all.
function D:keep_output(ask)
  local c = ask.card
  local max = ask.snap.timeouts.card.max_chars
  if not c:overflows(max, self.now_ms()) then return end
  if not self.outputs_dir then
    c.full_error = "no output directory is configured"
    return
  end
  local dir = self.outputs_dir .. "/" .. workspace.dir_name(self.thread_key(ask.thread))
  local ok, err = core.fs.mkdir_p(dir, tonumber("700", 8))
  if not ok then
    c.full_error = tostring(err and err.message or err)
    return
  end
  local name = ("%s-%d.txt"):format(os.date("!%Y%m%dT%H%M%SZ"), ask.id)
  local root, rerr = core.fs.root(dir)
  if not root then
    c.full_error = tostring(rerr and rerr.message or rerr)
    return
  end
  -- a registered secret a command printed is kept as [redacted], as the log and the card keep it
  local wok, werr = root:write(name, core.log_scrub("$ " .. ask.command .. "\n" .. c:body_text() .. "\n"))
  root:close()
  if not wok then
    c.full_error = tostring(werr and werr.message or werr)
    return
  end
  c.full_path = dir .. "/" .. name
end

function D:finish_card(ask)
  self:keep_output(ask)
  local msg = self:card_message(ask, true)
  ask.shown = msg.text
  self.front:update(ask.handle, msg)
end

---------------------------------------------------------------------------------------------
-- Running one ask

-- The executor of (thread, agent): provisioned once, then reused. A failure is the factory's
-- error value (core.error); a raise is a bug and passes to the run's one catch (run_ask), which
-- logs it with its traceback and ends the ask as an internal error.
function D:executor_for(thread, ask)
  local built = thread.executors[ask.agent]
  if built then return built end
  local err
  built, err = stack.build(self.build_opts, {
    thread_key = self.thread_key(thread.name), agent = ask.agent, repo = ask.repo, snap = ask.snap,
  })
  if not built then return nil, err end
  thread.executors[ask.agent] = built
  return built
end

-- A raise's text for the log: its message and where it was raised (an error object's own
-- traceback when it carries one: it was raised in another task).
local function traced(e)
  if core.is_error(e) then
    return ("%s: %s\n%s"):format(e.kind, tostring(e), e.traceback or debug.traceback("", 2))
  end
  return debug.traceback(tostring(e), 2)
end

-- Release a thread's executor (mode "always" after a hard stop) and forget it: the next ask
-- provisions again.
function D:release(thread, agent, mode)
  local built = thread.executors[agent]
  thread.executors[agent] = nil
  if built and built.executor.release then
    local ok, err = xpcall(built.executor.release, traced, built.executor, mode)
    if not ok then log("warn", "dispatch.release_failed", { thread = thread.name, agent = agent, error = tostring(err) }) end
  end
end

-- The kinds of run: each is {before?, run, raised, ended} (dispatch/command_run.lua,
-- dispatch/agent_run.lua); the lifecycle below is the same for all of them.
local KINDS = { command = command_run, agent = agent_run }

-- On every way out of a run that was provisioned — its end, a stop, a raise — the card's
-- refresh stops and the executor is released with "always" when the ask was stopped or the
-- executor failed too often (run.released says which); the next ask provisions again.
function D:after_run(run)
  return setmetatable({}, { __close = function()
    if run.ticker then run.ticker:abort("finished") end
    if run.ask.stop.aborted then
      run.released = "stopped"
    elseif run.built.tracker:tripped() then
      run.released = "tripped"
    end
    if run.released then self:release(run.thread, run.ask.agent, "always") end
    -- what the backend said about the thread's workspace during the run and its release
    -- (exec/stack.lua take_notes)
    for _, line in ipairs(run.built.take_notes and run.built.take_notes() or {}) do run.ask.card:add_note(line) end
  end })
end

-- A run's narrow context: all a kind of run reaches of the dispatcher (dispatch/agent_run.lua
-- names each field). A kind never reads the dispatcher itself.
function D:run_context(run)
  local thread, ask = run.thread, run.ask
  local front = self.front
  return {
    now_ms = self.now_ms, shutdown = self.shutdown, thread_key = self.thread_key(thread.name),
    credentials = self.build_opts.credentials, model_client = self.model_client,
    transcripts_dir = self.transcripts_dir, accounts = self.accounts, page_url = self.page_url,
    record = self.record,
    remember = function(what, fn, ...) return self:remember(what, fn, ...) end,
    show = function() self:refresh(ask) end, -- the card as it is now, not at the next tick
    base_since = function(repo) return pushes.since(self, repo) end,
    attach_file = front.attach_file and function(file) front:attach_file(thread.name, file, ask.reply_to) end or nil,
    history = function() return self:history(thread) end,
    keep_conversation = function(messages) self:keep_conversation(thread, messages) end,
    forget_conversation = function() self:forget_conversation(thread) end,
  }
end

-- The lifecycle of every run: provision → stop re-check → run → release, then the card's end.
function D:lifecycle(run)
  local thread, ask, kind = run.thread, run.ask, run.kind
  local c = ask.card
  local ctx = self:run_context(run)
  run.ctx = ctx
  if ask.stop.aborted then
    c:cancelled(ask.stop.reason or "stopped", self.now_ms())
    return self:finish_card(ask)
  end
  if kind.before and not kind.before(ctx, run) then return self:finish_card(ask) end
  c:provisioning()
  self:refresh(ask)
  local built, err = self:executor_for(thread, ask)
  if not built then
    c:unprovisioned(err, self.now_ms())
    return self:finish_card(ask)
  end
  run.built = built
  c:provisioned(built.backend, built.notes or built.note)
  -- An agent that should carry a GitHub token but has no credential to get one: say so once.
  local no_token = identity.notice_for(self.build_opts.credentials, ask.agent_def)
  if no_token then c:add_note(no_token) end
  do
    local after <close> = self:after_run(run)
    -- a stop that came while the executor was provisioned: nothing runs, the executor goes
    if ask.stop.aborted then
      c:cancelled(ask.stop.reason or "stopped", self.now_ms())
    else
      run.phase = "running"
      -- the run's wall clock, from when its worker took it (max_run_minutes), for every kind
      run.deadline_ms = ask.started_ms + ask.agent_def.max_run_minutes * 60 * 1000
      run.running_ms = self.now_ms()
      c:running(run.running_ms)
      self:refresh(ask)
      run.ticker = core.signal()
      core.go(function()
        while core.sleep(ask.snap.timeouts.console.refresh_ms, run.ticker) do self:refresh(ask) end
      end)
      kind.run(ctx, run)
    end
  end
  if run.phase == "running" then
    run.phase = "ending"
    kind.ended(ctx, run)
  end
  self:finish_card(ask)
end

-- The one catch of a run: a raise anywhere in it is a bug. The log keeps its message and
-- traceback; a run that was running ends as its kind says (its executor already handled by
-- after_run), anything before as an internal error of the dispatcher; the thread goes on.
function D:run_ask(thread, ask)
  local run = { thread = thread, ask = ask, kind = KINDS[ask.kind], phase = "starting" }
  local ok, err = xpcall(self.lifecycle, traced, self, run)
  if ok then return end
  log("error", "dispatch.internal_error", { thread = thread.name, ask = ask.id, phase = run.phase, error = err })
  local why = err:match("^[^\n]*")
  if run.phase == "running" then
    run.phase = "ending"
    ok, err = xpcall(function()
      run.kind.raised(run.ctx, run, why)
      run.kind.ended(run.ctx, run)
    end, traced)
    if not ok then log("error", "dispatch.internal_error", { thread = thread.name, ask = ask.id, phase = "ending", error = err }) end
  end
  if not ask.card:final() then
    ask.card:unprovisioned(core.error("internal", "internal error in the dispatcher: " .. why), self.now_ms())
  end
  ok, err = xpcall(self.finish_card, traced, self, ask)
  if not ok then log("error", "dispatch.card_lost", { thread = thread.name, ask = ask.id, error = err }) end
end

function D:worker(thread)
  while #thread.queue > 0 do
    local ask = table.remove(thread.queue, 1)
    thread.running = ask
    ask.started_ms = self.now_ms() -- the run's clock starts now, not when it was queued
    self:run_ask(thread, ask)
    thread.running = nil
    self:requeue_inbox(ask)
    self.asks:leave()
  end
  thread.worker = nil
end

---------------------------------------------------------------------------------------------
-- Messages

-- The checks that need policy: the agent exists; a repository fits the agent and the thread.
function D:resolve(snap, msg, ask)
  local name = ask.agent
  if name == nil then
    name = policy.decide(snap, "agents.choose_agent", nil, { text = msg.text })
  end
  local def = policy.agent(snap, name)
  if def == nil then
    return nil, self:help_text(snap, ("There is no agent %q."):format(name))
  end
  local thread = self.threads[msg.thread]
  if ask.repo then
    if not (def.resources and def.resources.repository) then
      return nil, self:help_text(snap, ("agent:%s works without a repository, so it cannot run in "
        .. "%s; agents that work in a repository: %s."):format(name, ask.repo,
        table.concat(help.repository_agents(snap), ", ")))
    end
    if thread and thread.repo and thread.repo ~= ask.repo then
      return nil, self:help_text(snap, ("This thread works in %s; start another thread for %s.")
        :format(thread.repo, ask.repo))
    end
  end
  return name, def
end

-- model:NAME and effort:LEVEL: this ask's words, else the thread's earlier choice (it sticks
-- until changed), else the agent's own. A model must be one the agent allows (policy
-- `models`; a unique part of a name is enough: model:opus). Returns the agent's definition as
-- this run uses it (model, thinking, max_tokens), or nil and the answer saying why not.
function D:choose(snap, thread, def, parsed, name)
  local choice = thread and thread.choice or {}
  local allowed = def.models or { def.model }
  local model = choice.model
  if parsed.model then
    local want, found = parsed.model:lower(), {}
    for _, m in ipairs(allowed) do
      if m:lower() == want then found = { m } break end
      if m:lower():find(want, 1, true) then found[#found + 1] = m end
    end
    if #found ~= 1 then
      return nil, core.error("refused", ("model:%s is %s for agent:%s; it may use: %s."):format(parsed.model,
        #found == 0 and "not allowed" or "more than one model", name, table.concat(allowed, ", ")))
    end
    model = found[1]
  end
  local ok_model = false
  for _, m in ipairs(allowed) do if m == model then ok_model = true end end
  if not ok_model then model = def.model end -- another agent's choice: this agent's own
  local effort = parsed.effort or choice.effort
  local over = { model = model, effort = effort }
  if effort and snap.agents.effort then
    local budget = snap.agents.effort[effort]
    local limit = snap.agents.models[model] and snap.agents.models[model].max_output_tokens or def.max_tokens
    if budget == 0 then
      over.thinking = false
    else
      over.thinking = { budget_tokens = budget }
      over.max_tokens = math.min(math.max(def.max_tokens, budget + def.max_tokens // 4), limit)
    end
  end
  local used = setmetatable({}, { __index = function(_, k)
    if over[k] ~= nil then return over[k] or nil end
    return def[k]
  end })
  return used, { model = parsed.model and model or choice.model, effort = effort }
end

function D:enqueue(msg, snap, parsed, name, def)
  local thread = self:thread(msg.thread)
  self.seq = self.seq + 1
  local ask = {
    id = self.seq,
    thread = msg.thread,
    user = msg.user,
    -- the thread's link, when the front has one (Slack: a permalink, looked up when needed);
    -- a pull request's body links back to it
    link = msg.permalink or (self.front.link_for and self.front:link_for(msg.thread, msg.reply_to)) or nil,
    -- the front's own address of the ask (Slack: channel, thread and the ask's ts), opaque here
    reply_to = msg.reply_to,
    -- what started a run GitHub asked for: its reply goes there (dispatch/github_reply.lua),
    -- its pull request fixes the issue (the front's, as it handed the message over)
    review = msg.review, pr_review = msg.pr_review, issue = msg.issue,
    agent = name,
    agent_def = def,
    repo = parsed.repo or (def.resources and def.resources.repository and thread.repo) or nil,
    command = parsed.command or parsed.text,
    kind = parsed.kind == "free_text" and "agent" or "command",
    text = parsed.text,
    -- a front's context for an agent run: prepare(first_in_thread) → blocks, notes (Slack:
    -- the thread's earlier messages, the ask's files); called when the run starts
    prepare = msg.prepare,
    user_name = msg.user_name, -- a front's function() → who asked, by name (Slack: users.info)
    snap = snap,
    created_ms = self.now_ms(),
    stop = core.signal(self.shutdown),
    -- an agent run's inbox: mentions in its thread while it works, read at its next turn
    -- boundary (agent/run.lua); what is left when it ends is asked again as a new run
    inbox = parsed.kind == "free_text" and {} or nil,
  }
  -- The thread's repository is bound by its first ask that names one, at once, so that a
  -- queued ask naming another is refused even before the first has run.
  if ask.repo then thread.repo = thread.repo or ask.repo end
  if ask.kind == "agent" then
    ask.card = run_card.new{ thread = msg.thread, user = msg.user, agent = name, ask = parsed.text,
                             repo = ask.repo, max_turns = def.max_turns, model = def.model, effort = def.effort,
                             chosen = parsed.model ~= nil or parsed.effort ~= nil or thread.choice ~= nil
                               and (thread.choice.model ~= nil or thread.choice.effort ~= nil) }
    ask.events = self:run_events(thread, ask)
  else
    ask.card = card_mod.new{ thread = msg.thread, user = msg.user, agent = name,
                             command = parsed.command, repo = ask.repo }
  end
  for _, note in ipairs(msg.notes or {}) do ask.card:add_note(note) end -- the front's (who started it)
  if not thread.running and #thread.queue == 0 then
    ask.card:provisioning()
  else
    ask.card.behind = self:behind_text(thread)
  end
  local first = self:card_message(ask, false)
  ask.shown = first.text
  ask.handle = self.front:post(msg.thread, first, ask.reply_to)
  thread.queue[#thread.queue + 1] = ask
  self.asks:enter()
  if not thread.worker then
    thread.worker = core.go(function() self:worker(thread) end)
  end
  return ask
end

-- An agent run's event stream (dispatch/run_events.lua), made when the ask is queued (a
-- message may steer it once it runs): its card follows it, and so does the thread's memory of
-- its branch and pull request. The run subscribes the rest when it starts.
function D:run_events(thread, ask)
  local events = run_card.events(ask.card, self.now_ms, { fields = { thread = thread.name, ask = ask.id } })
  events:subscribe("thread", function(e)
    if e.type == "publish" and e.state == "published" then
      thread.branch, thread.pr = e.branch, { number = e.pull_request.number, url = e.pull_request.url }
    end
  end)
  return events
end

-- What a newly queued ask waits for: the last ask ahead of it, and how many in all.
function D:behind_text(thread)
  local last = thread.queue[#thread.queue] or thread.running
  local n = #thread.queue + (thread.running and 1 or 0)
  local what = last.kind == "agent" and ("agent:%s “%s”"):format(last.agent, last.text or "")
    or ("`%s`"):format(last.command or "")
  if #what > 80 then what = what:sub(1, 77):gsub("[\x80-\xBF]*$", ""):gsub("[\xC0-\xFF]$", "") .. "…" end
  local state = last == thread.running and "running" or "queued"
  if n == 1 then return ("%s (%s)"):format(what, state) end
  return ("%s (%s) and %d more ahead"):format(what, state, n - 1)
end

-- A mention in a thread whose agent run is working goes to that run (its inbox, read at the
-- next turn boundary) instead of queueing a new one — unless it names another agent. Returns
-- the running ask when the message went to it. Only for a front whose messages are a
-- conversation (front.steers: Slack, a console typed into); a console reading a pipe takes each
-- line as an ask of its own, queued.
function D:deliver(msg, parsed)
  if not self.front.steers then return nil end
  local thread = self.threads[msg.thread]
  local r = thread and thread.running
  if not (r and r.inbox) or r.stop.aborted or self.closed then return nil end
  if parsed.agent and parsed.agent ~= r.agent then return nil end
  if parsed.model or parsed.effort then return nil end -- another model or effort: a run of its own
  r.inbox[#r.inbox + 1] = { user = msg.user, text = parsed.text, prepare = msg.prepare, msg = msg }
  r.events:emit{ type = "steered", user = msg.user, text = parsed.text }
  if r.handle then self:refresh(r) end
  log("info", "dispatch.delivered", { thread = msg.thread, ask = r.id, user = msg.user })
  return r
end

-- What a run's inbox still holds when the run has ended (it answered before reading them):
-- each is handled again, as a new ask of the thread. Dropped after a stop.
function D:requeue_inbox(ask)
  local left = ask.inbox
  if not left or #left == 0 then return end
  ask.inbox = nil
  if ask.stop.aborted then return end
  for _, m in ipairs(left) do self:handle(m.msg) end
end

-- Stop the thread's running command and drop its queued asks. Returns how many asks it hit.
function D:stop(thread_name, reason)
  local thread = self.threads[thread_name]
  local hit = 0
  if thread == nil then return hit end
  reason = reason or "stop asked in this thread"
  for _, ask in ipairs(thread.queue) do
    ask.stop:abort(reason)
    hit = hit + 1
  end
  if thread.running then
    thread.running.stop:abort(reason)
    hit = hit + 1
  end
  return hit
end

-- A message from a front. Returns at once: a run goes to its thread's queue.
-- msg: {thread, user, text, prepare?}. Returns the ask for a run, else nil.
function D:handle(msg)
  local snap = self.policy()
  local parsed = parser.parse(msg.text)
  if parsed.kind == "help" then
    return self:answer(msg, self:help_text(snap))
  end
  if parsed.kind == "stop" then
    local who = msg.user and (" by " .. msg.user) or ""
    if self:stop(msg.thread, "stop asked in this thread" .. who) == 0 then
      self:answer(msg, "Nothing is running in this thread; there is nothing to stop.")
    end
    return
  end
  if parsed.kind == "onboard" then
    return core.go(function()
      self:answer(msg, stack.onboard(self.build_opts, snap, parsed.repo))
    end)
  end
  if parsed.kind == "malformed" then
    return self:answer(msg, self:help_text(snap, "I could not read that ask: " .. parsed.reason .. "."))
  end
  if self.closed then
    return self:answer(msg, "Not taking new asks: switchboard is shutting down.")
  end
  if parsed.kind == "free_text" and self:deliver(msg, parsed) then return nil end
  if parsed.kind == "free_text" then
    -- An agent run: the repository it names binds only for an agent that works in one.
    local name, def = self:resolve(snap, msg, { agent = parsed.agent })
    if not name then return self:answer(msg, def) end
    local repo = def.resources and def.resources.repository and agent_run.repo_in(parsed.text)
    if repo then
      name, def = self:resolve(snap, msg, { agent = name, repo = repo })
      if not name then return self:answer(msg, def) end
    end
    parsed.repo = repo
    local used, choice = self:choose(snap, self.threads[msg.thread], def, parsed, name)
    if not used then return self:answer(msg, tostring(choice)) end
    self:thread(msg.thread).choice = choice
    return self:enqueue(msg, snap, parsed, name, used)
  end
  local name, def = self:resolve(snap, msg, parsed)
  if not name then return self:answer(msg, def) end
  return self:enqueue(msg, snap, parsed, name, def)
end

---------------------------------------------------------------------------------------------
-- Shutdown

-- Take nothing new; asks not started yet are dropped; running asks get grace_ms to finish,
-- then are killed (their process groups die). Returns when every ask has ended.
function D:drain(grace_ms, kill_now)
  self.closed = true
  for _, thread in pairs(self.threads) do
    for _, ask in ipairs(thread.queue) do ask.stop:abort("switchboard is shutting down") end
  end
  local timer_off = kill_now and core.signal(kill_now) or core.signal()
  local deadline = kill_now and core.signal(kill_now) or core.signal()
  core.go(function()
    if core.sleep(grace_ms, timer_off) then deadline:abort("drain time over") end
  end)
  local idle = self:wait_idle(deadline)
  timer_off:abort("drained")
  if not idle then
    log("warn", "dispatch.drain_kill", { asks = self.asks.count })
    self.shutdown:abort("switchboard is shutting down: the drain time ran out")
    self:wait_idle()
  end
  return idle
end

-- Stop everything at once.
function D:kill(reason)
  self.closed = true
  self.shutdown:abort(reason or "switchboard is shutting down")
end

return M
