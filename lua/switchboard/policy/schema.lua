-- The shape of every policy file: which globals it may set, their types and ranges, and the
-- cross-field rules. A spec is a function(value, path, report) that calls report(path, msg)
-- for each problem. Units: *_ms are milliseconds, *_bytes are bytes.

local rule = require("switchboard.policy.rule")
local template = require("switchboard.policy.template")
local cron = require("switchboard.policy.cron")

local M = {}

local SECOND, MINUTE, HOUR = 1000, 60 * 1000, 3600 * 1000
M.SECOND, M.MINUTE, M.HOUR = SECOND, MINUTE, HOUR
M.KIB, M.MIB = 1024, 1024 * 1024

-- GitHub installation tokens live one hour; a reuse margin at or past it never reuses.
M.TOKEN_LIFETIME_MS = HOUR

-- The backends' names, in the order help and errors list them, and each one's part of
-- policies/execution.lua: filled by exec/backends.lua (each backend module declares its own;
-- docs/executors.md "Adding a backend"), which every command loads before the policies.
M.BACKENDS, M.BACKEND_LIST = {}, {}

-- Tools that run through an executor, so an agent offering one must declare a repository.
-- (agent/tools.lua's registry declares the same: tests/lua/tool_registry_spec.lua compares them)
M.EXECUTOR_TOOLS = { bash = true, read_file = true, write_file = true, edit_file = true,
                     glob = true, grep = true, list = true, screenshot = true,
                     process_logs = true, process_kill = true, expose_port = true }
-- Tools that change the workspace: never offered to a readonly agent.
M.PROVIDER_KINDS = { "openai", "bedrock", "vertex" }
M.WRITE_TOOLS = { write_file = true, edit_file = true }

---------------------------------------------------------------------------------------------
-- Formatting helpers

local function typename(v)
  if type(v) == "number" then
    if v ~= v then return "NaN" end
    return math.type(v) == "integer" and "integer" or "number"
  end
  return type(v)
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

function M.human_ms(ms)
  if ms >= HOUR and ms % HOUR == 0 then return string.format("%d ms (%d h)", ms, ms // HOUR) end
  if ms >= MINUTE and ms % MINUTE == 0 then return string.format("%d ms (%d min)", ms, ms // MINUTE) end
  if ms >= SECOND and ms % SECOND == 0 then return string.format("%d ms (%d s)", ms, ms // SECOND) end
  return string.format("%s ms", show(ms))
end

local function show_unit(v, unit)
  if unit == "ms" and math.type(v) == "integer" then return M.human_ms(v) end
  if unit == "bytes" then return show(v) .. " bytes" end
  return show(v)
end

---------------------------------------------------------------------------------------------
-- Spec combinators

local S = {}
M.S = S

-- A whole number in [min, max]. unit: "ms" | "bytes" | nil (for messages only).
function S.int(opts)
  return function(v, path, report)
    if type(v) ~= "number" then
      return report(path, "must be a number, got " .. typename(v))
    end
    if v ~= v or v == math.huge or v == -math.huge then
      return report(path, "must be a finite number, got " .. show(v))
    end
    if math.type(v) == "float" and v ~= math.floor(v) then
      return report(path, "must be a whole number, got " .. show(v))
    end
    if v < opts.min or v > opts.max then
      return report(path, string.format("must be between %s and %s, got %s",
        show_unit(opts.min, opts.unit), show_unit(opts.max, opts.unit),
        show_unit(math.tointeger(v) or v, opts.unit)))
    end
  end
end

-- A number (fractions allowed) in [min, max].
function S.number(opts)
  return function(v, path, report)
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      return report(path, "must be a finite number, got " .. typename(v))
    end
    if v < opts.min or v > opts.max then
      return report(path, string.format("must be between %s and %s, got %s", show(opts.min), show(opts.max), show(v)))
    end
  end
end

function S.ms(min, max) return S.int { min = min, max = max, unit = "ms" } end

function S.bool(v, path, report)
  if type(v) ~= "boolean" then report(path, "must be true or false, got " .. typename(v)) end
end

function S.func(v, path, report)
  if type(v) ~= "function" then report(path, "must be a function, got " .. typename(v)) end
end

-- A string; opts: pattern (with a human description), max_len, one_line, empty_ok ("" allowed).
function S.string(opts)
  opts = opts or {}
  return function(v, path, report)
    if type(v) ~= "string" then return report(path, "must be a string, got " .. typename(v)) end
    if v:find("^%s*$") and not (opts.empty_ok and v == "") then return report(path, "must not be empty") end
    if opts.one_line and v:find("[\r\n]") then return report(path, "must be one line") end
    if opts.max_len and #v > opts.max_len then
      return report(path, string.format("must be at most %d bytes, got %d", opts.max_len, #v))
    end
    if opts.pattern and not v:find(opts.pattern) then
      return report(path, string.format("must be %s, got %s", opts.what or ("like " .. opts.pattern), show(v)))
    end
  end
end

function S.enum(values)
  local set, list = {}, {}
  for _, x in ipairs(values) do set[x] = true; list[#list + 1] = show(x) end
  return function(v, path, report)
    if not set[v] then
      report(path, string.format("must be one of %s, got %s", table.concat(list, ", "), show(v)))
    end
  end
end

local OPTIONAL = setmetatable({}, { __mode = "k" })
local DEFAULT = setmetatable({}, { __mode = "k" }) -- an optional spec → the value its absence reads

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

-- A setting that may be left out. With a default, a policy that leaves it out reads the default:
-- the loader fills it in (S.record, and loader.lua for a file's top-level settings) before the
-- cross-field rules and the freeze, so every reader sees a value and holds no fallback of its
-- own (docs/policies.md "Optional settings and their defaults"). The default must pass spec:
-- a wrong one is the schema's own bug, refused when this file loads.
function S.optional(spec, default)
  local f = function(v, path, report)
    if v ~= nil then return spec(v, path, report) end
  end
  OPTIONAL[f] = true
  if default ~= nil then
    local problems = {}
    spec(default, "default", function(path, msg) problems[#problems + 1] = path .. " " .. msg end)
    assert(#problems == 0, "a schema default is not valid for its own spec: " .. table.concat(problems, "; "))
    DEFAULT[f] = default
  end
  return f
end

-- Fills t[k] with spec's default when t holds no value there; → whether t[k] now holds one.
local function fill_default(t, k, spec)
  if t[k] ~= nil then return true end
  if DEFAULT[spec] == nil then return false end
  t[k] = copy(DEFAULT[spec])
  return true
end

local function is_list(t)
  local n = #t
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then return false end
  end
  return true
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end
M.sorted_keys = sorted_keys

local function child(path, k)
  if type(k) == "string" and k:find("^[%a_][%w_]*$") then
    return path == "" and k or (path .. "." .. k)
  end
  return string.format("%s[%s]", path, show(k))
end
M.child = child

-- A table with known fields; every field is required unless wrapped in S.optional (one with a
-- default is filled in when left out).
function S.record(fields)
  return function(v, path, report)
    if type(v) ~= "table" then return report(path, "must be a table, got " .. typename(v)) end
    for _, k in ipairs(sorted_keys(v)) do
      if fields[k] == nil then
        local known = sorted_keys(fields)
        report(child(path, k), "is not a known field (known: " .. table.concat(known, ", ") .. ")")
      end
    end
    for _, k in ipairs(sorted_keys(fields)) do
      local x = v[k]
      if x ~= nil then
        fields[k](x, child(path, k), report)
      elseif not fill_default(v, k, fields[k]) and not OPTIONAL[fields[k]] then
        report(child(path, k), "is required")
      end
    end
  end
end

-- A list of items; opts: min, max, unique.
function S.list(item, opts)
  opts = opts or {}
  return function(v, path, report)
    if type(v) ~= "table" or not is_list(v) then
      return report(path, "must be a list, got " .. typename(v))
    end
    if opts.min and #v < opts.min then
      return report(path, string.format("must have at least %d entries", opts.min))
    end
    if opts.max and #v > opts.max then
      return report(path, string.format("must have at most %d entries", opts.max))
    end
    local seen = {}
    for i = 1, #v do
      item(v[i], child(path, i), report)
      if opts.unique then
        if seen[v[i]] then report(child(path, i), "repeats " .. show(v[i])) end
        seen[v[i]] = true
      end
    end
  end
end

-- A table of key → value; keys are strings matching key_pattern.
function S.map(key_pattern, what, value, opts)
  opts = opts or {}
  return function(v, path, report)
    if type(v) ~= "table" then return report(path, "must be a table, got " .. typename(v)) end
    local n = 0
    for _, k in ipairs(sorted_keys(v)) do
      n = n + 1
      if type(k) ~= "string" or not k:find(key_pattern) then
        report(child(path, k), "is not a valid name: " .. what)
      else
        value(v[k], child(path, k), report)
      end
    end
    if opts.min and n < opts.min then
      report(path, string.format("must have at least %d entries", opts.min))
    end
  end
end

function S.template(allowed_list, requires)
  local allowed = {}
  for _, a in ipairs(allowed_list) do allowed[a] = true end
  return function(v, path, report)
    local why = template.check(v, allowed, requires)
    if why then report(path, why) end
  end
end

-- An agent's system prompt: any number of lines, placeholders from PROMPT_VARS only.
M.PROMPT_VARS = { "agent", "repository", "workspace", "tools" }
function S.prompt(v, path, report)
  if type(v) ~= "string" then return report(path, "must be a string, got " .. typename(v)) end
  if #v > 64 * 1024 then return report(path, "must be at most 65536 bytes") end
  local allowed = {}
  for _, n in ipairs(M.PROMPT_VARS) do allowed[n] = true end
  local why = template.check((v:gsub("\n", " ")), allowed)
  if why then report(path, why) end
end

-- A multi-line text with placeholders from vars (a list of names) only.
function S.text(vars, max_len)
  local allowed = {}
  for _, n in ipairs(vars) do allowed[n] = true end
  return function(v, path, report)
    if type(v) ~= "string" then return report(path, "must be a string, got " .. typename(v)) end
    if #v > (max_len or 64 * 1024) then return report(path, ("must be at most %d bytes"):format(max_len or 65536)) end
    local why = template.check((v:gsub("\n", " ")), allowed)
    if why then report(path, why) end
  end
end

-- The pull request's texts (policies/agents.lua pull_request).
M.PR_VARS = { "ask", "agent", "repository", "thread", "thread_link", "summary", "turns", "branch", "title",
               "files", "status" }

function S.rule(v, path, report)
  if not rule.is_rule(v) then
    report(path, "must be built with rule{...}, got " .. typename(v))
  end
end

---------------------------------------------------------------------------------------------
-- Grammar shared with the sandbox's sleepAfter: <n>[smh], n > 0.

local UNIT_MS = { s = SECOND, m = MINUTE, h = HOUR }

function M.parse_sleep_after(text)
  if type(text) ~= "string" then return nil, "must be a string like \"5m\"" end
  local n, unit = text:match("^(%d+)([smh])$")
  if not n or #n > 9 or tonumber(n) == 0 then
    return nil, "must be <n>s, <n>m or <n>h with n > 0 (like \"5m\"), got " .. show(text)
  end
  return math.tointeger(tonumber(n)) * UNIT_MS[unit]
end

function S.sleep_after(v, path, report)
  local _, why = M.parse_sleep_after(v)
  if why then report(path, why) end
end

---------------------------------------------------------------------------------------------
-- Names

local ENV_NAME = "^[A-Z_][A-Z0-9_]*$"
local env_name = S.string { pattern = ENV_NAME, what = "an environment variable name (A-Z, 0-9, _)" }
M.env_name = env_name -- a setting that names an environment variable (backends' settings use it)
local AGENT_NAME = "^[a-z][a-z0-9_-]*$"
local agent_name = S.string { pattern = AGENT_NAME, what = "an agent name (a-z, 0-9, _ and -)" }

-- Names a child process must never inherit from the bot: its own credentials.
local SECRET_PARTS = { "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PRIVATE", "CREDENTIAL", "COOKIE" }
local SECRET_PREFIXES = { "SLACK_", "ANTHROPIC_", "GITHUB_APP_", "E2B_", "SANDBOX_", "RESIDENT_", "SWITCHBOARD_" }

function M.is_secret_name(name)
  for _, part in ipairs(SECRET_PARTS) do
    if name:find(part, 1, true) then return true end
  end
  for _, prefix in ipairs(SECRET_PREFIXES) do
    if name:sub(1, #prefix) == prefix then return true end
  end
  -- KEY as a whole _-delimited word: API_KEY, KEY, SSH_KEY_PATH; not KEYBOARD or MONKEY.
  local padded = "_" .. name .. "_"
  return padded:find("_KEY_", 1, true) ~= nil
end

---------------------------------------------------------------------------------------------
-- The files

local ms = S.ms

M.files = {}
M.order = { "timeouts", "github", "agents", "errors", "execution", "slack", "isolation", "record" }

M.files.timeouts = {
  bash = S.record {
    default_ms = ms(SECOND, 24 * HOUR),
    max_ms = ms(SECOND, 24 * HOUR),
    floor_ms = ms(1, 10 * MINUTE),
    kill_grace_ms = ms(0, 10 * MINUTE),
  },
  run = S.record { reserve_ms = ms(0, HOUR) },
  call = S.record { margin_ms = ms(SECOND, 10 * MINUTE) },
  fleet_busy = S.record {
    waits_ms = S.list(ms(SECOND, 10 * MINUTE), { max = 20 }),
    every_ms = ms(SECOND, 10 * MINUTE),
    max_wait_ms = ms(0, HOUR),
  },
  container_starting = S.record {
    retry_after_ms = ms(100, MINUTE),
    retries = S.int { min = 0, max = 5 },
  },
  recycle = S.record { threshold_ms = ms(0, HOUR) },
  sandbox = S.record {
    heartbeat_ms = ms(100, 5 * MINUTE),
    default_budget_ms = ms(SECOND, 24 * HOUR),
    sleep_after = S.sleep_after,
    max_instances = S.int { min = 1, max = 100000 },
    max_thread_key_bytes = S.int { min = 16, max = 4096, unit = "bytes" },
    max_file_bytes = S.int { min = 1024, max = 1024 * M.MIB, unit = "bytes" },
    max_answer_bytes = S.int { min = 64 * 1024, max = 4096 * M.MIB, unit = "bytes" },
    -- background processes and exposed ports (docs/sandboxd.md); optional, with the values a
    -- policy that predates them reads
    max_processes = S.optional(S.int { min = 0, max = 1000 }, 8),
    process_log_bytes = S.optional(S.int { min = 1024, max = 64 * M.MIB, unit = "bytes" }, 64 * M.KIB),
    process_awake_ms = S.optional(ms(SECOND, 7 * 24 * HOUR), 30 * MINUTE),
    max_ports = S.optional(S.int { min = 0, max = 1000 }, 10),
    ports_base_url = S.optional(S.string { one_line = true, pattern = "^https?://[^%s]+$",
      what = "an http:// or https:// URL" }),
    ports_host_url = S.optional(S.string { one_line = true, pattern = "^https?://{token}%.[^%s/]+/?$",
      what = "an http(s)://{token}.<domain> URL" }),
    -- the exec lane (docs/sandboxd.md "The exec lane"); optional: on for a policy that predates it
    exec_lane = S.optional(S.bool, true),
    exec_lane_report_ms = S.optional(ms(10, 10 * SECOND), 500),
    -- sandboxd's info lines written together (core.log_batch); optional: a policy that predates
    -- it writes each at once
    log_batch_ms = S.optional(ms(0, SECOND), 0),
    -- the lane's long answer as it comes (docs/sandboxd.md); optional, with the values a policy
    -- that predates them reads
    stream_at_bytes = S.optional(S.int { min = 4 * 1024, max = 256 * M.MIB, unit = "bytes" }, 64 * M.KIB),
    stream_step_bytes = S.optional(S.int { min = 1024, max = 16 * M.MIB, unit = "bytes" }, 32 * M.KIB),
    stream_reserve_margin = S.optional(S.int { min = 0, max = 1000 }, 4),
    stream_reserve_max_bytes = S.optional(S.int { min = 0, max = M.MIB, unit = "bytes" }, 16 * M.KIB),
  },
  server = S.record {
    drain_ms = ms(0, 10 * MINUTE),
    flush_ms = ms(0, MINUTE),
    max_header_bytes = S.int { min = 1024, max = 1024 * 1024, unit = "bytes" },
    max_body_bytes = S.int { min = 1024, max = 4096 * M.MIB, unit = "bytes" },
    request_timeout_ms = ms(100, 10 * MINUTE),
    idle_timeout_ms = ms(100, HOUR),
    max_connections = S.int { min = 1, max = 1000000 },
    max_connections_per_peer = S.int { min = 1, max = 1000000 },
    max_bodies_bytes = S.int { min = 1024, max = 1024 * M.MIB, unit = "bytes" },
  },
  file_op = S.record { budget_ms = ms(SECOND, HOUR) },
  token = S.record { reuse_slack_ms = ms(0, HOUR) },
  resident = S.record {
    negative_cache_ms = ms(0, HOUR),
    probe_timeout_ms = ms(100, MINUTE),
    fetch_every_ms = ms(SECOND, 24 * HOUR),
    warm_after_start_ms = ms(0, 24 * HOUR),
    clone_timeout_ms = ms(SECOND, 2 * HOUR),
    install_timeout_ms = ms(SECOND, 4 * HOUR),
    attach_timeout_ms = ms(SECOND, HOUR),
    min_free_mb = S.int { min = 0, max = 1024 * 1024 * 1024, unit = "MiB" },
    tool_timeout_ms = ms(100, 10 * MINUTE),
  },
  walls = S.record {
    ready_ms = ms(SECOND, 10 * MINUTE),
    helper_ms = ms(SECOND, 10 * MINUTE),
    probe_ms = ms(SECOND, 10 * MINUTE),
    stop_ms = ms(0, MINUTE),
    loops_ms = ms(0, MINUTE),
  },
  e2b = S.record {
    sandbox_timeout_ms = ms(SECOND, 24 * HOUR),
    api_timeout_ms = ms(100, 10 * MINUTE),
    keepalive_ping_ms = ms(SECOND, HOUR),
    connect_grace_ms = ms(0, 10 * MINUTE),
    stop_timeout_ms = ms(100, MINUTE),
    max_stream_bytes = S.int { min = 64 * 1024, max = 4096 * M.MIB, unit = "bytes" },
  },
  kubernetes = S.record {
    api_timeout_ms = ms(100, 10 * MINUTE),
    watch_seconds = S.int { min = 1, max = 3600, unit = "seconds" },
    max_retries = S.int { min = 0, max = 100 },
    max_retry_after_ms = ms(100, 10 * MINUTE),
    gone_check_ms = ms(0, MINUTE),
  },
  health = S.record { max_consecutive_infra_failures = S.int { min = 1, max = 100 } },
  -- the bot's GET /readyz (fronts/slack/readiness.lua): each sandboxd's /healthz probed at most
  -- every cache_ms, each probe given probe_ms
  readiness = S.record { cache_ms = ms(0, 10 * MINUTE), probe_ms = ms(100, MINUTE) },
  -- scheduled asks (dispatch/schedule.lua): the scheduler wakes at least every max_nap_ms, so a
  -- reload's new schedules are seen within it
  schedules = S.record { max_nap_ms = ms(SECOND, HOUR) },
  process = S.record { max_output_bytes = S.int { min = 1024, max = 256 * M.MIB, unit = "bytes" } },
  card = S.record { max_chars = S.int { min = 1000, max = 40000, unit = "characters" } },
}

M.files.github = {
  request_timeout_ms = ms(SECOND, 5 * MINUTE),
  clone_url = S.template({ "repo" }, { "{repo}" }),
  scopes = S.map("^[a-z][a-z0-9_]*$", "a scope name (a-z, 0-9, _)", S.record {
    permissions = S.optional(S.map("^[a-z][a-z_]*$", "a GitHub permission name",
      S.enum { "read", "write" })),
  }),
}

M.files.agents = {
  agents = S.map(AGENT_NAME, "a-z, 0-9, _ and -", S.record {
    name = S.optional(agent_name),
    description = S.string { one_line = true, max_len = 160 },
    resources = S.record { repository = S.optional(S.bool) },
    readonly = S.bool,
    token_scope = S.optional(S.string { pattern = "^[a-z][a-z0-9_]*$", what = "a scope from policies/github.lua" }),
    max_run_minutes = S.int { min = 1, max = 24 * 60 },
    tools = S.list(S.string { pattern = "^[a-z][a-z0-9_]*$", what = "a tool name" }, { unique = true }),
    model = S.optional(S.string { one_line = true, max_len = 200 }),
    max_tokens = S.optional(S.int { min = 1, max = 1000000 }),
    max_turns = S.optional(S.int { min = 1, max = 10000 }),
    system_prompt = S.optional(S.prompt),
    pull_requests = S.optional(S.bool),
    network = S.optional(S.enum { "host", "none" }),
    thinking = S.optional(S.record { budget_tokens = S.int { min = 1024, max = 1000000 } }),
    mcp_servers = S.optional(require("switchboard.policy.mcp_shape").servers(S)),
    provider = S.optional(S.string { pattern = "^[a-z][a-z0-9_-]*$", what = "\"anthropic\" or a name from providers" }),
    models = S.optional(S.list(S.string { one_line = true, max_len = 200 }, { unique = true })),
  }, { min = 1 }),
  effort = S.optional(S.record {
    low = S.int { min = 0, max = 1000000 }, medium = S.int { min = 0, max = 1000000 },
    high = S.int { min = 0, max = 1000000 },
  }),
  mcp = S.record {
    max_tools = S.int { min = 1, max = 500 },
    max_description_chars = S.int { min = 100, max = 100000, unit = "characters" },
    max_schema_bytes = S.int { min = 256, max = 1024 * 1024, unit = "bytes" },
    max_reply_bytes = S.int { min = 1024, max = 64 * 1024 * 1024, unit = "bytes" },
  },
  web_search = function(v, path, report)
    S.record {
      provider = S.enum { "none", "brave" },
      url = S.optional(S.string { one_line = true, max_len = 2048, pattern = "^https?://[^%s/?#]+", what = "an http:// or https:// URL" }),
      key_env = S.optional(S.string { pattern = "^[A-Za-z_][A-Za-z0-9_]*$", what = "an environment variable name" }),
      max_results = S.optional(S.int { min = 1, max = 20 }),
      timeout_ms = S.optional(ms(SECOND, 2 * MINUTE)),
    }(v, path, report)
    if type(v) ~= "table" or v.provider == "none" then return end
    for _, k in ipairs { "url", "key_env", "max_results", "timeout_ms" } do
      if v[k] == nil then report(child(path, k), "is required with a provider") end
    end
  end,
  web_fetch = S.record {
    max_redirects = S.int { min = 0, max = 20 },
    max_download_bytes = S.int { min = 1024, max = 64 * 1024 * 1024, unit = "bytes" },
    timeout_ms = ms(SECOND, 10 * MINUTE),
  },
  -- the model providers agents may name (docs/agent.md "Model providers"); credentials by
  -- variable name only
  providers = S.optional(S.map("^[a-z][a-z0-9_-]*$", "a provider name (a-z, 0-9, _ and -)", S.record {
    kind = S.enum(M.PROVIDER_KINDS),
    base_url = S.optional(S.string { one_line = true, pattern = "^https?://[^%s]+$", what = "an http(s) URL" }),
    base_url_env = S.optional(env_name), api_key_env = S.optional(env_name),
    region_env = S.optional(env_name), project_env = S.optional(env_name),
    credentials_env = S.optional(env_name),
  })),
  instructions = S.record {
    files = S.list(S.string { pattern = "^[%w._-][%w._/-]*$", what = "a path inside the repository" }, { unique = true, max = 20 }),
    nested_files = S.list(S.string { pattern = "^[%w._-]+$", what = "a file name (no directory)" }, { unique = true, max = 10 }),
    max_file_bytes = S.int { min = 256, max = 1024 * 1024, unit = "bytes" },
    max_total_bytes = S.int { min = 256, max = 4 * 1024 * 1024, unit = "bytes" },
  },
  pull_request = S.record {
    branch = S.template({ "thread", "short_id" }, { "{short_id}" }),
    author_name = S.string { one_line = true, max_len = 100 },
    author_email = S.string { one_line = true, pattern = "^[^%s@]+@[^%s@]+$", what = "an e-mail address" },
    commit_message = S.text(M.PR_VARS, 8192),
    title = S.text(M.PR_VARS, 1024),
    body = S.text(M.PR_VARS, 60000),
    max_title_chars = S.int { min = 20, max = 256 },
    unfinished = S.enum { "draft", "none" },
    draft_note = S.text({ "why" }, 2048),
    publish_grace_ms = ms(SECOND, HOUR),
  },
  run_defaults = S.record {
    model = S.string { one_line = true, max_len = 200 },
    max_tokens = S.int { min = 1, max = 1000000 },
    max_turns = S.int { min = 1, max = 10000 },
    system_prompt = S.prompt,
  },
  model_api = S.record {
    base_url = S.string { one_line = true, pattern = "^https?://[^%s]+$", what = "an http(s) URL" },
    version = S.string { one_line = true, max_len = 40 },
    request_timeout_ms = ms(SECOND, HOUR),
    max_event_bytes = S.int { min = 1024, max = 256 * M.MIB, unit = "bytes" },
    max_answer_bytes = S.int { min = 1024, max = 1024 * M.MIB, unit = "bytes" },
    retry = S.record {
      max_attempts = S.int { min = 1, max = 20 },
      first_ms = ms(0, 10 * MINUTE),
      max_ms = ms(0, HOUR),
      jitter_percent = S.int { min = 0, max = 100 },
      max_retry_after_ms = ms(0, HOUR),
    },
  },
  models = S.map("^[%w._:@-]+$", "a model name", S.record {
    context_tokens = S.int { min = 1000, max = 100000000 },
    max_output_tokens = S.int { min = 1, max = 1000000 },
    price = S.record {
      input = S.number { min = 0, max = 10000 }, output = S.number { min = 0, max = 10000 },
      cache_write = S.number { min = 0, max = 10000 }, cache_read = S.number { min = 0, max = 10000 },
    },
  }, { min = 1 }),
  context = S.record {
    compact_at_percent = S.int { min = 10, max = 99 },
    keep_tool_results = S.int { min = 0, max = 1000 },
    keep_turns = S.int { min = 0, max = 100 },
    summary_max_tokens = S.int { min = 256, max = 1000000 },
    summary_prompt = S.text({}, 8192),
  },
  tool_output = S.record {
    max_chars = S.int { min = 1000, max = 10000000 },
    head_percent = S.int { min = 0, max = 100 },
    saved_dir = S.string { pattern = "^[%w_-][%w._/-]*$", what = "a relative path inside the workspace" },
    max_image_bytes = S.int { min = 1024, max = 32 * M.MIB, unit = "bytes" },
    max_image_side = S.int { min = 1, max = 100000 },
  },
  processes = S.record {
    settle_ms = ms(0, MINUTE),
    tail_lines = S.int { min = 1, max = 100000 },
  },
  screenshot = S.record {
    command = S.string { pattern = "^[%w._/+-]+$", what = "a program name or path" },
    width = S.int { min = 16, max = 100000 },
    height = S.int { min = 16, max = 100000 },
    max_side = S.int { min = 16, max = 100000 },
    timeout_ms = ms(SECOND, HOUR),
  },
  review_comments = S.record {
    agent = agent_name,
    mention = S.list(S.string { one_line = true, max_len = 100 }, { min = 1, max = 10 }),
    allow_associations = S.list(S.enum { "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR",
      "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE" }, { unique = true }),
    reply = S.text({ "user", "what", "summary" }, 8192),
  },
  schedules = S.list(S.record {
    name = S.string { pattern = "^[%w._-]+$", what = "a name (letters, digits, . _ -)" },
    cron = function(v, path, report)
      local ok, why = cron.parse(v)
      if not ok then report(path, why .. ' (e.g. "0 9 * * 1-5": 09:00 UTC on weekdays, "*/15 * * * *": every 15 minutes)') end
    end,
    repository = S.optional(S.string { pattern = "^[%w._-]+/[%w._-]+$", what = "OWNER/REPO" }),
    agent = agent_name,
    ask = S.text({}, 16384),
    channel = S.string { pattern = "^[CG][A-Z0-9]+$", what = "a Slack channel ID (C…)" },
    missed = S.enum { "skip", "run_once" },
  }, { max = 100 }),
  pull_request_reviews = S.record {
    agent = agent_name,
    repositories = S.list(S.string { pattern = "^[%w._-]+/[%w._-]+$", what = "OWNER/REPO" }, { unique = true }),
    actions = S.list(S.enum { "opened", "ready_for_review", "reopened", "synchronize" }, { unique = true }),
    post_scope = S.string { pattern = "^[a-z][a-z0-9_]*$", what = "a scope of policies/github.lua" },
  },
  issues = S.record {
    agent = agent_name,
    repositories = S.list(S.string { pattern = "^[%w._-]+/[%w._-]+$", what = "OWNER/REPO" }, { unique = true }),
    start_on = S.list(S.enum { "opened", "assigned", "mention" }, { unique = true }),
    allow_associations = S.list(S.enum { "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR",
      "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE" }, { unique = true }),
    max_comments = S.int { min = 0, max = 100 },
    update_every_ms = ms(SECOND, HOUR),
  },
  environment = S.record {
    prompt = S.text({ "os", "toolchains", "repository", "default_branch", "publishing", "scratch" }, 16384),
    turn = S.text({ "date", "workspace", "publish_branch", "git_status" }, 16384),
    publishes = S.text({}, 2048),
    publishes_nothing = S.text({}, 2048),
    toolchains = S.list(S.string { pattern = "^[%w._+-]+[%w._+: -]*$", what = "a command: a program and its arguments (letters, digits, . _ + : -)" },
      { max = 40 }),
    max_status_lines = S.int { min = 1, max = 1000 },
    scratch_dir = S.string { pattern = "^[%w_-][%w._/-]*$", what = "a relative path inside the workspace" },
    timeout_ms = ms(SECOND, 10 * MINUTE),
  },
  find_tools = S.record {
    read_max_lines = S.int { min = 10, max = 100000 },
    max_line_chars = S.int { min = 80, max = 100000, unit = "characters" },
    glob_max_paths = S.int { min = 1, max = 100000 },
    grep_max_lines = S.int { min = 1, max = 100000 },
    grep_max_context = S.int { min = 0, max = 100 },
    list_max_entries = S.int { min = 1, max = 100000 },
    timeout_ms = ms(SECOND, HOUR),
  },
  on_max_tokens = S.record {
    grow_factor = S.int { min = 1, max = 16 },
    max_continuations = S.int { min = 0, max = 20 },
  },
  spend = S.record {
    per_run_usd = S.optional(S.number { min = 0, max = 1000000 }),
    per_thread_usd = S.optional(S.number { min = 0, max = 1000000 }),
    per_day_usd = S.optional(S.number { min = 0, max = 1000000 }),
  },
  default_agent = agent_name,
  choose_agent = S.func,
}

local message_specs = {
  no_output = S.template({}),
  thrown_no_message = S.template({ "detail" }, { "{detail}" }),
  thrown_no_name = S.template({}),
  empty_error = S.template({}),
  recycled_mid_command = S.template({ "seconds", "original" }, { "{seconds}", "{original}" }),
  fleet_busy_answer = S.template({ "cause" }, { "{cause}" }),
  capacity = S.template({ "seconds" }, { "{seconds}" }),
  fleet_busy_tool = S.template({ "message" }, { "{message}" }),
  timeout = S.template({ "where", "seconds", "limit_ms", "max_ms" }, { "{seconds}", "timeoutMs", "{max_ms}" }),
  clipped = S.template({ "seconds", "remaining_s", "reserve_s" }, { "{seconds}" }),
  run_exhausted = S.template({ "remaining_s", "reserve_s" }, { "run budget exhausted" }),
  no_answer = S.template({ "who", "route", "total_s", "budget_s", "margin_s" },
    { "{total_s}", "{budget_s}", "{margin_s}" }),
  stopped = S.template({ "reason" }, { "{reason}" }),
  truncated = S.template({ "stream", "limit" }, { "{stream}" }),
  null_executor = S.template({ "tool", "agent" }, { "{tool}" }),
  server_failure = S.template({ "detail" }, { "{detail}" }),
  server_stopped = S.template({ "drain_s" }),
  transport_failed = S.template({ "who", "route", "detail" }, { "{route}", "{detail}" }),
  not_connected = S.template({ "who", "route", "detail" }, { "{route}", "{detail}" }),
  http_status = S.template({ "who", "route", "status", "detail" }, { "{route}", "{status}", "{detail}" }),
  bad_answer = S.template({ "who", "route", "detail" }, { "{route}", "{detail}" }),
}

local function span_code(allowed)
  local t = S.template(allowed)
  local s = S.string { pattern = "^[a-z][a-z0-9/ {}-]*$", what = "a span code (a-z, 0-9, /, -, space)" }
  return function(v, path, report)
    local before = 0
    local function count(...) before = before + 1; report(...) end
    t(v, path, count)
    if before == 0 then s(v, path, report) end
  end
end

M.files.errors = {
  fleet_busy = S.rule,
  recycle = S.rule,
  container_starting = S.rule,
  empty_error = S.rule,
  runtime_replaced = S.rule,
  runtime_replaced_infra_after = S.int { min = 1, max = 10 },
  messages = S.record(message_specs),
  span_codes = S.record {
    timeout = span_code({}),
    http = (function()
      local inner = span_code({ "status" })
      return function(v, path, report)
        inner(v, path, report)
        if type(v) == "string" and not v:find("{status}", 1, true) then report(path, "must contain {status}") end
      end
    end)(),
    inbody = span_code({}),
    attach = span_code({}),
    runtime_replaced = span_code({}),
  },
}

-- A backend's name, read when a policy is checked: the registered ones (exec/backends.lua).
local function backend_name(v, path, report)
  if #M.BACKEND_LIST == 0 then
    error("no backend is registered: require switchboard.exec.backends before loading policies", 0)
  end
  return S.enum(M.BACKEND_LIST)(v, path, report)
end

M.files.execution = {
  backend = S.map("^[a-z][a-z0-9_-]*$", "\"default\" or an agent name", backend_name),
  child_env = S.record {
    pass = S.list(env_name, { unique = true }),
    set = S.map(ENV_NAME, "an environment variable name (A-Z, 0-9, _)", S.string { max_len = 4096 }),
  },
  missing = S.template({ "agent", "backend", "setting" }, { "{setting}" }),
  choose_backend = S.func,
  -- the key of repository secrets (docs/secrets.md): read when a command needs one
  secrets_key_file = S.string { one_line = true, pattern = "^/", what = "an absolute path" },
}

-- local_walls: true | false (every front), or front name → true | false with "default" for
-- the fronts not named (docs/isolation.md "Fronts that serve other people"). The fronts are
-- registered by fronts/registry.lua (each front module declares its own); `exec` is a
-- person's own terminal, not a front, but its commands are walled by the same rule.
M.FRONTS = { "exec" }
local fronts_registered = false

-- A front's name, and its own settings: file → spec (`timeouts = S.record{…}` is the
-- front's policies/timeouts.lua `NAME = {…}`).
function M.register_front(name, settings)
  fronts_registered = true
  local known = false
  for _, f in ipairs(M.FRONTS) do known = known or f == name end
  if not known then
    M.FRONTS[#M.FRONTS + 1] = name
    table.sort(M.FRONTS)
  end
  for file, spec in pairs(settings or {}) do M.files[file][name] = spec end
end

function M.unregister_front(name, settings)
  for i, f in ipairs(M.FRONTS) do if f == name then table.remove(M.FRONTS, i) break end end
  for file in pairs(settings or {}) do M.files[file][name] = nil end
end

local function local_walls_spec(v, path, report)
  if not fronts_registered then
    error("no front is registered: require switchboard.fronts.registry before loading policies", 0)
  end
  if type(v) == "boolean" then return end
  if type(v) ~= "table" then
    return report(path, "must be true, false or a table of front → true/false, got " .. typename(v))
  end
  S.map("^[a-z][a-z0-9_]*$", "\"default\" or a front (" .. table.concat(M.FRONTS, ", ") .. ")", S.bool)(v, path, report)
  if v.default == nil then
    report(child(path, "default"), "is required (whether the fronts not named here wall the local executor)")
  end
  local known = { default = true }
  for _, f in ipairs(M.FRONTS) do known[f] = true end
  for _, k in ipairs(sorted_keys(v)) do
    if type(k) == "string" and not known[k] then
      report(child(path, k), "names no front (known: default, " .. table.concat(M.FRONTS, ", ") .. ")")
    end
  end
end

-- Whether the local executor walls the threads of `front` (nil: the default).
function M.local_walls_for(isolation, front)
  local lw = isolation.local_walls
  if type(lw) == "boolean" then return lw end
  local v = front and lw[front]
  if v == nil then v = lw.default end
  return v == true
end

M.files.isolation = {
  local_walls = local_walls_spec,
  network = S.enum { "host", "none" },
  outbound = S.enum { "auto", "bridge", "pasta" },
  bridge_subnet = S.string { pattern = "^%d+%.%d+%.%d+%.%d+/%d+$", what = "an IPv4 subnet such as \"10.212.0.0/15\"" },
  bridge_refused = S.list(S.string { pattern = "^%d+%.%d+%.%d+%.%d+/%d+$", what = "an IPv4 range such as \"10.0.0.0/8\"" },
    { unique = true, max = 64 }),
  workspace_size = S.enum { "filesystem", "measured" },
  memory_bytes = S.int { min = 16 * M.MIB, max = 1024 * 1024 * M.MIB, unit = "bytes" },
  pids_max = S.int { min = 8, max = 4194304 },
  cpu_percent = S.int { min = 10, max = 102400 },
  open_files = S.int { min = 64, max = 1048576 },
  fleet_files_percent = S.int { min = 1, max = 90 },
  file_table_check_ms = S.ms(10, 60000),
  file_table_rise = S.int { min = 1024, max = 100000000 },
  file_size_bytes = S.int { min = M.MIB, max = 1024 * 1024 * M.MIB, unit = "bytes" },
  workspace_max_bytes = S.int { min = M.MIB, max = 1024 * 1024 * M.MIB, unit = "bytes" },
  disk_reserve_bytes = S.int { min = 0, max = 1024 * 1024 * M.MIB, unit = "bytes" },
  loop_devices_kept = S.int { min = 0, max = 1048576 },
  slept_max_bytes = S.int { min = 0, max = 1024 * 1024 * 1024 * M.MIB, unit = "bytes" },
  slept_max_age_ms = ms(0, 3650 * 24 * HOUR),
  bases_refresh_ms = ms(0, 3650 * 24 * HOUR),
  setup_timeout_ms = ms(1000, 24 * HOUR),
  spare_instances = S.int { min = 0, max = 16 },
  starts_at_once = S.int { min = 1, max = 1024 },
  uid_base = S.int { min = 1000, max = 4000000000 },
  uid_count = S.int { min = 1, max = 1000000 },
  uid_blocks = S.int { min = 1, max = 256 },
  hostname = S.string { pattern = "^[%w.-]*$", what = "a host name, or \"\"", empty_ok = true },
  -- optional, for an operator's isolation.lua that predates it: a walled command's HOME
  home = S.optional(S.string { pattern = "^/tmp/[%w_][%w._-]*$", what = "a directory directly under /tmp such as \"/tmp/home\"" },
    "/tmp/home"),
  -- optional likewise: the name of its uid; not a name the instance's files give uid 0 or 65534
  -- (getpwnam would answer theirs)
  user_name = S.optional(function(v, path, report)
    if v == "root" or v == "nobody" then return report(path, "must not be \"root\" or \"nobody\" (the instance's own accounts)") end
    return S.string { pattern = "^[a-z_][a-z0-9_-]*$", max_len = 32, what = "a user name such as \"sandbox\"" }(v, path, report)
  end, "sandbox"),
  rootfs = S.string { pattern = "^/[^\r\n]*$", what = "an absolute path" },
  expose = S.list(S.string { pattern = "^[%w_][%w._-]*$", what = "a top-level name such as \"usr\"" },
    { unique = true, max = 32 }),
  hide = S.list(S.string { pattern = "^/[^\r\n]*$", what = "an absolute path" }, { unique = true, max = 32 }),
  cgroup_parent = S.string { pattern = "^[^\r\n]*$", one_line = true },
}

local slack_id = S.string { pattern = "^[A-Z0-9]+$", what = "a Slack ID (T…, C…, U…)" }
M.files.slack = {
  allow = S.record {
    workspaces = S.list(S.string { pattern = "^%w+$", what = "a team ID (T…) or \"token\"" }, { unique = true }),
    channels = S.list(slack_id, { unique = true }),
    users = S.list(slack_id, { unique = true }),
  },
  refusal = S.string { one_line = true, max_len = 500 },
  reaction = S.string { pattern = "^[a-z0-9_+-]+$", what = "an emoji name (no colons)" },
  reaction_end = S.optional(S.record {
    done = S.string { pattern = "^[a-z0-9_+-]+$", what = "an emoji name (no colons)" },
    stopped = S.string { pattern = "^[a-z0-9_+-]+$", what = "an emoji name (no colons)" },
    failed = S.string { pattern = "^[a-z0-9_+-]+$", what = "an emoji name (no colons)" },
  }),
  card = S.record {
    update_every_ms = ms(100, MINUTE),
    updates_per_minute = S.int { min = 1, max = 6000 },
    max_block_chars = S.int { min = 500, max = 3000, unit = "characters" },
    max_answer_blocks = S.int { min = 1, max = 40 },
  },
  api = S.record {
    deadline_ms = ms(SECOND, 5 * MINUTE),
    max_retry_after_ms = ms(SECOND, HOUR),
    final_give_up_ms = ms(0, 24 * HOUR),
  },
  socket = S.record {
    open_deadline_ms = ms(SECOND, 5 * MINUTE),
    ping_every_ms = ms(100, 10 * MINUTE),
    reconnect_ms = S.list(ms(0, HOUR), { min = 1, max = 20 }),
  },
  events = S.record { window_ms = ms(SECOND, HOUR), dedup_ms = ms(SECOND, 24 * HOUR) },
  drain_ms = ms(0, HOUR),
  flush_ms = ms(0, HOUR), -- the end of drain_ms kept for the final cards (clamped to drain_ms)
  context = S.record {
    max_messages = S.int { min = 0, max = 1000, unit = "messages" },
    max_bytes = S.int { min = 0, max = 1024 * 1024, unit = "bytes" },
    max_files = S.int { min = 0, max = 20, unit = "files" },
    max_image_bytes = S.int { min = 0, max = 5 * 1024 * 1024, unit = "bytes" },
    max_text_file_bytes = S.int { min = 0, max = 1024 * 1024, unit = "bytes" },
    max_redirects = S.int { min = 0, max = 5, unit = "redirects" },
  },
}

M.files.record = {
  retention_ms = ms(HOUR, 3650 * 24 * HOUR),
  expire_every_ms = ms(MINUTE, 24 * HOUR),
  excerpt_bytes = S.int { min = 256, max = 1024 * 1024, unit = "bytes" },
  pages = S.record {
    enabled = S.bool,
    base_url = S.optional(S.string { pattern = "^https?://[^%s]+[^/%s]$", what = "an http(s) URL without a trailing /", max_len = 500 }),
    tool_open_bytes = S.int { min = 0, max = 1024 * 1024, unit = "bytes" },
    tool_open_lines = S.int { min = 0, max = 100000 },
    diff_open_lines = S.int { min = 0, max = 100000 },
    diff_max_bytes = S.int { min = 0, max = 64 * M.MIB, unit = "bytes" },
    image_max_bytes = S.int { min = 0, max = 64 * M.MIB, unit = "bytes" },
  },
}

-- Hooks: policy functions called through policy.decide. ctx samples are run at load.
M.hooks = {
  ["agents.choose_agent"] = { file = "agents", name = "choose_agent" },
  ["execution.choose_backend"] = { file = "execution", name = "choose_backend" },
}

---------------------------------------------------------------------------------------------
-- Cross-field rules (within one file) and derived values. report(path, msg).

M.cross = {}

function M.cross.timeouts(t, report)
  local b = t.bash
  if b.floor_ms > b.default_ms then
    report("bash.floor_ms", string.format("must not exceed bash.default_ms (%s > %s)",
      M.human_ms(b.floor_ms), M.human_ms(b.default_ms)))
  end
  if b.default_ms > b.max_ms then
    report("bash.default_ms", string.format("must not exceed bash.max_ms (%s > %s)",
      M.human_ms(b.default_ms), M.human_ms(b.max_ms)))
  end
  local sb = t.sandbox
  if sb.default_budget_ms < b.floor_ms or sb.default_budget_ms > b.max_ms then
    report("sandbox.default_budget_ms", string.format("must lie within [bash.floor_ms, bash.max_ms] = [%s, %s], got %s",
      M.human_ms(b.floor_ms), M.human_ms(b.max_ms), M.human_ms(sb.default_budget_ms)))
  end
  -- A file travels as base64 (4 bytes per 3) in a /write request and a /read answer.
  local b64 = 4 * ((sb.max_file_bytes + 2) // 3)
  if t.server.max_body_bytes < b64 then
    report("server.max_body_bytes", string.format(
      "must hold a /write of sandbox.max_file_bytes (%d bytes, %d as base64), got %d",
      sb.max_file_bytes, b64, t.server.max_body_bytes))
  end
  if sb.max_answer_bytes < b64 then
    report("sandbox.max_answer_bytes", string.format(
      "must hold a /read answer of sandbox.max_file_bytes (%d bytes, %d as base64), got %d",
      sb.max_file_bytes, b64, sb.max_answer_bytes))
  end
  -- An /exec answer carries both streams, each JSON-escaped (a control byte takes 6 bytes).
  local exec_answer = 2 * 6 * t.process.max_output_bytes
  if sb.max_answer_bytes < exec_answer then
    report("sandbox.max_answer_bytes", string.format(
      "must hold an /exec answer of two process.max_output_bytes streams JSON-escaped (%d bytes), got %d",
      exec_answer, sb.max_answer_bytes))
  end
  if sb.max_thread_key_bytes >= t.server.max_header_bytes then
    report("sandbox.max_thread_key_bytes", string.format(
      "must be smaller than server.max_header_bytes (%d), got %d",
      t.server.max_header_bytes, sb.max_thread_key_bytes))
  end
  local margin = b.max_ms + t.token.reuse_slack_ms
  if margin >= M.TOKEN_LIFETIME_MS then
    report("token.reuse_slack_ms", string.format(
      "bash.max_ms + token.reuse_slack_ms = %s reaches the token's 1 h lifetime, so no token would ever be reused",
      M.human_ms(margin)))
  end
end

function M.derive_timeouts(t)
  t.sandbox.sleep_after_ms = M.parse_sleep_after(t.sandbox.sleep_after)
  -- A cached token is reused only while it outlives the longest single command plus slack.
  t.token.reuse_margin_ms = t.bash.max_ms + t.token.reuse_slack_ms
end

function M.cross.github(g, report)
  local read = g.scopes.read
  if read == nil then
    report("scopes.read", "is required (the scope readonly agents get)")
  elseif read.permissions == nil then
    report("scopes.read.permissions", "is required: the read scope must list exactly what it may read")
  else
    for _, k in ipairs(sorted_keys(read.permissions)) do
      if read.permissions[k] ~= "read" then
        report("scopes.read.permissions." .. k, "must be \"read\" in the read scope, got " .. show(read.permissions[k]))
      end
    end
  end
  if g.scopes.write == nil then report("scopes.write", "is required (the scope full agents get)") end
end

function M.cross.agents(a, report)
  for _, key in ipairs(sorted_keys(a.agents)) do
    local def = a.agents[key]
    local p = "agents." .. key
    if def.name ~= nil and def.name ~= key then
      report(p .. ".name", string.format("must equal its key %s, got %s", show(key), show(def.name)))
    end
    local repo = def.resources.repository == true
    local rd = type(a.run_defaults) == "table" and a.run_defaults or {}
    local model, max_tokens = def.model or rd.model, def.max_tokens or rd.max_tokens
    if type(a.models) == "table" and type(model) == "string" and a.models[model] == nil then
      report(p .. ".model", string.format("%s has no entry in models (its window, output limit and prices); add one",
        show(model)))
    end
    for i, m in ipairs(type(def.models) == "table" and def.models or {}) do
      if type(a.models) == "table" and a.models[m] == nil then
        report(("%s.models[%d]"):format(p, i), string.format("%s has no entry in models; add one", show(m)))
      end
    end
    if type(def.thinking) == "table" and type(max_tokens) == "number" and type(def.thinking.budget_tokens) == "number"
        and def.thinking.budget_tokens >= max_tokens then
      report(p .. ".thinking.budget_tokens", string.format("must be less than max_tokens (%d), got %d",
        max_tokens, def.thinking.budget_tokens))
    end
    for i, tool in ipairs(def.tools) do
      if M.EXECUTOR_TOOLS[tool] and not repo then
        report(string.format("%s.tools[%d]", p, i), string.format(
          "%s runs in a workspace, so agent %s must declare resources = { repository = true }", tool, key))
      end
      if def.readonly and M.WRITE_TOOLS[tool] then
        report(string.format("%s.tools[%d]", p, i), "a readonly agent cannot have " .. tool)
      end
    end
    for name, server in pairs(type(def.mcp_servers) == "table" and def.mcp_servers or {}) do
      if type(server) == "table" and server.command ~= nil and not repo then
        report(string.format("%s.mcp_servers.%s", p, name), string.format("a stdio server runs in the thread's "
          .. "sandbox, so agent %s must declare resources = { repository = true }", key))
      end
    end
    if def.provider ~= nil and def.provider ~= "anthropic"
        and (type(a.providers) ~= "table" or a.providers[def.provider] == nil) then
      report(p .. ".provider", string.format("%s is not \"anthropic\" nor a name in providers", show(def.provider)))
    end
    if def.token_scope ~= nil and not repo then
      report(p .. ".token_scope", "an agent without a repository gets no credential; remove token_scope or declare resources.repository")
    end
    if def.pull_requests and def.readonly then
      report(p .. ".pull_requests", "a readonly agent never pushes; remove pull_requests or readonly")
    end
    if def.pull_requests and not repo then
      report(p .. ".pull_requests", "needs resources = { repository = true }")
    end
    if def.readonly and def.token_scope == "write" then
      report(p .. ".token_scope", "a readonly agent must not get the write token")
    end
  end
  if type(a.review_comments) == "table" and type(a.review_comments.agent) == "string"
      and a.agents[a.review_comments.agent] == nil then
    report("review_comments.agent", "names no agent defined in agents: " .. show(a.review_comments.agent))
  end
  local names = {}
  for i, sc in ipairs(type(a.schedules) == "table" and a.schedules or {}) do
    if type(sc) == "table" and type(sc.agent) == "string" and a.agents[sc.agent] == nil then
      report(("schedules[%d].agent"):format(i), "names no agent defined in agents: " .. show(sc.agent))
    end
    if type(sc) == "table" and names[sc.name] then report(("schedules[%d].name"):format(i), "repeats " .. show(sc.name)) end
    if type(sc) == "table" and sc.name then names[sc.name] = true end
  end
  local prr = type(a.pull_request_reviews) == "table" and a.pull_request_reviews or {}
  if type(prr.agent) == "string" and a.agents[prr.agent] == nil then
    report("pull_request_reviews.agent", "names no agent defined in agents: " .. show(prr.agent))
  end
  if type(a.issues) == "table" and type(a.issues.agent) == "string" and a.agents[a.issues.agent] == nil then
    report("issues.agent", "names no agent defined in agents: " .. show(a.issues.agent))
  end
  if type(a.default_agent) == "string" and a.agents[a.default_agent] == nil then
    report("default_agent", "names no agent defined in agents: " .. show(a.default_agent))
  end
end

function M.derive_agents(a)
  for key, def in pairs(a.agents) do
    def.name = def.name or key
    for _, field in ipairs({ "model", "max_tokens", "max_turns", "system_prompt" }) do
      if def[field] == nil then def[field] = a.run_defaults[field] end
    end
    def.resources.repository = def.resources.repository == true
  end
end

-- A backend's own settings are policies/execution.lua's `NAME = {…}` (settings: a spec, or nil
-- for a backend with none); a later registration of a name replaces the earlier one.
function M.register_backend(name, settings)
  if not M.BACKENDS[name] then M.BACKEND_LIST[#M.BACKEND_LIST + 1] = name end
  M.BACKENDS[name] = true
  M.files.execution[name] = settings
end

function M.unregister_backend(name)
  M.BACKENDS[name], M.files.execution[name] = nil, nil
  for i, n in ipairs(M.BACKEND_LIST) do if n == name then table.remove(M.BACKEND_LIST, i) break end end
end

-- Whether a spec may be left out (S.optional), also for a file's top-level settings.
function M.is_optional(spec) return OPTIONAL[spec] == true end
-- A file's top-level setting left out: its default filled in (S.optional's); → whether it holds one.
M.fill_default = fill_default
-- The value a policy that leaves spec's setting out reads (a copy), or nil: none.
function M.default_of(spec) return copy(DEFAULT[spec]) end

function M.cross.execution(e, report)
  if e.backend.default == nil then
    report("backend.default", "is required (the backend of every agent not named here)")
  end
  for i, name in ipairs(e.child_env.pass) do
    if M.is_secret_name(name) then
      report(string.format("child_env.pass[%d]", i), string.format(
        "%s looks like a credential; the bot's own secrets never reach a command (credentials come from the GitHub identity per command)", name))
    end
  end
end

-- The host's file table size (/proc/sys/fs/file-max), or nil when unknown or unbounded.
function M.host_file_max()
  local f = io.open("/proc/sys/fs/file-max", "r")
  if not f then return nil end
  local n = tonumber(f:read("l") or "")
  f:close()
  if not n or n >= 2 ^ 52 then return nil end
  return math.tointeger(n)
end

-- Issue 22: the open files a full fleet of `instances` can hold (pids_max × open_files each,
-- the most the kernel lets an instance open) against fleet_files_percent of the host's table.
-- Returns nil when it fits (or the table is unbounded), else the text that says what to lower.
function M.fleet_files_problem(iso, instances, file_max)
  file_max = file_max or M.host_file_max()
  if not file_max then return nil end
  local per_instance = iso.pids_max * iso.open_files
  local fleet = (instances + iso.spare_instances) * per_instance
  local allowed = file_max * iso.fleet_files_percent // 100
  if fleet <= allowed then return nil end
  return string.format("a full fleet could hold %d open files (%d instances incl. %d spare × pids_max %d × "
    .. "open_files %d) but may hold %d (fleet_files_percent %d%% of the host's file table, fs.file-max = %d): "
    .. "lower open_files or pids_max (each instance's share is at most %d files), or max_instances",
    fleet, instances + iso.spare_instances, iso.spare_instances, iso.pids_max, iso.open_files, allowed,
    iso.fleet_files_percent, file_max, allowed // (instances + iso.spare_instances))
end

-- Across files. snap has every file's settings. report(file, path, msg).
function M.cross_files(snap, report)
  local files = M.fleet_files_problem(snap.isolation, snap.timeouts.sandbox.max_instances)
  if files then report("isolation", "open_files", files) end
  -- A command sandboxd kills on shutdown must read as a recycle to the executor
  -- (docs/contract.md#failure-recycle): its workspace is gone with the instance.
  local stopped = template.fill(snap.errors.messages.server_stopped, { drain_s = 0 })
  if rule.is_rule(snap.errors.recycle) and not snap.errors.recycle:match_text(stopped) then
    report("errors", "messages.server_stopped",
      "must be recognized by the recycle rule (a killed command's workspace is gone), got " .. show(stopped))
  end
  local scopes = snap.github.scopes
  local reserve = snap.timeouts.run.reserve_ms
  for _, key in ipairs(sorted_keys(snap.agents.agents)) do
    local def = snap.agents.agents[key]
    if def.token_scope ~= nil and scopes[def.token_scope] == nil then
      report("agents", "agents." .. key .. ".token_scope", string.format(
        "names no scope defined in policies/github.lua: %s", show(def.token_scope)))
    end
    if def.max_run_minutes * MINUTE <= reserve then
      report("agents", "agents." .. key .. ".max_run_minutes", string.format(
        "%d min leaves nothing after the run reserve (timeouts run.reserve_ms = %s)",
        def.max_run_minutes, M.human_ms(reserve)))
    end
  end
  for _, key in ipairs(sorted_keys(snap.execution.backend)) do
    if key ~= "default" and snap.agents.agents[key] == nil then
      report("execution", "backend." .. key, "names no agent defined in policies/agents.lua")
    end
  end
end

-- Sample contexts each hook is called with at load: it must answer them under budget.
function M.hook_samples(snap)
  local out = {}
  local names = sorted_keys(snap.agents.agents)
  out["execution.choose_backend"] = {}
  for _, name in ipairs(names) do
    table.insert(out["execution.choose_backend"], { agent = name, repo = "owner/name" })
    table.insert(out["execution.choose_backend"], { agent = name })
    table.insert(out["execution.choose_backend"], { agent = name, repo = "owner/name", front = "slack",
      configured = { ["local"] = true, sandbox = true, resident = false, e2b = false } })
  end
  out["agents.choose_agent"] = { { text = "run the tests" }, { text = "" } }
  return out
end

-- Is a hook's answer in range? Returns true or false, why.
M.hook_validate = {
  ["execution.choose_backend"] = function(v)
    if type(v) == "string" and M.BACKENDS[v] then return true end
    return false, "returned " .. show(v) .. " (expected one of " .. table.concat(M.BACKEND_LIST, ", ") .. ")"
  end,
  ["agents.choose_agent"] = function(v, snap)
    if type(v) == "string" and snap.agents.agents[v] ~= nil then return true end
    return false, "returned " .. show(v) .. " (expected an agent name from policies/agents.lua)"
  end,
}

return M
