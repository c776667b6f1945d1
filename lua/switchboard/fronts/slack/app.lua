-- The Slack bot: events in (Socket Mode and/or the Events API), asks to the dispatcher, cards
-- back to the thread. commands/slack.lua parses options and starts it.
--
--   local app = app.new{bot_api, app_api?, secret?, bot = {user_id, bot_id, team_id, …},
--                       dispatcher_opts = {stack, outputs_dir, …}, policy = policy.current,
--                       sandbox_urls = {…}?, sandbox_token? (the sandboxd list /readyz probes),
--                       record? (store/record.lua: the seen keys, shared across restarts)}
--   app:on_event(payload, source)        an event_callback payload
--   app:on_interactive(payload)          a block_actions payload (the Stop button)
--   app:on_github(event, delivery, payload)  a verified GitHub webhook (fronts/slack/review.lua):
--                                        a review comment on the bot's pull request that
--                                        mentions it starts a follow-up in the PR's thread
--   app:start_socket_mode() → true | nil, err;   app:listen(host, port) → server | nil, err
--   app:shutdown(drain_ms, kill_now)     stop reading, drain the asks, flush the cards
local core = require("switchboard.core")
local dispatcher = require("switchboard.dispatch.dispatcher")
local in_flight = require("switchboard.dispatch.in_flight")
local pushes = require("switchboard.dispatch.pushes")
local context = require("switchboard.fronts.slack.context")
local dedup = require("switchboard.fronts.slack.dedup")
local events = require("switchboard.fronts.slack.events")
local front_mod = require("switchboard.fronts.slack.front")
local http = require("switchboard.fronts.slack.http")
local socket_mode = require("switchboard.fronts.slack.socket_mode")
local readiness = require("switchboard.fronts.slack.readiness")
local review = require("switchboard.fronts.slack.review")
local schedule = require("switchboard.dispatch.schedule")
local text_mod = require("switchboard.fronts.slack.text")
local github_front = require("switchboard.fronts.github.front")
local github_issues = require("switchboard.fronts.github.issues")
local github_pulls = require("switchboard.fronts.github.pulls")
local issues_api = require("switchboard.github.issues")

local M = {}
local App = {}
App.__index = App

function M.new(opts)
  local self = setmetatable({
    bot = opts.bot, policy = opts.policy, secret = opts.secret, app_api = opts.app_api,
    github_secret = opts.github_secret,
    github_login = opts.github_login, -- the App's bot user (GITHUB_BOT_LOGIN): "@name" starts runs on issues
    log = opts.log or core.log, closed = false, servers = {},
    intake = in_flight.new(), -- Events API requests answered 200 whose event is not handed over yet
    pages = opts.pages, -- the run pages' handler (pages/routes.lua), served on every listener
    log_hide = opts.log_hide, -- path prefixes whose rest the request log never shows (core.http.serve)
    bot_api = opts.bot_api, names = {}, -- user id → display name, for the thread's context
  }, App)
  -- Seen keys live in the thread's record too (opts.record), for the replay window: an event
  -- replayed after a restart, or delivered to the other of two overlapping processes, runs once.
  local ttl = self.policy().slack.events.dedup_ms
  local function seen(prefix, store)
    return dedup.new{ ttl_ms = ttl, now_ms = core.now_ms, store = store, prefix = prefix, log = self.log }
  end
  self.seen_events = seen("slack.event:", opts.record)
  self.seen_messages = seen("slack.message:", opts.record)
  self.seen_comments = seen("github:", opts.record)
  self.seen_deliveries = seen("github.delivery:", nil) -- unsigned: a hint that saves a lookup
  self.front = front_mod.new{ api = opts.bot_api, policy = opts.policy, log = self.log }
  local dopts = {}
  for k, v in pairs(opts.dispatcher_opts or {}) do dopts[k] = v end
  -- a run GitHub started (thread "github:OWNER/REPO#N") has its card as an issue comment
  self.github_front = github_front.new{ credentials = dopts.stack and dopts.stack.credentials,
                                        policy = opts.policy, log = self.log }
  dopts.front = M.router(self.front, self.github_front)
  dopts.policy = opts.policy
  dopts.thread_key = function(thread)
    return github_front.place(thread) and thread or "slack:" .. thread
  end
  self.d = dispatcher.new(dopts)
  self.readiness = readiness.new{ socket = function() return self.sm end, policy = opts.policy,
                                  sandbox_urls = opts.sandbox_urls, sandbox_token = opts.sandbox_token }
  return self
