-- What the kubernetes executor reads from the API server (exec/kubernetes_watch.lua): the watch
-- stream in any split, SandboxClaims as agent-sandbox's controller writes them, Status objects;
-- and where the client finds the server (exec/kubernetes_api.lua's config).
local cjson = require("cjson")
local kw = require("switchboard.exec.kubernetes_watch")
local kapi = require("switchboard.exec.kubernetes_api")
local S = require("support.sandbox")

local READY = cjson.encode{ type = "MODIFIED", object = {
  kind = "SandboxClaim", metadata = { name = "switchboard-ab", resourceVersion = "1002" },
  status = { conditions = { { type = "Ready", status = "True", reason = "DependenciesReady", message = "Pod is Ready" } },
             sandbox = { name = "switchboard-00001", podIPs = { "10.4.0.7" } } } } }
local BOOKMARK = cjson.encode{ type = "BOOKMARK", object = { metadata = { resourceVersion = "1003" } } }

describe("kubernetes watch stream", function()
  it("gives the same events whatever the split, a line cut anywhere", function()
    local stream = READY .. "\n" .. BOOKMARK .. "\n"
    for cut = 1, #stream - 1 do
      local d = kw.decoder()
      local a = assert(d:feed(stream:sub(1, cut)))
      local b = assert(d:feed(stream:sub(cut + 1)))
      local all = {}
      for _, e in ipairs(a) do all[#all + 1] = e end
      for _, e in ipairs(b) do all[#all + 1] = e end
      assert.equal(2, #all)
      assert.equal("MODIFIED", all[1].type)
      assert.equal("BOOKMARK", all[2].type)
      assert.equal(0, d:partial())
    end
  end)

  it("refuses an unknown event type, a non-object and a line over the limit — and everything after", function()
    local d = kw.decoder()
    local ev, err = d:feed('{"type":"HELLO","object":{}}\n')
    assert.is_nil(ev)
    assert.matches("unknown type", err)
    assert.is_nil((d:feed(READY .. "\n")))
    assert.is_nil((kw.decoder():feed('[1,2]\n')))
    local small = kw.decoder{ max_line = 64 }
    local _, long = small:feed(("x"):rep(65))
    assert.matches("longer than 64", long)
  end)

  it("reads a claim: Ready, the pod's IP and name, a deletion under way", function()
    local s = kw.claim_state(cjson.decode(READY).object)
    assert.is_true(s.ready)
    assert.equal("10.4.0.7", s.ip)
    assert.equal("switchboard-00001", s.sandbox)
    assert.equal("DependenciesReady", s.reason)
    assert.equal("1002", s.rv)
    assert.is_false(s.deleting)
    local gone = kw.claim_state{ metadata = { deletionTimestamp = "2026-12-01T00:00:00Z", resourceVersion = "9 9" },
      status = { conditions = { { type = "Ready", status = "False", reason = "DependenciesNotReady" } },
                 sandbox = { podIPs = { "10.0.0.1/../x" } } } }
    assert.is_true(gone.deleting)
    assert.is_false(gone.ready)
    assert.is_nil(gone.ip)  -- not an address: never reaches a URL
    assert.is_nil(gone.rv)  -- not a version: never reaches a query
  end)

  it("reads a Status (every API error, a watch's 410)", function()
    local st = kw.status_of(cjson.decode('{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}'))
    assert.equal(410, st.code)
    assert.equal("Expired", st.reason)
    assert.is_nil(kw.status_of({ kind = "SandboxClaim" }))
  end)
end)

describe("kubernetes API client: where the server is", function()
  it("in a pod: the service account's token, CA and namespace", function()
    local sa = S.tmpdir()
    for name, text in pairs({ token = "t0ken\n", namespace = "team-a\n", ["ca.crt"] = "pem" }) do
      local f = assert(io.open(sa .. "/" .. name, "w")); f:write(text); f:close()
    end
    local cfg = assert(kapi.config{ sa_dir = sa, getenv = function(n)
      return ({ KUBERNETES_SERVICE_HOST = "fd00::1", KUBERNETES_SERVICE_PORT = "6443" })[n] end })
    assert.equal("https://[fd00::1]:6443", cfg.server)
    assert.equal("team-a", cfg.namespace)
    assert.equal(sa .. "/ca.crt", cfg.ca_file)
    assert.is_nil(cfg.token) -- read from the file when a request is made, never kept in the config
    S.rm(sa)
  end)

  it("a kubeconfig must be JSON, and says how to write one; no cluster at all says what is missing", function()
    local dir = S.tmpdir()
    local f = assert(io.open(dir .. "/config", "w"))
    f:write("apiVersion: v1\nkind: Config\n")
    f:close()
    local cfg, why = kapi.config{ getenv = function(n) return n == "KUBECONFIG" and dir .. "/config" or nil end }
    assert.is_nil(cfg)
    assert.matches("kubectl config view %-%-raw %-%-minify %-%-flatten %-o json", why.message)
    cfg, why = kapi.config{ sa_dir = dir .. "/none", getenv = function() return nil end }
    assert.is_nil(cfg)
    assert.matches("KUBECONFIG", why.message)
    S.rm(dir)
  end)
end)
