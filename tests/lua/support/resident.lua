-- The resident on loopback for specs and benches: a bare git repository to onboard, and the
-- real `switchboard resident` binary started on port 0.
local core = require("switchboard.core")
local S = require("support.sandbox")

local policies = require("support.policies")

local M = {}

-- The install: fast and observable (the shipped rows run npm ci or pip, which take seconds).
local EXECUTION = [[
resident.install = {
  { file = "setup.sh", command = "sh setup.sh", deps = { "deps" } },
}
]]

function M.policy_dir(timeouts_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\nresident.fetch_every_ms = 1 * second\n"
      .. (timeouts_extra or "") .. "\n" end,
    execution = function(src) return src .. "\n" .. EXECUTION .. "\n" end,
  }
end


M.TOKEN = S.TOKEN

-- Runs a shell line without the sanitizer runtime the ASan build preloads into the interpreter.
function M.sh(cmd)
  local ok = os.execute("env -u LD_PRELOAD sh -c '" .. cmd:gsub("'", "'\\''") .. "'")
  assert(ok, "failed: " .. cmd)
end

-- A bare repository base/acme/api with setup.sh (the install: makes deps/ok) and a README.
function M.make_base()
  local t = S.tmpdir()
  M.sh(("cd %s && mkdir src && cd src && git init -q && printf 'mkdir -p deps && echo installed > deps/ok\\n' > setup.sh"
    .. " && echo hello > README && git add -A && git -c user.email=t@t -c user.name=t commit -qm init"
    .. " && mkdir -p %s/base/acme && git clone -q --bare %s/src %s/base/acme/api"):format(t, t, t, t))
  return t
end

-- A walled resident (opts as M.start's; walls and may_fail set here), or nil when this kernel
-- gives no walls — the spec's `pending` told why. Any other failure to start fails the spec.
function M.start_walled(base, opts, pending)
  opts.walls, opts.may_fail = true, true
  local h, log = M.start(base, opts)
  if h then return h end
  local why = log:match("cannot build the walls[^\n]*")
  assert(why, "the walled resident did not start:\n" .. log)
  pending("this kernel gives no walls: " .. why)
  return nil
end

function M.start(base, opts)
  opts = opts or {}
  local root = opts.root or S.tmpdir()
  local argv = { S.BIN, "--policies", opts.policies, "resident", "--listen", opts.listen or "127.0.0.1:0",
    "--root", root, "--git-base", "file://" .. base .. "/base/" }
  if not opts.walls then argv[#argv + 1] = "--no-walls" end
  local chunks = {}
  local extra = { RESIDENT_TOKEN = M.TOKEN }
  for k, v in pairs(opts.env or {}) do extra[k] = v end
  local env = S.base_env(extra)
  local proc = assert(core.spawn{ argv = argv, env = env, max_output = 16 << 20,
    on_output = function(_, c) chunks[#chunks + 1] = c end })
  local h = { proc = proc, pid = proc.pid, root = root }
  S.servers[#S.servers + 1] = { pid = proc.pid, proc = proc, result = nil }
  local entry = S.servers[#S.servers]
  function h.log() return table.concat(chunks) end
  core.go(function() h.result = proc:wait(); entry.result = h.result end)
  local port = S.wait_for(function() return h.log():match("resident%.listening[^\n]*port=(%d+)") or h.result end, 60000) -- a bound for a loaded machine
  if type(port) ~= "string" and opts.may_fail then return nil, h.log() end
  assert(type(port) == "string", "resident did not start:\n" .. h.log())
  h.port, h.url = tonumber(port), "http://127.0.0.1:" .. port
  function h.stop(sig) if not h.result then os.execute(("kill -%s %d"):format(sig or "TERM", h.pid)) end end
  function h.wait() S.wait_for(function() return h.result end, 60000); return h.result end
  return h
end

-- POST /onboard, then wait while it is onboarding; returns the state it settled in.
function M.onboard(h, repo)
  local cjson = require("cjson")
  local function req(method, path, body)
    local status, _, raw = core.http.request{ method = method, url = h.url .. path, body = body,
      headers = { authorization = "Bearer " .. M.TOKEN, ["content-type"] = "application/json" }, deadline_ms = 30000 }
    local ok, doc = pcall(cjson.decode, raw or "")
    return status, ok and doc or {}
  end
  assert(req("POST", "/onboard", cjson.encode({ repo = repo })) == 202)
  local state
  S.wait_for(function()
    local status, doc = req("GET", "/status?repo=" .. repo)
    state = status == 404 and "404" or doc.state
    return state ~= "onboarding"
  end, 60000)
  return state
end

return M