end

-- The dispatcher's front: a GitHub thread's cards go to its issue, every other to Slack.
function M.router(slack, github)
  local function pick(thread) return github_front.place(thread) and github or slack end
  return {
    steers = slack.steers, -- a mention in a working run's thread goes to that run (dispatcher deliver)
    post = function(_, thread, msg, reply_to)
      local f = pick(thread)
      return { front = f, h = f:post(thread, msg, reply_to) }
    end,
    update = function(_, h, msg) return h.front:update(h.h, msg) end,
    -- a file (a screenshot) posted in the thread: Slack's threads only
    attach_file = function(_, thread, file, reply_to)
      if github_front.place(thread) then return nil end
      return slack:attach_file(thread, file, reply_to)
    end,
    link_for = function(_, thread, reply_to)
      if github_front.place(thread) then return nil end
      return slack:link_for(thread, reply_to)
    end,
  }
end

-- Policy: allowed workspaces ("token" = the bot's own), channels and users.
function M.allowed(allow, bot, team, channel, user)
  local team_ok = false
  for _, w in ipairs(allow.workspaces) do
    if w == team or (w == "token" and team == bot.team_id) then team_ok = true end
  end
  if not team_ok then return false end
  local function listed(list, id)
    if #list == 0 then return true end
    for _, x in ipairs(list) do if x == id then return true end end
    return false
  end
  return listed(allow.channels, channel) and listed(allow.users, user)
end

-- An event acked (Socket Mode) or answered 200 (Events API) runs, also when a TERM came
-- meanwhile: shutdown waits for it to reach the dispatcher before the drain closes it.
function App:on_event(payload, source)
  if type(payload) ~= "table" then return end
  if not self.seen_events:first(payload.event_id) then
    self.log("info", "slack.duplicate_event", { event_id = tostring(payload.event_id), source = source })
    return
  end
  local ask, why = events.ask(payload, self.bot)
  if not ask then
    self.log("debug", "slack.event_ignored", { event_id = tostring(payload.event_id), why = why })
    return
  end
  if not self.seen_messages:first(ask.channel .. "/" .. ask.ts) then
    self.log("info", "slack.duplicate_message", { event_id = tostring(payload.event_id), source = source })
    return
  end
  local snap = self.policy()
  local where = { channel = ask.channel, thread_ts = ask.thread_ts, ask_ts = ask.ts }
  if not M.allowed(snap.slack.allow, self.bot, ask.team, ask.channel, ask.user) then
    self.log("info", "slack.refused", { team = ask.team, channel = ask.channel, user = ask.user })
    return self.front:say(where, snap.slack.refusal)
  end
  local thread = events.thread_name(ask.team, ask.channel, ask.thread_ts)
  self.log("info", "slack.ask", { thread = thread, user = ask.user, event_id = tostring(ask.event_id),
                                  source = source })
  self.d:handle{ thread = thread, user = ask.user, text = ask.text,
                 reply_to = where, -- the card's place and the ask's reaction (fronts/slack/front.lua)
                 -- an agent run's context from Slack, fetched in its own task when it starts
                 prepare = function(first) return self:context(ask, first) end,
                 -- who asked, by name, for the run's page
                 user_name = function() return context.name_of(self.bot_api, ask.user, self.names) end }
end

-- The thread's earlier messages (for the thread's first run) and the ask's files.
function App:context(ask, first)
  return context.gather(self.bot_api, self.policy().slack.context, {
    channel = ask.channel, thread_ts = ask.thread_ts, ask_ts = ask.ts, files = ask.files,
    first = first, names = self.names, bot_user = self.bot.user_id, -- its mentions were asks
  })
end

