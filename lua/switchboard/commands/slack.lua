-- `switchboard slack`: the Slack bot. Socket Mode (SLACK_APP_TOKEN) and/or the Events API
-- (--listen + SLACK_SIGNING_SECRET); the Web API with SLACK_BOT_TOKEN. See docs/slack.md.
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local metrics = require("switchboard.metrics")
local policy = require("switchboard.policy")
local state = require("switchboard.state")
local console = require("switchboard.commands.console")
local webapi = require("switchboard.fronts.slack.webapi")
local app_mod = require("switchboard.fronts.slack.app")

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
  SLACK_API_URL         the Web API's base (default https://slack.com/api)

Options:
  --listen HOST:PORT         serve the Events API (and GET /healthz) on this address
  --health-listen HOST:PORT  serve only GET /healthz (for Socket Mode deployments)
  --metrics-listen HOST:PORT serve only GET /metrics (Prometheus text format; keep it private)
  --backend NAME             override policy's backend: local or sandbox
  --sandbox-url URL          the sandboxd for --backend sandbox (token: $SANDBOX_TOKEN)
  --workspace-root DIR       where local workspaces live (default: $SWITCHBOARD_STATE_DIR/workspaces)
  --trace FILE               write exec.* spans as JSON lines to FILE (`-` for stderr)

Who may use the bot, the card's pace and the drain time are in policies/slack.lua (default:
anyone in the workspace the bot token belongs to). SIGHUP reloads the policies; TERM/INT stop
taking events, let running asks finish for slack.drain_ms, kill the rest (their cards say so)
and exit 0; a second TERM/INT kills at once.

Examples:
  SLACK_BOT_TOKEN=xoxb-… SLACK_APP_TOKEN=xapp-… switchboard slack
  SLACK_BOT_TOKEN=xoxb-… SLACK_APP_TOKEN=xapp-… switchboard slack --health-listen 127.0.0.1:8081
  SLACK_BOT_TOKEN=xoxb-… SLACK_SIGNING_SECRET=… switchboard slack --listen 127.0.0.1:3000
  switchboard --log-format json slack --backend sandbox --sandbox-url http://127.0.0.1:8080
]]

local SPEC = {
  listen = "string", ["health-listen"] = "string", ["metrics-listen"] = "string", backend = "string", ["sandbox-url"] = "string",
  ["workspace-root"] = "string", trace = "string",
}

