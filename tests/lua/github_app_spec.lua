-- The GitHub App protocol (docs/github.md "For developers", docs/contract.md#credentials): the
-- JWT as the stand-in verifies it, the headers, the private key's sources, the installation
-- lookup and the mint's failures — each legible and free of the key, the JWT and tokens.
local core = require("switchboard.core")
local cjson = require("cjson")
local P = require("support.policies")
local standin = require("support.github_standin")
local app = require("switchboard.github.app")

local function shipped() return P.shipped() end

local function world(opts)
  opts = opts or {}
  opts.policy = opts.policy or shipped
  return standin.world(opts)
end

local function claims_of(jwt)
  local h, p = jwt:match("^([^.]+)%.([^.]+)%.")
  return cjson.decode(core.crypto.base64url_decode(h)), cjson.decode(core.crypto.base64url_decode(p))
end

-- The error's message carries no secret the world has seen.
local function assert_clean(w, err)
  local leak = w.leak(tostring(err))
  assert(leak == nil, "the error quotes a secret (" .. tostring(leak) .. "): " .. tostring(err))
end

local function closed_port()
  -- A port nobody listens on: bind, read it, close (the kernel hands it out rarely again soon).
  local f = io.popen("/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1]); s.close()'")
  local port = tonumber(f:read("l"))
  f:close()
  return port
end

describe("github app: the JWT", function()
  it("is RS256 with iat = now - 60 s, exp within 10 min of iat, iss = the App ID; the stand-in verifies it with the public key", function()
    core.run(function()
      local w = world()
      local env = assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert.is_string(env.GH_TOKEN)
      assert.same({}, w.gh.violations)
      assert.is_true(#w.gh.jwts >= 1)
      local header, claims = claims_of(w.gh.jwts[1])
      assert.same({ alg = "RS256", typ = "JWT" }, header)
      local now = w.clock.ms // 1000
      assert.equal(now - 60, claims.iat)
      assert.is_true(claims.exp > now and claims.exp - claims.iat <= 600)
      assert.equal(12345, claims.iss)
      local payload = core.crypto.base64url_decode(w.gh.jwts[1]:match("^[^.]+%.([^.]+)"))
      assert.matches('"iss":12345[,}]', payload)       -- a JSON integer, as GitHub wants
      assert.matches('"iat":%d+[,}]', payload)
      w.close()
    end)
  end)

  it("sends a client ID (Iv1.…) as the iss string", function()
    core.run(function()
      local w = world({ client_id = "Iv1.0123abcd", env = { GITHUB_APP_ID = "Iv1.0123abcd" } })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      local _, claims = claims_of(w.gh.jwts[1])
      assert.equal("Iv1.0123abcd", claims.iss)
      assert.same({}, w.gh.violations)
      w.close()
    end)
  end)

  it("is reused while it has more than a minute left, then signed again", function()
    core.run(function()
      local w = world()
      assert(w.identity:resolve_envs("read", { repo = "acme/api" })) -- lookup + mint: one JWT
      assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      assert.equal(3, #w.gh.jwts)
      assert.equal(w.gh.jwts[1], w.gh.jwts[3])
      w.advance(8 * 60 * 1000 + 1000) -- under a minute left on it
      w.identity.tokens:forget("read@678")
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert.are_not.equal(w.gh.jwts[1], w.gh.jwts[4])
      assert.same({}, w.gh.violations)
      w.close()
    end)
  end)

  it("signed with a key that is not the App's is refused with 401 and a message saying what to check", function()
    core.run(function()
      local other = (standin.keys("other"))
      local w = world({ env = { GITHUB_APP_PRIVATE_KEY = other } })
      local env, err = w.identity:resolve_envs("read", { repo = "acme/api" })
      assert.is_nil(env)
      assert.equal("http 401", err.code)
      assert.matches("GitHub rejected the App's JWT on GET " .. w.gh.api_url:gsub("%p", "%%%0")
        .. "/repos/acme/api/installation %(401%)", err.message)
      assert.matches("GITHUB_APP_PRIVATE_KEY is one of its current private keys", err.message, 1, true)
      assert.matches("could not be decoded", err.message, 1, true)
      assert.same({ "bad signature" }, w.gh.violations)
      assert.is_nil(w.leak(err.message))
      assert.is_nil(err.message:find(other:match("\n(.-)\n"), 1, true))
      w.close()
    end)
  end)

  it("with the wrong App ID is refused with 401 (the stand-in checks iss)", function()
    core.run(function()
      local w = world({ env = { GITHUB_APP_ID = "999" } })
      local env, err = w.identity:resolve_envs("write", { repo = "acme/api" })
      assert.is_nil(env)
      assert.equal("http 401", err.code)
      assert.matches("GITHUB_APP_ID", err.message, 1, true)
      assert.same({ "iss 999" }, w.gh.violations)
      w.close()
    end)
  end)
end)

describe("github app: every call", function()
  it("carries Accept, X-GitHub-Api-Version, a User-Agent and the policy's deadline", function()
    core.run(function()
      local seen = {}
      local w
      w = world({ identity_opts = { request = function(args)
        seen[#seen + 1] = args
        return w.gh.request(args)
      end } })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert.equal(2, #seen)
      for _, args in ipairs(seen) do
        assert.equal("application/vnd.github+json", args.headers["Accept"])
        assert.equal("2022-11-28", args.headers["X-GitHub-Api-Version"])
        assert.matches("^OpenSwitchboard/", args.headers["User-Agent"])
        assert.matches("^Bearer ", args.headers["Authorization"])
        assert.equal(shipped().github.request_timeout_ms, args.deadline_ms)
      end
      assert.equal("GET", seen[1].method)
      assert.equal("POST", seen[2].method)
      assert.equal("application/json", seen[2].headers["Content-Type"])
      w.close()
    end)
  end)

  it("is answered 403 by the stand-in without a User-Agent, like GitHub", function()
    core.run(function()
      local w = world()
      local status, _, body = w.gh.request{ method = "GET", url = w.gh.api_url .. "/app/installations/678",
        headers = { Accept = "application/vnd.github+json", ["X-GitHub-Api-Version"] = "2022-11-28" },
        deadline_ms = 5000 }
      assert.equal(403, status)
      assert.matches("User-Agent", cjson.decode(body).message, 1, true)
      w.close()
    end)
  end)
end)

describe("github app: the private key", function()
  local function mint_with(key_value, extra)
    local env, err, w
    core.run(function()
      local e = { GITHUB_APP_PRIVATE_KEY = key_value }
      for k, v in pairs(extra or {}) do e[k] = v end
      w = world({ env = e })
      env, err = w.identity:resolve_envs("read", { repo = "acme/api" })
      w.close()
    end)
    return env, err, w
  end

  it("may be the PEM itself", function()
    local env, err = mint_with((standin.keys()))
    assert(env, tostring(err))
    assert.is_string(env.GH_TOKEN)
  end)

  it("may be the PEM with its newlines written as \\n", function()
    local pem = (standin.keys():gsub("\n", "\\n"))
    assert.is_nil(pem:find("\n"))
    local env, err = mint_with(pem)
    assert(env, tostring(err))
  end)

  it("may be the PEM base64-encoded", function()
    local env, err = mint_with(core.crypto.base64_encode(standin.keys()))
    assert(env, tostring(err))
  end)

  it("may be the path of a file holding it, read again when the JWT is renewed (key rotation)", function()
    local path = require("support.tmp").name("app-key")
    P.write(path, (standin.keys()))
    core.run(function()
      local w = world({ env = { GITHUB_APP_PRIVATE_KEY = path } })
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      -- Rotate: the App now only knows the new key; the file holds it.
      local new_priv, new_pub = standin.keys("rotated")
      P.write(path, new_priv)
      w.gh.public_key = new_pub
      w.advance(9 * 60 * 1000) -- the JWT is renewed; the token is past the margin too
      w.advance(30 * 60 * 1000)
      local env, err = w.identity:resolve_envs("read", { repo = "acme/api" })
      assert(env, tostring(err))
      assert.same({}, w.gh.violations)
      w.close()
    end)
    os.remove(path)
  end)

  it("as a path that cannot be read fails naming the path and the variable, never a key", function()
    local env, err = mint_with("/nonexistent/app.pem")
    assert.is_nil(env)
    assert.equal("config", err.code)
    assert.matches("the private key file /nonexistent/app.pem named by GITHUB_APP_PRIVATE_KEY cannot be read (not_found)", err.message, 1, true)
  end)

  it("that is neither a PEM nor a path is refused without quoting it", function()
    local secretish = "MIIEpAIBAAKCAQEAzSECRETSECRETSECRETno-armour-at-all"
    local env, err = mint_with(secretish)
    assert.is_nil(env)
    assert.matches("neither a PEM", err.message, 1, true)
    assert.is_nil(err.message:find(secretish, 1, true))
  end)

  it("that is a PEM of no key fails with the engine's reason, never the text", function()
    local junk = "-----BEGIN PRIVATE KEY-----\nTm90IGEga2V5IGF0IGFsbCwganVzdCB0ZXh0IHRoYXQgbG9va3MgbGlrZSBvbmU=\n-----END PRIVATE KEY-----\n"
    local env, err = mint_with(junk)
    assert.is_nil(env)
    assert.matches("GITHUB_APP_PRIVATE_KEY cannot sign the app's JWT: could not read the private key", err.message, 1, true)
    assert.is_nil(err.message:find("Tm90IGEga2V5", 1, true))
  end)
end)

describe("github app: the installation", function()
  it("is looked up per repository once and remembered", function()
    core.run(function()
      local w = world()
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      assert(w.identity:resolve_envs("read", { repo = "acme/web" })) -- same installation, same slot
      local lookups = 0
      for _, r in ipairs(w.gh.requests) do
        if r.path:find("/installation$") then lookups = lookups + 1 end
      end
      assert.equal(2, lookups)
      assert.equal(1, w.gh:mints_for("read", 678))
      assert.equal(1, w.gh:mints_for("write", 678))
      w.close()
    end)
  end)

  it("of another org is another installation with its own slots", function()
    core.run(function()
      local w = world()
      local a = assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      local b = assert(w.identity:resolve_envs("read", { repo = "umbrella/corp" }))
      assert.are_not.equal(a.GH_TOKEN, b.GH_TOKEN)
      assert.equal(1, w.gh:mints_for("read", 678))
      assert.equal(1, w.gh:mints_for("read", 900))
      w.close()
    end)
  end)

  it("that does not cover the repository (404) says so, and how to fix it", function()
    core.run(function()
      local w = world()
      local env, err = w.identity:resolve_envs("read", { repo = "acme/secret-sauce" })
      assert.is_nil(env)
      assert.equal("http 404", err.code)
      assert.equal(404, err.status)
      assert.matches("^GitHub credentials don't have access to acme/secret%-sauce — ", err.message)
      assert.matches("Install App → acme → Configure", err.message, 1, true)
      assert.matches("All repositories", err.message, 1, true)
      assert.matches("GITHUB_APP_INSTALLATION_ID", err.message, 1, true)
      assert_clean(w, err)
      assert.equal(0, #w.gh.mints)
      w.close()
    end)
  end)

  it("configured in GITHUB_APP_INSTALLATION_ID is used without a lookup", function()
    core.run(function()
      local w = world({ env = { GITHUB_APP_INSTALLATION_ID = "900" } })
      assert(w.identity:resolve_envs("read", {}))
      assert.equal(1, #w.gh.requests)
      assert.equal("/app/installations/900/access_tokens", w.gh.requests[1].path)
      w.close()
    end)
  end)

  it("is needed: no GITHUB_APP_INSTALLATION_ID and no repository is a legible error", function()
    core.run(function()
      local w = world()
      local env, err = w.identity:resolve_envs("read", {})
      assert.is_nil(env)
      assert.matches("GITHUB_APP_INSTALLATION_ID is not set and the command names no repository", err.message, 1, true)
      assert.equal(0, #w.gh.requests)
      w.close()
    end)
  end)

  it("that vanished (mint answered 404) is looked up again on the next command", function()
    core.run(function()
      local w = world()
      assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      -- The App is reinstalled: new installation id.
      w.gh.installations[679] = w.gh.installations[678]
      w.gh.installations[678] = nil
      w.advance(40 * 60 * 1000)
      local env, err = w.identity:resolve_envs("read", { repo = "acme/api" })
      assert.is_nil(env)
      assert.equal("http 404", err.code)
      assert.matches("GitHub App 12345 has no installation 678", err.message, 1, true)
      assert.matches("the next command looks the installation up again", err.message, 1, true)
      env = assert(w.identity:resolve_envs("read", { repo = "acme/api" }))
      assert.equal(1, w.gh:mints_for("read", 679))
      w.close()
    end)
  end)
end)

describe("github app: mint failures", function()
  it("422 names the permissions the installation does not grant, and where to fix it", function()
    core.run(function()
      local installations = standin.default_installations()
      installations[678].permissions.actions = nil
      installations[678].permissions.checks = nil
      local w = world({ installations = installations })
      local env, err = w.identity:resolve_envs("read", { repo = "acme/api" })
      assert.is_nil(env)
      assert.equal("http 422", err.code)
      assert.matches("GitHub refused to mint the read token (422): the installation does not grant "
        .. "actions:read (installation has none), checks:read (installation has none)", err.message, 1, true)
      assert.matches("The permissions requested are not granted to this installation.", err.message, 1, true)
      assert.matches("scopes.read in policies/github.lua", err.message, 1, true)
      assert.same({ "actions:read (installation has none)", "checks:read (installation has none)" }, err.refused)
      assert_clean(w, err)
      w.close()
    end)
  end)

  it("422 still names what was asked when the installation's grant cannot be read", function()
    core.run(function()
      local w = world({ env = { GITHUB_APP_INSTALLATION_ID = "678" } })
      w.gh:force("POST /app/installations/678/access_tokens", 422,
        { message = "The permissions requested are not granted to this installation." })
      w.gh:force("GET /app/installations/678", 500, { message = "boom" })
      local env, err = w.identity:resolve_envs("read", {})
      assert.is_nil(env)
      assert.matches("GitHub did not say which; the scope asks for actions:read, checks:read, "
        .. "contents:read, issues:read, metadata:read, pull_requests:read", err.message, 1, true)
      w.close()
    end)
  end)

  it("401 on the mint says the JWT was rejected and what to check", function()
    core.run(function()
      local w = world({ env = { GITHUB_APP_INSTALLATION_ID = "678" } })
      w.gh:force("POST /app/installations/678/access_tokens", 401,
        { message = "'Expiration time' claim ('exp') is too far in the future" })
      local env, err = w.identity:resolve_envs("write", {})
      assert.is_nil(env)
      assert.equal("http 401", err.code)
      assert.matches("GitHub rejected the App's JWT on POST", err.message, 1, true)
      assert.matches("this host's clock is right", err.message, 1, true)
      assert.matches("too far in the future", err.message, 1, true)
      assert_clean(w, err)
      w.close()
    end)
  end)

  it("a GitHub text that quotes one of our secrets is scrubbed before it is shown", function()
    core.run(function()
      local w = world({ env = { GITHUB_APP_INSTALLATION_ID = "678" } })
      assert(w.identity:resolve_envs("read", {}))
      local jwt = w.gh.jwts[1]
      w.gh:force("POST /app/installations/678/access_tokens", 500, { message = "bad jwt " .. jwt })
      local env, err = w.identity:resolve_envs("write", {})
      assert.is_nil(env)
      assert.matches("GitHub answered 500 to POST", err.message, 1, true)
      assert.matches("bad jwt [redacted]", err.message, 1, true)
      assert_clean(w, err)
      w.close()
    end)
  end)

  it("a network failure names the endpoint", function()
    core.run(function()
      local port = closed_port()
      local w = world({ env = { GITHUB_API_URL = "http://127.0.0.1:" .. port, GITHUB_APP_INSTALLATION_ID = "678" },
        identity_opts = { request = core.http.request } })
      local env, err = w.identity:resolve_envs("read", {})
      assert.is_nil(env)
      assert.equal("transport", err.code)
      assert.matches(("GitHub API POST http://127.0.0.1:%d/app/installations/678/access_tokens is unreachable"):format(port),
        err.message, 1, true)
      assert.matches("GITHUB_API_URL", err.message, 1, true)
      assert_clean(w, err)
      w.close()
    end)
  end)

  it("a GitHub that never answers is given up at github.request_timeout_ms, naming the endpoint and the knob", function()
    local dir = P.dir({ github = function(src) return src .. "\nrequest_timeout_ms = 1 * second\n" end })
    local snap = assert(P.load(dir))
    core.run(function()
      local w = world({ policy = function() return snap end, env = { GITHUB_APP_INSTALLATION_ID = "678" } })
      w.gh:force("POST /app/installations/678/access_tokens", 0)
      local t0 = core.now_ms()
      local env, err = w.identity:resolve_envs("read", {})
      local took = core.now_ms() - t0
      assert.is_nil(env)
      assert.equal("timeout", err.code)
      -- at the deadline, not never: this GitHub never answers
      assert.is_true(took >= 900 and took < 30000, "took " .. took)
      assert.matches("GitHub API POST " .. w.gh.api_url .. "/app/installations/678/access_tokens gave no answer within 1 s "
        .. "(github.request_timeout_ms in policies/github.lua)", err.message, 1, true)
      w.close()
    end)
    P.cleanup()
  end)
end)

describe("github app: expires_at", function()
  it("is read as UTC ISO-8601 with Z, a fraction or an offset", function()
    assert.equal(0, app.parse_time("1970-01-01T00:00:00Z"))
    assert.equal(1783220645000, app.parse_time("2026-07-05T03:04:05Z"))
    assert.equal(1783220645000, app.parse_time("2026-07-05T03:04:05.123Z"))
    assert.equal(1783220645000, app.parse_time("2026-07-05T05:04:05+02:00"))
    assert.equal(951782400000, app.parse_time("2000-02-29T00:00:00Z"))
    assert.is_nil(app.parse_time("2026-07-05 03:04:05"))
    assert.is_nil(app.parse_time(nil))
  end)

  it("is compared with our clock through the answer's Date header (RFC 1123)", function()
    assert.equal(1783220645000, app.parse_http_date("Sun, 05 Jul 2026 03:04:05 GMT"))
    assert.is_nil(app.parse_http_date("Sun, 05 Jul 2026 03:04:05 PST"))
    assert.is_nil(app.parse_http_date(nil))
  end)
end)
