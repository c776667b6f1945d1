-- `switchboard slack`: the Slack bot. Socket Mode (SLACK_APP_TOKEN) and/or the Events API
-- (--listen + SLACK_SIGNING_SECRET); the Web API with SLACK_BOT_TOKEN. See docs/slack.md.
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local repo_secrets = require("switchboard.store.secrets")
local policy = require("switchboard.policy")
local state = require("switchboard.state")
local webapi = require("switchboard.fronts.slack.webapi")
local app_mod = require("switchboard.fronts.slack.app")
local host_mod = require("switchboard.launch.host")
local factory = require("switchboard.exec.factory")
local others = require("switchboard.launch.others")
local rendezvous = require("switchboard.exec.rendezvous")

local M = {
  name = "slack",
  summary = "the Slack bot: mentions and DMs become asks, answered with a live card in the thread",
}

M.EXIT = prologue.EXIT

M.help = [[
Usage: switchboard slack [OPTIONS]

Runs the Slack bot. Mention it in a channel (or DM it) with an ask — the same grammar as the
console: run `COMMAND`, agent:NAME run `COMMAND` [in OWNER/REPO], stop, help — and it answers
in the thread with a status card that updates while the command runs, with a Stop button.
Each Slack thread is a thread of asks with its own workspace.

Connections (one or both):
  Socket Mode     SLACK_APP_TOKEN=xapp-…  (no public URL needed; the usual choice)
  Events API      --listen HOST:PORT and SLACK_SIGNING_SECRET; Slack posts to
                  http(s)://YOUR-HOST/slack/events and /slack/actions (behind your TLS proxy)

Environment:
  SLACK_BOT_TOKEN       xoxb-… (required): the Web API; auth.test at start names the bot
  SLACK_APP_TOKEN       xapp-… with connections:write: Socket Mode
  SLACK_SIGNING_SECRET  the app's signing secret: verifies Events API requests
  GITHUB_WEBHOOK_SECRET  the GitHub App's webhook secret: with --listen, POST /github/webhook
                        takes review comments on the bot's pull requests (docs/agent.md)
                        and issues that start runs (docs/github.md)
  GITHUB_BOT_LOGIN      the GitHub App's bot user (name[bot]): an issue assigned to it, or a
                        comment mentioning @name, starts a run (docs/github.md)
  SLACK_API_URL         the Web API's base (default https://slack.com/api)

Options:
  --listen HOST:PORT         serve the Events API (and GET /healthz) on this address
  --health-listen HOST:PORT  serve only GET /healthz (live) and GET /readyz (ready: Slack
                             connected, policies loaded, the sandbox reachable)
  --metrics-listen HOST:PORT serve only GET /metrics (Prometheus text format; keep it private)
  --backend NAME             override policy's backend, one of:
                               {backends}
  --sandbox-url URL          the sandboxd for --backend sandbox (token: $SANDBOX_TOKEN)
  --workspace-root DIR       where local workspaces live (default: $SWITCHBOARD_STATE_DIR/workspaces)
  --trace FILE               write exec.* spans as JSON lines to FILE (`-` for stderr)
  --allow-unwalled-commands  start even though some agent's commands would run unwalled on
                             this host, within reach of the bot's secrets (logged at start and
                             marked on every card; never do this for people you do not trust)

The bot never runs anyone's command unwalled by default: its agents' commands go to the
sandbox when SANDBOX_URL and SANDBOX_TOKEN are set, else to the local executor behind walls
(policies/isolation.lua local_walls; docs/isolation.md "Fronts that serve other people"). When
policy would run them unwalled the bot refuses to start and says how to fix it; so it does when
they would go to the walled local executor and the bot is not root (the walls need root: the
package's unit runs the bot as the switchboard user and points it at sandboxd).

Who may use the bot, the card's pace and the drain time are in policies/slack.lua (default:
anyone in the workspace the bot token belongs to). SIGHUP reloads the policies; TERM/INT stop
taking events, let running asks finish for slack.drain_ms - slack.flush_ms, kill the rest (their
cards say so), send the final cards, and exit 0 within slack.drain_ms whatever Slack is doing;
a second TERM/INT kills at once.

Examples:
  SLACK_BOT_TOKEN=xoxb-… SLACK_APP_TOKEN=xapp-… switchboard slack
  SLACK_BOT_TOKEN=xoxb-… SLACK_APP_TOKEN=xapp-… switchboard slack --health-listen 127.0.0.1:8081
  SLACK_BOT_TOKEN=xoxb-… SLACK_SIGNING_SECRET=… switchboard slack --listen 127.0.0.1:3000
  switchboard --log-format json slack --backend sandbox --sandbox-url http://127.0.0.1:8080
]]