-- "HOST:PORT" with a numeric address ("[::1]:8080" for IPv6).
local function host_port(text)
  local host, port = text:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = text:match("^([^:]+):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then return nil end
  return host, port
end

local function env(getenv, name)
  local v = getenv(name)
  if v == nil or v == "" then return nil end
  return v
end

-- The tokens and what they are for, checked before anything talks to Slack.
function M.read_env(getenv, opts)
  local e = {
    bot = env(getenv, "SLACK_BOT_TOKEN"), app = env(getenv, "SLACK_APP_TOKEN"),
    secret = env(getenv, "SLACK_SIGNING_SECRET"),
    api_url = env(getenv, "SLACK_API_URL") or "https://slack.com/api",
  }
  if not e.bot then
    return nil, "SLACK_BOT_TOKEN is not set: give the app's Bot User OAuth Token (xoxb-…, under "
      .. "OAuth & Permissions)"
  end
  if not e.bot:match("^xoxb%-") then
    return nil, "SLACK_BOT_TOKEN does not look like a bot token (it should start with xoxb-)"
  end
  if e.app and not e.app:match("^xapp%-") then
    return nil, "SLACK_APP_TOKEN does not look like an app-level token (it should start with xapp-; "
      .. "create one with connections:write under Basic Information)"
  end
  if opts.listen and not e.secret then
    return nil, "--listen serves the Events API, which needs SLACK_SIGNING_SECRET (Basic Information → "
      .. "Signing Secret)"
  end
  if not e.app and not opts.listen then
    return nil, "no way to receive events: set SLACK_APP_TOKEN (Socket Mode) or give --listen "
      .. "HOST:PORT with SLACK_SIGNING_SECRET (Events API)"
  end
  if not e.api_url:match("^https?://") then
    return nil, "SLACK_API_URL must be an http(s) URL"
  end
  return e
end

local function identify(api)
  local who, err = api:call("auth.test", {}, {})
  if not who and err.kind ~= "slack" then
    return nil, ("Slack's Web API (%s) could not be reached for auth.test: %s. Check the network "
      .. "and SLACK_API_URL"):format(api.url, tostring(err.message))
  end
  if not who then
    return nil, ("SLACK_BOT_TOKEN was refused by Slack's auth.test: %s. Check the Bot User "
      .. "OAuth Token (xoxb-…) and that the app is installed in the workspace"):format(err.error or err.message)
  end
  return { user_id = who.user_id, bot_id = who.bot_id, team_id = who.team_id, team = who.team,
           user = who.user }
end

-- The command's own argument checks, before anything loads.
local function usage_problem(p)
  if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
  if p.opts.listen and not host_port(p.opts.listen) then
    return "--listen takes HOST:PORT, e.g. 127.0.0.1:3000"
  end
  if p.opts.metrics_listen and not host_port(p.opts.metrics_listen) then
    return "--metrics-listen takes HOST:PORT, e.g. 127.0.0.1:9091"
  end
  if p.opts.health_listen and not host_port(p.opts.health_listen) then
    return "--health-listen takes HOST:PORT, e.g. 127.0.0.1:8081"
  end
end

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, {
    spec = SPEC, backend = true, usage = usage_problem, policies = true,
  })
  if not p then return status end
  local opts, snap = p.opts, p.snap
  local e, why = M.read_env(os.getenv, opts)
  if not e then return p:fail(M.EXIT.config, why) end
  for _, secret in ipairs({ e.bot, e.app, e.secret }) do core.log_redact(secret) end
  if opts.backend == "sandbox" then
    local ok, swhy = console.check_sandbox(snap, opts.sandbox_url, os.getenv)
    if not ok then return p:fail(M.EXIT.config, swhy) end
  end
  local sink, trace_status = p:trace_sink()
  if opts.trace and not sink then return trace_status end

  local a = snap.slack.api
  local bot_api = webapi.new{ url = e.api_url, token = e.bot, deadline_ms = a.deadline_ms,
                              max_retry_after_ms = a.max_retry_after_ms }
  local bot, berr = identify(bot_api)
  if not bot then return p:fail(M.EXIT.config, berr) end
  core.log("info", "slack.bot", { user_id = bot.user_id, team_id = bot.team_id, name = bot.user })

  local app = app_mod.new{
    bot = bot, policy = policy.current, secret = e.secret, bot_api = bot_api,
    app_api = e.app and webapi.new{ url = e.api_url, token = e.app, deadline_ms = a.deadline_ms,
                                     max_retry_after_ms = a.max_retry_after_ms } or nil,
    dispatcher_opts = {
      stack = {
        workspace_root = opts.workspace_root or state.workspaces(),
        sandbox_url = opts.sandbox_url, credentials = ctx.credentials,
        force_backend = opts.backend, sink = sink,
      },
      outputs_dir = state.dir() .. "/outputs",
    },
  }

  if opts.listen then
    local listen_host, listen_port = host_port(opts.listen)
    local srv, lerr = app:listen(listen_host, listen_port, true)
    if not srv then return p:fail(M.EXIT.config, "--listen: " .. tostring(lerr.message)) end
    core.log("info", "slack.listening", { host = listen_host, port = srv.port, serves = "events" })
  end
  if opts.health_listen then
    local health_host, health_port = host_port(opts.health_listen)
    local srv, lerr = app:listen(health_host, health_port, false)
    if not srv then return p:fail(M.EXIT.config, "--health-listen: " .. tostring(lerr.message)) end
    core.log("info", "slack.listening", { host = health_host, port = srv.port, serves = "health" })
  end
  if opts.metrics_listen then
    local mhost, mport = host_port(opts.metrics_listen)
    local srv, merr = metrics.serve(mhost, mport)
    if not srv then return p:fail(M.EXIT.config, "--metrics-listen: " .. tostring(merr and merr.message or merr)) end
    core.log("info", "slack.listening", { host = mhost, port = srv.port, serves = "metrics" })
  end
  if e.app then
    local ok, serr = app:start_socket_mode()
    if not ok then
      app:shutdown(0)
      local what = serr.kind == "slack" and ("SLACK_APP_TOKEN was refused by Slack's apps.connections.open: "
        .. tostring(serr.error) .. ". Check the app-level token (xapp-…, scope connections:write) and "
        .. "that Socket Mode is on") or ("Socket Mode could not connect: " .. tostring(serr.message))
      return p:fail(M.EXIT.config, what)
    end
  end
  core.log("info", "slack.ready", { socket_mode = e.app ~= nil, events_api = opts.listen ~= nil })

  p:reload_on_hup(function(new, reload_errs)
    if new then
      core.log("info", "policy.reloaded", { version = new.version:sub(1, 12) })
    else
      core.log("warn", "policy.reload_failed", { errors = table.concat(reload_errs, "; ") })
    end
  end)

  local main = core.current()
  local kill_now = core.signal()
  local draining = false
  local function on_stop_signal(name)
    if draining then
      kill_now:abort("second SIG" .. name)
      app.d:kill("stopped by a second SIG" .. name)
      return
    end
    draining = true
    p:stopping() -- STOPPING=1 to systemd (deploy/systemd/switchboard-bot.service)
    local grace = policy.current().slack.drain_ms
    core.log("info", "slack.draining", { signal = name, drain_ms = grace })
    app:shutdown(grace, kill_now)
    core.wake(main, true)
  end
  core.on_signal("TERM", on_stop_signal)
  core.on_signal("INT", on_stop_signal)
  p:ready("connected to Slack") -- READY=1: Type=notify's start completes here
  core.suspend()
  if sink and sink.close then sink:close() end
  core.log("info", "slack.stopped", {})
  return 0
end

return M