function App:on_interactive(payload)
  local act, why = events.stop_action(payload, self.bot)
  if not act then
    self.log("debug", "slack.action_ignored", { why = why })
    return
  end
  local snap = self.policy()
  if not M.allowed(snap.slack.allow, self.bot, act.team, act.channel, act.user) then
    self.log("info", "slack.refused", { team = act.team, channel = act.channel, user = act.user })
    return
  end
  local thread = events.thread_name(act.team, act.channel, act.thread_ts)
  local hit = self.d:stop(thread, "Stop pressed by <@" .. act.user .. ">")
  self.log("info", "slack.stop", { thread = thread, user = act.user, asks = hit })
end

-- The Slack thread whose pull request is url (the dispatcher's threads: after a restart, the
-- ones it restored from the record).
function App:thread_of_pr(url)
  for name, t in pairs(self.d.threads or {}) do
    if type(t) == "table" and t.pr and t.pr.url == url then return name end
  end
  return nil
end

function App:on_github(event, delivery, payload)
  if not self.seen_deliveries:first(delivery or "") then
    self.log("info", "github.duplicate_delivery", { delivery = tostring(delivery) })
    return
  end
  local pushed = pushes.read(event, payload, core.wall_ms() // 1000)
  if pushed then -- a push to a default branch: that repository's prepared base is stale
    pushes.note(self.d, pushed, core.wall_ms() // 1000)
    return self.log("info", "github.push", { delivery = tostring(delivery), repo = pushed })
  end
  local snap = self.policy()
  if event == "issues" or (event == "issue_comment" and type(payload.issue) == "table"
      and type(payload.issue.pull_request) ~= "table") then
    return self:on_issue(event, delivery, payload, snap)
  end
  if event == "pull_request" then return self:on_pull_request(event, delivery, payload, snap) end
  local pol = snap.agents.review_comments
  local c, why = review.read(event, payload, pol, core.wall_ms() // 1000, snap.slack.events.dedup_ms // 1000)
  if not c then
    self.log("info", "github.webhook_ignored", { delivery = tostring(delivery), event = tostring(event), why = why })
    return
  end
  local thread = self:thread_of_pr(c.pr_url)
  local where = thread and events.parse_thread(thread)
  if not where then
    self.log("info", "github.webhook_ignored", { delivery = tostring(delivery), why = "not a pull request of this bot's threads",
                                                 pr = c.pr_url })
    return
  end
  -- once per comment, whatever the (unsigned) delivery id says, across restarts
  local key = review.seen_key(event, payload)
  if not key then
    self.log("info", "github.webhook_ignored", { delivery = tostring(delivery), why = "the delivery names no comment id" })
    return
  end
  if not self.seen_comments:first(key) then
    self.log("info", "github.duplicate_comment", { delivery = tostring(delivery), comment = key })
    return
  end
  self.log("info", "github.review_comment", { thread = thread, pr = c.pr_url, user = c.user, delivery = tostring(delivery) })
  self.d:handle{ thread = thread, user = "github:" .. tostring(c.user),
                 text = "agent:" .. pol.agent .. " " .. review.ask_text(c),
                 reply_to = { channel = where.channel, thread_ts = where.thread_ts },
                 review = c, -- the run replies on the pull request (dispatch/github_reply.lua)
                 notes = { ("started by a review comment from @%s on pull request #%s"):format(tostring(c.user),
                   tostring(c.pr_number)) } }
end

-- What a GitHub delivery asks for (an issue or a pull request: `item`, as its module — `from`,
-- github/issues.lua or github/pulls.lua — read it, or nil and why), the first time its seen key
-- comes; nil, logged, for a delivery that asks for nothing, names nothing to key it by, or came
-- before. what: the duplicate's log event's end; names: what the key is made of.
function App:first_delivery(from, event, delivery, payload, what, names, item, why)
  if not item then
    self.log("info", "github.webhook_ignored", { delivery = tostring(delivery), event = tostring(event), why = why })
    return nil
  end
  local key = from.seen_key(event, payload)
  if not key then
    self.log("info", "github.webhook_ignored", { delivery = tostring(delivery), why = "the delivery names no " .. names })
    return nil
  end
  if not self.seen_comments:first(key) then
    self.log("info", "github.duplicate_" .. what, { delivery = tostring(delivery), key = key })
    return nil
  end
  return item
end

-- An issue (opened, assigned to the bot, or a comment mentioning it) starts a run in the
-- issue's own thread; its card is an issue comment (fronts/github/front.lua).
function App:on_issue(event, delivery, payload, snap)
  local pol = snap.agents.issues
  local i = self:first_delivery(github_issues, event, delivery, payload, "issue", "issue or comment id",
    github_issues.read(event, payload, pol, self.github_login, core.wall_ms() // 1000, snap.slack.events.dedup_ms // 1000))
  if not i then return end
  local thread = github_issues.thread(i.repo, i.number)
  self.log("info", "github.issue", { thread = thread, how = i.how, user = i.user, delivery = tostring(delivery) })
  local comments
  local o = self.github_front:api(i.repo, i.number)
  if o and pol.max_comments > 0 then
    local err
    comments, err = issues_api.comments(o, pol.max_comments)
    if not comments then self.log("warn", "github.api_failed", { call = "issue comments", error = tostring(err):match("^[^\n]*") }) end
  end
  self.d:handle{ thread = thread, user = "github:" .. tostring(i.user),
                 text = "agent:" .. pol.agent .. " " .. github_issues.ask_text(i, comments),
                 issue = i, -- its pull request says "Fixes #N" (dispatch/agent_run.lua)
                 notes = { ("started by @%s on issue #%d (%s)"):format(tostring(i.user), i.number, i.how) } }
end

-- A pull request opened (or marked ready) in a repository policy lists: the review agent runs in
-- its thread; its answer becomes a review with line comments (dispatch/pr_review.lua).
function App:on_pull_request(event, delivery, payload, snap)
  local pol = snap.agents.pull_request_reviews
  local pr = self:first_delivery(github_pulls, event, delivery, payload, "pull_request", "pull request id or head",
    github_pulls.read(event, payload, pol, self.github_login))
  if not pr then return end
  local thread = github_issues.thread(pr.repo, pr.number)
  self.log("info", "github.pull_request_review", { thread = thread, user = pr.user, delivery = tostring(delivery) })
  self.d:handle{ thread = thread, user = "github:" .. tostring(pr.user),
                 text = "agent:" .. pol.agent .. " " .. github_pulls.ask_text(pr),
                 pr_review = pr, -- its answer is posted as a review (dispatch/github_reply.lua → dispatch/pr_review.lua)
                 notes = { ("reviewing pull request #%d opened by @%s"):format(pr.number, tostring(pr.user)) } }
end

-- A scheduled ask (dispatch/schedule.lua): a new thread in the schedule's channel, its first
-- message saying which schedule asked what, then the ask as if mentioned there.
function App:on_schedule(e, at_s)
  local snap = self.policy()
  local head = ("Scheduled ask `%s` (%s, %s UTC): agent:%s%s — %s"):format(e.name, e.cron,
    os.date("!%Y-%m-%d %H:%M", at_s), e.agent, e.repository and (" in " .. e.repository) or "", e.ask)
  local posted, err = self.bot_api:call("chat.postMessage", { channel = e.channel, text = text_mod.escape(head),
    unfurl_links = false, unfurl_media = false }, { channel = e.channel, give_up_ms = snap.slack.api.final_give_up_ms })
  if not posted then
    self.log("warn", "slack.api_failed", { call = "chat.postMessage", channel = e.channel, schedule = e.name,
      error = err and (err.error or err.kind), message = err and err.message })
    return
  end
  local thread = events.thread_name(self.bot.team_id, e.channel, posted.ts)
  self.log("info", "slack.scheduled_ask", { thread = thread, schedule = e.name })
  self.d:handle{ thread = thread, user = "schedule:" .. e.name, reply_to = { channel = e.channel, thread_ts = posted.ts },
                 text = ("agent:%s %s%s"):format(e.agent, e.repository and ("in " .. e.repository .. ": ") or "", e.ask) }
end

function App:start_schedules(record, stop)
  self.schedules_stop = core.signal(stop)
  self.schedules = schedule.new{ policy = self.policy, record = record, log = self.log,
    fire = function(e, at_s) core.go(function() self:on_schedule(e, at_s) end) end }
  self.schedules:start(self.schedules_stop)
end

function App:on_envelope(env, conn_id)
  local source = "socket:" .. tostring(conn_id)
  if env.type == "events_api" then return self:on_event(env.payload, source) end
  if env.type == "interactive" then return self:on_interactive(env.payload) end
  self.log("debug", "slack.envelope_ignored", { type = tostring(env.type) })
end

function App:start_socket_mode()
  self.sm = socket_mode.new{
    api = self.app_api, policy = self.policy, log = self.log,
    on_envelope = function(env, conn_id) self:on_envelope(env, conn_id) end,
  }
  return self.sm:start()
end

function App:handler(with_events)
  if not with_events then
    return http.handler{ secret = nil, policy = self.policy, health_only = true,
                         readiness = self.readiness, pages = self.pages }
  end
  return http.handler{
    secret = self.secret, policy = self.policy, log = self.log, readiness = self.readiness,
    pages = self.pages, intake = self.intake, closing = function() return self.closed end,
    on_event = function(payload, retry) self:on_event(payload, retry and ("http retry " .. retry) or "http") end,
    on_interactive = function(payload) self:on_interactive(payload) end,
    github_secret = self.github_secret,
    on_github = self.github_secret and function(event, delivery, payload) self:on_github(event, delivery, payload) end or nil,
  }
end

function App:listen(host, port, with_events)
  local limits = self.policy().timeouts.server
  local srv, err = core.http.serve{
    host = host, port = port, handler = self:handler(with_events),
    log_hide = self.log_hide,
    limits = { max_header_bytes = limits.max_header_bytes, max_body_bytes = 1 << 20,
               request_timeout_ms = limits.request_timeout_ms, idle_timeout_ms = limits.idle_timeout_ms,
               max_connections = limits.max_connections },
  }
  if not srv then return nil, err end
  self.servers[#self.servers + 1] = srv
  return srv
end

-- Yields until `done` or `deadline` fires: true when done came first.
local function until_either(done, deadline)
  -- a sleep long enough never to end on its own: it ends when one of them aborts
  core.sleep(24 * 3600 * 1000, core.signal(done, deadline))
  return done.aborted
end

-- TERM: no new events (Socket Mode's connections close: Slack sends what is not acked to the
-- app's other connections — the process that replaces this one; the Events API answers 503
-- and Slack retries); every event taken before runs; running asks get drain_ms − flush_ms,
-- then are killed; every card's last state is sent in what is left. Every wait is bounded by the one deadline (drain_ms
-- after the TERM, or a second TERM: kill_now): whatever Slack, the model API or GitHub do, this
-- returns by then (→ true when everything drained and every card was sent, false when cut).
function App:shutdown(drain_ms, kill_now, flush_ms)
  self.closed = true
  if self.schedules_stop then self.schedules_stop:abort("shutting down") end
  local deadline = kill_now and core.signal(kill_now) or core.signal()
  local timer_off = core.signal(deadline)
  core.go(function()
    if core.sleep(drain_ms, timer_off) then deadline:abort("drain time over") end
  end)
  if self.sm then self.sm:stop() end
  for _, srv in ipairs(self.servers) do srv:close() end
  local drained = core.signal()
  core.go(function()
    -- what was acked or answered 200 before the stop reaches the dispatcher first (then it runs
    -- in the drain like every ask); what came after was not acked, and Slack sends it again
    if self.sm then self.sm:handed_over(deadline) end
    self.intake:wait(deadline)
    self.d:drain(math.max(0, drain_ms - (flush_ms or 0)), deadline)
    drained:abort("drained")
  end)
  local ok = until_either(drained, deadline) and self.front:flush(deadline) and self.github_front:flush(deadline)
  timer_off:abort("over")
  if not ok then
    self.log("warn", "slack.drain_cut", { drain_ms = drain_ms, asks = self.d.asks and self.d.asks.count,
      why = kill_now and kill_now.aborted and "a second signal" or "the drain time ran out" })
  end
  return ok
end

return M