local SPEC = {
  listen = "string", ["health-listen"] = "string", ["metrics-listen"] = "string", backend = "string", ["sandbox-url"] = "string",
  ["workspace-root"] = "string", trace = "string", ["allow-unwalled-commands"] = "flag",
}

local function env(getenv, name)
  local v = getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- What the environment and the options must hold, in the order they are checked: each a
-- condition it fails on and the configuration problem that names.
local ENV_CHECKS = {
  { fails = function(e) return not e.bot end,
    problem = "SLACK_BOT_TOKEN is not set: give the app's Bot User OAuth Token (xoxb-…, under "
      .. "OAuth & Permissions)" },
  { fails = function(e) return not e.bot:match("^xoxb%-") end,
    problem = "SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)" },
  { fails = function(e) return e.app and not e.app:match("^xapp%-") end,
    problem = "SLACK_APP_TOKEN does not look like an app-level token (it should start with xapp-; "
      .. "create one with connections:write under Basic Information)" },
  { fails = function(e, opts) return opts.listen and not e.secret end,
    problem = "--listen serves the Events API, which needs SLACK_SIGNING_SECRET (Basic Information → "
      .. "Signing Secret)" },
  { fails = function(e, opts) return not e.app and not opts.listen end,
    problem = "no way to receive events: set SLACK_APP_TOKEN (Socket Mode) or give --listen "
      .. "HOST:PORT with SLACK_SIGNING_SECRET (Events API)" },
  { fails = function(e) return not e.api_url:match("^https?://") end,
    problem = "SLACK_API_URL must be an http(s) URL" },
}

-- The tokens and what they are for, checked before anything talks to Slack.
function M.read_env(getenv, opts)
  local e = {
    bot = env(getenv, "SLACK_BOT_TOKEN"), app = env(getenv, "SLACK_APP_TOKEN"),
    secret = env(getenv, "SLACK_SIGNING_SECRET"),
    github_secret = env(getenv, "GITHUB_WEBHOOK_SECRET"), -- review comments (docs/agent.md)
    api_url = env(getenv, "SLACK_API_URL") or "https://slack.com/api",
  }
  for _, check in ipairs(ENV_CHECKS) do
    if check.fails(e, opts) then return nil, core.error("config", check.problem) end
  end
  return e
end

local function identify(api)
  local who, err = api:call("auth.test", {}, {})
  if not who and err.kind ~= "slack" then
    return nil, core.error("unavailable", ("Slack's Web API (%s) could not be reached for auth.test: %s. Check the network "
      .. "and SLACK_API_URL"):format(api.url, tostring(err.message)))
  end
  if not who then
    return nil, core.error("config", ("SLACK_BOT_TOKEN was refused by Slack's auth.test: %s. Check the Bot User "
      .. "OAuth Token (xoxb-…) and that the app is installed in the workspace"):format(err.error or err.message))
  end
  return { user_id = who.user_id, bot_id = who.bot_id, team_id = who.team_id, team = who.team,
           user = who.user }
end

-- The options that take HOST:PORT, with the example port each one's problem names.
local LISTEN_OPTIONS = { { "listen", 3000 }, { "metrics_listen", 9091 }, { "health_listen", 8081 } }

-- The command's own argument checks, before anything loads.
local function usage_problem(p)
  if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
  for _, o in ipairs(LISTEN_OPTIONS) do
    local value = p.opts[o[1]]
    if value and not host_mod.host_port(value) then
      return ("--%s takes HOST:PORT, e.g. 127.0.0.1:%d"):format((o[1]:gsub("_", "-")), o[2])
    end
  end
end

function M.run(argv, ctx)
  local p, status = prologue.start_with_backend(M, argv, ctx, SPEC, usage_problem)
  if not p then return status end
  local opts, snap = p.opts, p.snap
  local e, why = M.read_env(os.getenv, opts)
  if not e then return p:fail(M.EXIT.config, why) end
  local stack_opts = {
    workspace_root = opts.workspace_root or state.workspaces(),
    sandbox_url = opts.sandbox_url, credentials = ctx.credentials,
    force_backend = opts.backend, sink = nil, front = "slack",
    secrets = repo_secrets.source{ path = state.dir() .. "/" .. repo_secrets.FILE },
  }
  -- a front that serves other people: not dumpable, secrets redacted, never unwalled by default
  local refused = others.guard(p, stack_opts, { people = "Slack users'" })
  if refused then return refused end
  for _, secret in ipairs({ e.bot, e.app, e.secret }) do core.log_redact(secret) end
  local sink, trace_status = p:trace_sink()
  if opts.trace and not sink then return trace_status end
  stack_opts.sink = sink

  local a = snap.slack.api
  local bot_api = webapi.new{ url = e.api_url, token = e.bot, deadline_ms = a.deadline_ms,
                              max_retry_after_ms = a.max_retry_after_ms }
  local bot, berr = identify(bot_api)
  if not bot then return p:fail(M.EXIT.config, berr) end
  core.log("info", "slack.bot", { user_id = bot.user_id, team_id = bot.team_id, name = bot.user })
  -- the record, pages, listeners, reload and drain: the host's (launch/host.lua), as the console's
  return host_mod.serve(p, M.front{ p = p, env = e, bot = bot, bot_api = bot_api, stack = stack_opts, sink = sink })
