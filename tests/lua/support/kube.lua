-- The Kubernetes API stand-in (tests/support/kube_standin.py) as a real process on loopback,
-- over HTTPS with a CA of its own, and a kubernetes executor pointed at it through a kubeconfig
-- (JSON, as the client reads it) or a service-account directory.
local core = require("switchboard.core")
local cjson = require("cjson")
local procs = require("support.procs")
local S = require("support.sandbox")

local M = {}

M.TOKEN = "kube-" .. core.crypto.hex(core.crypto.random_bytes(16)) -- the service account's
M.NAMESPACE = "switchboard"
M.POOL = "switchboard"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Starts the stand-in (inside core.run). opts: policies (for the pods' sandboxd), pool_size,
-- bookmark_ms, finalize_ms. Returns a handle:
--   .url .dir .ca .pod_port  :kubeconfig() (a path)  :sa_dir() (a service-account directory)
--   :faults(list) :cut_watches() :compact() :kill(claim) :pool(n) :claims() :pods()
--   :requests() :watches() :stop()
function M.start(opts)
  opts = opts or {}
  local dir = S.tmpdir()
  local cmd = ("SANDBOX_TOKEN=%s /usr/bin/python3 tests/support/kube_standin.py --dir %s --token %s --bin %s "
    .. "--policies %s --pool %s --namespace %s --pool-size %d --bookmark-ms %d --finalize-ms %d --tls "
    .. "--vct-policy %s --watch %d >%s/log 2>&1 &")
    :format(S.TOKEN, dir, M.TOKEN, S.BIN, opts.policies, M.POOL, M.NAMESPACE, opts.pool_size or 1,
      opts.bookmark_ms or 500, opts.finalize_ms or 300, opts.vct_policy or "Allowed", procs.self_pid(), dir)
  os.execute(cmd)
  local port = S.wait_for(function() return read(dir .. "/port") end, 180000) -- python3 on a loaded machine (over 60 s seen): the file ends the wait
  assert(port, "the Kubernetes stand-in did not start: " .. (read(dir .. "/log") or ""))
  local h = { dir = dir, port = tonumber(port), pid = tonumber(read(dir .. "/pid")),
              pod_port = tonumber(read(dir .. "/pod_port")), ca = dir .. "/ca.crt" }
  h.url = "https://127.0.0.1:" .. h.port
  local function call(method, path, body)
    local status, _, raw = core.http.request{ method = method, url = h.url .. path, ca_file = h.ca,
      body = body and cjson.encode(body) or nil, deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status and status < 300, ("stand-in %s %s: %s"):format(method, path, tostring(status)))
    return raw ~= "" and cjson.decode(raw) or nil
  end
  -- cert = true: the user is the client certificate (client-certificate-data), no token
  function h.kubeconfig(_, cert)
    local path = dir .. (cert and "/kubeconfig-cert.json" or "/kubeconfig.json")
    local b64 = core.crypto.base64_encode
    local user = cert and { ["client-certificate-data"] = b64(read(dir .. "/client.crt")),
      ["client-key-data"] = b64(read(dir .. "/client.key")) } or { token = M.TOKEN }
    write(path, cjson.encode{
      apiVersion = "v1", kind = "Config", ["current-context"] = "standin",
      clusters = { { name = "standin", cluster = { server = h.url,
        ["certificate-authority-data"] = b64(read(h.ca)) } } },
      users = { { name = "bot", user = user } },
      contexts = { { name = "standin", context = { cluster = "standin", user = "bot", namespace = M.NAMESPACE } } },
    })
    return path
  end
  function h.sa_dir()
    local sa = dir .. "/serviceaccount"
    os.execute("mkdir -p " .. sa)
    write(sa .. "/token", M.TOKEN .. "\n")
    write(sa .. "/namespace", M.NAMESPACE)
    os.execute(("cp %s %s/ca.crt"):format(h.ca, sa))
    return sa
  end
  function h.faults(_, list) call("PUT", "/_standin/faults", list) end
  function h.cut_watches() return call("POST", "/_standin/cut-watches").cut end
  function h.compact() call("POST", "/_standin/compact") end
  function h.kill(_, claim) return call("POST", "/_standin/kill/" .. claim) end
  function h.pool(_, n) call("POST", "/_standin/pool", { size = n }) end
  function h.claims() return call("GET", "/_standin/claims") end
  function h.pods() return call("GET", "/_standin/pods") end
  function h.requests() return call("GET", "/_standin/requests") end
  function h.watches() return call("GET", "/_standin/watches") end
  function h.pvcs() return call("GET", "/_standin/pvcs") end
  function h.pvc(_, name)
    for _, p in ipairs(h.pvcs()) do if p.name == name then return p end end
  end
  function h.claim(_, name)
    for _, c in ipairs(h.claims()) do if c.name == name then return c end end
  end
  -- requests of one verb ("create", "patch", "delete", "watch", "get") so far
  function h.count(_, op)
    local n = 0
    for _, r in ipairs(h.requests()) do
      local claims = r.path:match("/sandboxclaims") ~= nil
      local is = (op == "create" and r.method == "POST" and claims) or (op == "patch" and r.method == "PATCH" and claims)
        or (op == "delete" and r.method == "DELETE" and claims)
        or (op == "watch" and r.method == "GET" and r.query.watch == "true")
        or (op == "get" and r.method == "GET" and r.query.watch == nil and r.path:match("/sandboxclaims/"))
      if is then n = n + 1 end
    end
    return n
  end
  -- The stand-in's pods that are still running (their --root lies under its directory: a warm
  -- pod's pod-…, a cold claim's volume volumes/… — those were not looked for, and two of them
  -- outlived a full run).
  local function pods_alive()
    local alive = {}
    for pid, cmdline in pairs(procs.cmdlines()) do
      if cmdline:find(" sandboxd --pod ", 1, true) and cmdline:find(" --root " .. dir .. "/", 1, true) then
        alive[#alive + 1] = pid
      end
    end
    return alive
  end
  -- Stops the stand-in and fails if any pod it started outlives it (a pod refilled during
  -- its shutdown once did, orphaned for good).
  function h.stop()
    os.execute(("kill -TERM %d 2>/dev/null"):format(h.pid))
    S.wait_for(function() return read("/proc/" .. h.pid .. "/stat") == nil end, 30000)
    os.execute(("kill -9 %d 2>/dev/null"):format(h.pid))
    local left = pods_alive()
    for _, pid in ipairs(left) do os.execute(("kill -9 %d 2>/dev/null"):format(pid)) end
    S.rm(dir)
    assert(#left == 0, ("the Kubernetes stand-in left %d pod(s) running: pids %s"):format(#left, table.concat(left, " ")))
  end
  -- A getenv for the factory: KUBECONFIG at the stand-in and sandboxd's bearer.
  function h.getenv(_, extra)
    local env = { KUBECONFIG = h:kubeconfig(), SANDBOX_TOKEN = S.TOKEN }
    for k, v in pairs(extra or {}) do env[k] = v end
    return function(name) return env[name] end
  end
  return h
end

-- A kubernetes executor on the stand-in. opts: policy (fn), thread_key, via ("kubeconfig" |
-- "service-account" | "client-certificate": a kubeconfig whose user is a certificate), wall_ms
function M.executor(h, opts)
  opts = opts or {}
  local kapi = require("switchboard.exec.kubernetes_api")
  local cfg
  if opts.via == "service-account" then
    cfg = assert(kapi.config{ sa_dir = h:sa_dir(), getenv = function(n)
      return ({ KUBERNETES_SERVICE_HOST = "127.0.0.1", KUBERNETES_SERVICE_PORT = tostring(h.port) })[n]
    end })
  else
    local kc = h:kubeconfig(opts.via == "client-certificate")
    cfg = assert(kapi.config{ getenv = function(n) return n == "KUBECONFIG" and kc or nil end })
  end
  local api = kapi.new(cfg, { timeouts = function() return opts.policy().timeouts.kubernetes end })
  return require("switchboard.exec.kubernetes").new{
    api = api, namespace = cfg.namespace, warm_pool = opts.pool or M.POOL, port = h.pod_port,
    token = S.TOKEN, thread_key = opts.thread_key or "T1", agent = "coding", policy = opts.policy,
    resolve_envs = opts.resolve_envs, wall_ms = opts.wall_ms, build = opts.build,
    workspace = opts.workspace,
  }
end

return M