end

-- The Slack front as launch/host.lua hosts it: the app (fronts/slack/app.lua) over the
-- host's dispatcher options; Socket Mode and/or the Events API; its own drain.
local Front = {}
Front.__index = Front

function M.front(w)
  local opts, snap, e = w.p.opts, w.p.snap, w.env
  local self = setmetatable(w, Front)
  self.listeners = {
    { "--listen", opts.listen, "events", function(h, port) return self.app:listen(h, port, true) end },
    { "--health-listen", opts.health_listen, "health", function(h, port) return self.app:listen(h, port, false) end },
    { "--metrics-listen", opts.metrics_listen, "metrics" },
  }
  self.sandbox_url = opts.sandbox_url or os.getenv(snap.execution.sandbox.url_env)
  self.socket_mode = e.app ~= nil
  self.main = core.current() -- the task host.serve runs in: woken when the drain is over
  return self
end

function Front:dispatcher(hosted)
  local e, snap, a = self.env, self.p.snap, self.p.snap.slack.api
  self.app = app_mod.new{
    bot = self.bot, policy = policy.current, secret = e.secret, bot_api = self.bot_api,
    github_secret = e.github_secret, github_login = os.getenv("GITHUB_BOT_LOGIN"),
    record = hosted.record, -- the seen event ids and comments (fronts/slack/dedup.lua), across restarts
    app_api = e.app and webapi.new{ url = e.api_url, token = e.app, deadline_ms = a.deadline_ms,
                                     max_retry_after_ms = a.max_retry_after_ms } or nil,
    sandbox_urls = factory.configured(snap, self.stack).sandbox and self.sandbox_url
      and rendezvous.split(self.sandbox_url) or nil,
    sandbox_token = os.getenv(snap.execution.sandbox.token_env),
    dispatcher_opts = hosted:dispatcher_options{ stack = self.stack },
    pages = hosted.pages,
    log_hide = hosted.log_hide, -- a page's token is its credential: never in a log line
  }
  return self.app.d
end

function Front:start(hosted)
  self.app:start_schedules(hosted.record, hosted.stop) -- policies' scheduled asks (docs/schedules.md)
  if self.socket_mode then
    local ok, serr = self.app:start_socket_mode()
    if not ok then
      self.app:shutdown(0)
      return nil, core.error("config", serr.kind == "slack" and ("SLACK_APP_TOKEN was refused by Slack's apps.connections.open: "
        .. tostring(serr.error) .. ". Check the app-level token (xapp-…, scope connections:write) and "
        .. "that Socket Mode is on") or ("Socket Mode could not connect: " .. tostring(serr.message)))
    end
  end
  core.log("info", "slack.ready", { socket_mode = self.socket_mode, events_api = self.p.opts.listen ~= nil })
  return true
end

function Front:reloaded(new, reload_errs)
  if new then
    core.log("info", "policy.reloaded", { version = new.version:sub(1, 12) })
  else
    core.log("warn", "policy.reload_failed", { errors = table.concat(reload_errs, "; ") })
  end
end

function Front:ready() return "connected to Slack" end -- READY=1: Type=notify's start completes here

-- TERM/INT: stop taking events, let running asks finish, flush the cards — within
-- slack.drain_ms whatever Slack does (fronts/slack/app.lua's shutdown).
function Front:drain(name, kill_now)
  local s = policy.current().slack
  core.log("info", "slack.draining", { signal = name, drain_ms = s.drain_ms })
  self.app:shutdown(s.drain_ms, kill_now, s.flush_ms)
  core.wake(self.main, true)
end

function Front:serve() core.suspend() end

function Front:close()
  if self.sink and self.sink.close then self.sink:close() end
  core.log("info", "slack.stopped", {})
end

return M
