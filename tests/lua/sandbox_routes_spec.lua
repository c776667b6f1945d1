-- sandboxd's routes driven in-process with a recording response and the real runner (real
-- processes in real workspaces): issue items 1-8 at the handler level. The same behaviours are
-- checked through the real binary on loopback in tests/e2e/sandboxd_*_spec.lua.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local routes = require("switchboard.sandboxd.routes")
local fleet = require("switchboard.sandboxd.fleet")
local runner = require("switchboard.sandboxd.runner")
local classify = require("switchboard.shell.classify")
local workspace = require("switchboard.shell.workspace")
local procs = require("support.procs")

local snap = S.snapshot()

-- A handler over a fresh root. opts: max, new_runner, policy (fn), log
local function setup(opts)
  opts = opts or {}
  local root = S.tmpdir()
  local logs = {}
  local ctx = {
    token = S.TOKEN, policy = opts.policy or function() return snap end,
    build = { commit = "abc123", built_at = "2026-01-01T00:00:00Z" },
    stopping = core.signal(), getenv = os.getenv,
    log = function(level, event, fields) logs[#logs + 1] = { level = level, event = event, fields = fields } end,
  }
  ctx.fleet = fleet.new{
    max_instances = function() return opts.max or 25 end,
    sleep_after_ms = function() return snap.timeouts.sandbox.sleep_after_ms end,
    new_runner = opts.new_runner or runner.factory(root), label = workspace.dir_name, log = ctx.log,
  }
  local h = { root = root, ctx = ctx, logs = logs, handler = routes.handler(ctx) }
  function h.call(path, o) return S.serve_one(h.handler, S.req(path, o)) end
  function h.done() ctx.fleet:close(); S.rm(root) end
  return h
end

local function run(fn) return core.run(fn) end

describe("sandboxd routes: the bearer", function()
  it("every route refuses a missing or wrong token with 401 and the same bare answer; nothing runs", function()
    run(function()
      local made = 0
      local h = setup{ new_runner = function() made = made + 1; return {} end }
      local answers = {}
      for _, path in ipairs({ "/exec", "/read", "/write", "/healthz", "/nope" }) do
        for _, tok in ipairs({ false, "wrong", S.TOKEN .. "x", S.TOKEN:sub(1, -2), "" }) do
          local res = h.call(path, { token = tok, body = { command = "touch pwned", path = "f", content = "x" } })
          assert.equal(401, res.status, path)
          answers[res.body] = true
        end
        local res = S.serve_one(h.handler, S.req(path, { headers = { authorization = "Basic " .. S.TOKEN }, token = false }))
        assert.equal(401, res.status)
      end
      assert.same({ ['{"error":"unauthorized"}'] = true }, answers)
      assert.equal(0, made)
      h.done()
    end)
  end)

  it("behind the server's head hook the bearer is hashed once per request, each kept-alive request checked", function()
    run(function()
      local h = setup()
      local hashed, handled = 0, 0
      local real = core.crypto.sha256
      local handler, on_head = h.handler, routes.on_head(h.ctx)
      core.crypto.sha256 = function(s) if s == S.TOKEN then hashed = hashed + 1 end return real(s) end
      local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, on_head = on_head,
        handler = function(req, res) handled = handled + 1; return handler(req, res) end })
      local up = assert(core.http.connect{ host = "127.0.0.1", port = srv.port })
      local function get(token, last)
        return ("GET /healthz HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n%s\r\n")
          :format(token, last and "Connection: close\r\n" or "")
      end
      up:write(get(S.TOKEN) .. get(S.TOKEN .. "x") .. get(S.TOKEN, true))
      local parts = {}
      repeat local bytes = up:read(30000); parts[#parts + 1] = bytes until not bytes
      up:close()
      core.crypto.sha256 = real
      local statuses = {}
      for code in table.concat(parts):gmatch("HTTP/1%.1 (%d%d%d)") do statuses[#statuses + 1] = tonumber(code) end
      assert.same({ 200, 401, 200 }, statuses)
      assert.equal(2, handled) -- the refused one never reached the handler
      assert.equal(2, hashed) -- once per request that carried the token: at its head, not again
      srv:close()
      h.done()
    end)
  end)

  it("reads the credential as the old pattern did, in linear time (issue 22 item 5)", function()
    local auth = require("switchboard.sandboxd.auth")
    local OLD = "^[Bb][Ee][Aa][Rr][Ee][Rr] +(.-) *$"
    for _, v in ipairs({ "Bearer abc", "bearer abc", "BEARER  abc  ", "bEaReR x y", "Bearer", "Bearer ",
                         "Bearer    ", "Bearerabc", "Basic abc", " Bearer abc", "Bearer\tabc", "Bearer a\tb \t",
                         "Bearer x" .. (" "):rep(100) .. "y", "", "B" }) do
      assert.equal(v:match(OLD), auth.bearer(v), v)
    end
    assert.is_nil(auth.bearer(nil))
    -- 160,000 spaces: the old pattern would take minutes; this is one pass
    assert.equal("x" .. (" "):rep(160000) .. "y", auth.bearer("Bearer x" .. (" "):rep(160000) .. "y  "))
  end)
end)

describe("sandboxd routes: requests it cannot take", function()
  it("an unknown route is 404 and a wrong method 405, after the bearer", function()
    run(function()
      local h = setup()
      assert.equal(404, h.call("/nope").status)
      local res = h.call("/exec", { method = "GET" })
      assert.equal(405, res.status)
      assert.equal("POST", res.headers.allow)
      assert.equal(405, h.call("/healthz", { method = "POST" }).status)
      h.done()
    end)
  end)

  it("a missing or malformed x-thread-key is 400 saying why", function()
    run(function()
      local h = setup()
      for _, route in ipairs({ "/exec", "/read", "/write" }) do
        local res = h.call(route, { thread = false, body = { command = "true" } })
        assert.equal(400, res.status)
        assert.truthy(res:json().error:find("x-thread-key", 1, true))
        for _, bad in ipairs({ "", "a\tb", string.rep("k", snap.timeouts.sandbox.max_thread_key_bytes + 1) }) do
          res = h.call(route, { headers = { ["x-thread-key"] = bad }, body = { command = "true" } })
          assert.equal(400, res.status)
        end
      end
      h.done()
    end)
  end)

  it("a body that is not JSON, not an object or without a command is 400 in the dual shape", function()
    run(function()
      local h = setup()
      for _, body in ipairs({ "", "{", "[1,2]", "\"x\"", "null", "{\"command\": 5}", "{\"command\": \"  \"}",
                              "{\"command\":\"a\\u0000b\"}", "{\"command\":\"true\",\"x\":NaN}" }) do
        local res = h.call("/exec", { body = body })
        assert.equal(400, res.status, body)
        local doc = res:json()
        assert.truthy(doc.error:find("%S"), body)
        assert.equal(doc.error, doc.stderr)
        assert.equal("", doc.stdout)
        assert.equal(127, doc.exitCode)
      end
      h.done()
    end)
  end)
end)

describe("sandboxd routes: /exec", function()
  it("runs the command in the thread's workspace: 200 with the headers at once, then one JSON document", function()
    run(function()
      local h = setup()
      local res = h.call("/exec", { body = { command = "pwd; echo out; echo err >&2; exit 3" } })
      assert.equal(200, res.status)
      assert.equal("application/json", res.headers["content-type"])
      local doc = res:json()
      assert.equal(workspace.path(h.root, "T1") .. "\nout\n", doc.stdout)
      assert.equal("err\n", doc.stderr)
      assert.equal(3, doc.exitCode)
      assert.is_number(doc.durationMs)
      assert.is_nil(doc.error)
      h.done()
    end)
  end)

  it("writes one space every heartbeat while the command runs, and nothing else before the document", function()
    run(function()
      local h = setup()
      local t0 = core.now_ms()
      local res = h.call("/exec", { body = { command = "sleep 0.65; echo done" } })
      local took = core.now_ms() - t0
      local beats, doc = #res.writes, res:json()
      -- one a heartbeat (100 ms here) of the request's time, however long a loaded machine
      -- made it: at least one, never more than the heartbeats that fit in it
      assert.is_true(beats >= 1 and beats <= took // 100, ("beats: %d in %.0f ms"):format(beats, took))
      for _, w in ipairs(res.writes) do assert.equal(" ", w.bytes) end
      assert.equal("done\n", doc.stdout)
      -- exactly one document: nothing follows it
      assert.truthy(res.body:find("^%b{}$"))
      h.done()
    end)
  end)

  it("a quick command gets no heartbeat at all", function()
    run(function()
      local h = setup()
      local t0 = core.now_ms()
      local res = h.call("/exec", { body = { command = "true" } })
      local took = core.now_ms() - t0
      assert.equal(0, res:json().exitCode)
      -- no space before the first heartbeat is due (0 on an idle machine, where the request
      -- takes a few ms; a loaded one may stretch it past a heartbeat or more)
      assert.is_true(#res.writes <= took // 100, ("%d spaces in %.0f ms"):format(#res.writes, took))
      h.done()
    end)
  end)

  it("a deadline kill is exit 124 with a stderr line naming the limit and the timeoutMs knob", function()
    run(function()
      local h = setup()
      local t0 = core.now_ms()
      -- the limit only has to outlast bash's echo (seconds to spare on a loaded machine); the
      -- bound is under half of the 60 s the command would take if no deadline ended it
      local res = h.call("/exec", { body = { command = "echo started; sleep 60", timeoutMs = 5000 } })
      assert.is_true(core.now_ms() - t0 < 30000)
      local doc = res:json()
      assert.equal(124, doc.exitCode)
      assert.equal("started\n", doc.stdout)
      assert.truthy(doc.stderr:find("timed out in the sandbox after", 1, true))
      assert.truthy(doc.stderr:find("5000 ms", 1, true))
      assert.truthy(doc.stderr:find("timeoutMs", 1, true))
      assert.truthy(doc.stderr:find(tostring(snap.timeouts.bash.max_ms), 1, true))
      h.done()
    end)
  end)

  it("TERM first, then KILL after the grace: a command that ignores TERM still ends as 124", function()
    run(function()
      local h = setup()
      local t0 = core.now_ms()
      -- under half of the 60 s the command would take if only TERM were sent
      local res = h.call("/exec", { body = { command = "trap '' TERM; sleep 30 & wait; sleep 30", timeoutMs = 200 } })
      assert.is_true(core.now_ms() - t0 < 30000)
      assert.equal(124, res:json().exitCode)
      h.done()
    end)
  end)

  it("a nonzero exit that is not a deadline keeps its code and gets no timeout line", function()
    run(function()
      local h = setup()
      local doc = h.call("/exec", { body = { command = "exit 124" } }):json()
      assert.equal(124, doc.exitCode)
      assert.is_nil(doc.stderr:find("timed out", 1, true))
      doc = h.call("/exec", { body = { command = "foo_no_such_command 2>/dev/null" } }):json()
      assert.equal(127, doc.exitCode)
      assert.is_nil(doc.error)
      h.done()
    end)
  end)

  it("clamps timeoutMs with the policy's rule: 280 s when absent, the ceiling, the floor, junk → default", function()
    run(function()
      local seen = {}
      local h = setup{ new_runner = function()
        return { exec = function(_, spec) seen[#seen + 1] = spec.deadline_ms
          return { exit = 0, stdout = "", stderr = "", duration_ms = 1 } end, stop = function() end }
      end }
      local cases = {
        { nil, 280000 }, { 25 * 60000, 20 * 60000 }, { 0, 100 }, { -5, 100 }, { "5000", 280000 },
        { 1234.9, 1234 }, { 1e300, 20 * 60000 }, { cjson.null, 280000 }, { true, 280000 },
      }
      for i, c in ipairs(cases) do
        h.call("/exec", { body = { command = "true", timeoutMs = c[1] } })
        assert.equal(c[2], seen[i], tostring(c[1]))
      end
      h.done()
    end)
  end)

  it("the env map comes from the body alone, through envFromRequest; no header is read as env", function()
    run(function()
      local h = setup()
      local res = h.call("/exec", {
        headers = { ["x-env-probe_var"] = "from-header", ["x-env-PROBE2"] = "from-header" },
        body = { command = "echo \"[$GH_TOKEN][$PROBE_VAR][$PROBE2][$BAD][$SANDBOX_TOKEN]\"",
                 env = { gh_token = "tok-1", ["bad-name"] = "x", NUM = 5 }, PROBE_VAR = "top-level" },
      })
      assert.equal("[tok-1][][][][]\n", res:json().stdout)
      h.done()
    end)
  end)

  it("each command gets the env of its own request only", function()
    run(function()
      local h = setup()
      h.call("/exec", { body = { command = "true", env = { A_VAR = "first" } } })
      assert.equal("[]\n", h.call("/exec", { body = { command = "echo [$A_VAR]" } }):json().stdout)
      h.done()
    end)
  end)

  it("never logs a header, an env value or the command text", function()
    run(function()
      local h = setup()
      h.call("/exec", { headers = { ["x-secret-header"] = "hdr-value-7" },
        body = { command = "echo cmd-text-9", env = { GH_TOKEN = "env-value-8" } } })
      h.call("/exec", { body = { command = "sleep 5", timeoutMs = 100, env = { GH_TOKEN = "env-value-8" } } })
      h.call("/exec", { body = "{not json cmd-text-9" })
      local all = cjson.encode(h.logs)
      for _, secret in ipairs({ "hdr-value-7", "env-value-8", "cmd-text-9", S.TOKEN }) do
        assert.is_nil(all:find(secret, 1, true), secret)
      end
      assert.is_true(#h.logs > 0)
      h.done()
    end)
  end)

  it("a failure inside the server is the dual shape with a non-empty text", function()
    run(function()
      for _, make in ipairs({
        function() return { exec = function() return nil, { kind = "spawn", message = "" } end, stop = function() end } end,
        function() return { exec = function() return nil, {} end, stop = function() end } end,
        function() return { exec = function() error("runner exploded") end, stop = function() end } end,
      }) do
        local h = setup{ new_runner = make }
        local res = h.call("/exec", { body = { command = "true" } })
        local doc = res:json()
        assert.equal(200, res.status)
        assert.truthy(doc.error:find("%S"))
        assert.equal(doc.error, doc.stderr)
        assert.equal("", doc.stdout)
        assert.equal(127, doc.exitCode)
        h.done()
      end
    end)
  end)

  it("a client that went away stops its command at the next heartbeat", function()
    run(function()
      local h = setup()
      local res = S.res()
      local pid_file = workspace.path(h.root, "T1") .. "/pid"
      -- the client goes once the command runs (its pid written), not after a time
      core.go(function()
        S.wait_for(function() return S.read(pid_file) end, 30000)
        res.closed = true
      end)
      S.serve_one(h.handler, S.req("/exec", { body = { command = "echo $$ > pid; exec sleep 60" } }), res)
      assert.is_true(core.now_ms() - res.t_start < 30000, "the answer waited for the 60 s command")
      local pid = tonumber(S.read(pid_file))
      assert.truthy(pid, "the command never started")
      assert.truthy(S.wait_for(function() return not procs.alive(pid) end, 30000), "the command outlived its client")
      h.done()
    end)
  end)

  it("the server stopping kills the command and answers the recycle-shaped failure", function()
    run(function()
      local h = setup()
      h.ctx.drain_ms = 30000
      local started = workspace.path(h.root, "T1") .. "/started"
      core.go(function() -- the stop comes once the command runs
        S.wait_for(function() return S.read(started) end, 30000)
        h.ctx.stopping:abort("shutdown")
      end)
      local doc = h.call("/exec", { body = { command = "touch started; sleep 60" } }):json()
      assert.equal(127, doc.exitCode)
      assert.truthy(doc.error:find("30s drain", 1, true))
      assert.is_true(classify.is_recycle_error(snap, doc.error))
      assert.equal("infra", classify.exec_answer(snap, doc, 61000).verdict)
      assert.truthy(classify.exec_answer(snap, doc, 61000).message:find("recycled mid-command", 1, true))
      h.done()
    end)
  end)

  it("a request in flight keeps the policy it started with", function()
    run(function()
      local old = snap
      local new = S.snapshot(nil, [[messages.timeout = "NEW POLICY {seconds} {limit_ms} timeoutMs {max_ms}"]])
      local current = old
      local h = setup{ policy = function() return current end }
      core.go(function() core.sleep(100); current = new end)
      local doc = h.call("/exec", { body = { command = "sleep 5", timeoutMs = 400 } }):json()
      assert.is_nil(doc.stderr:find("NEW POLICY", 1, true))
      doc = h.call("/exec", { body = { command = "sleep 5", timeoutMs = 200 } }):json()
      assert.truthy(doc.stderr:find("NEW POLICY", 1, true))
      h.done()
    end)
  end)

  it("output past the cap is dropped and marked", function()
    run(function()
      local small = S.snapshot(S.FAST .. "\nprocess.max_output_bytes = 1024\nsandbox.max_file_bytes = 4 * KiB\nsandbox.max_answer_bytes = 64 * KiB\n")
      local h = setup{ policy = function() return small end }
      local doc = h.call("/exec", { body = { command = "head -c 5000 /dev/zero | tr '\\0' x" } }):json()
      assert.equal(1024, #doc.stdout)
      assert.truthy(doc.stderr:find("[output truncated: stdout passed 1024 bytes", 1, true))
      h.done()
    end)
  end)
end)

describe("sandboxd routes: the fleet", function()
  it("a thread past --max-instances gets the fleet-busy answers and nothing runs", function()
    run(function()
      local h = setup{ max = 1 }
      local first
      core.go(function() first = h.call("/exec", { thread = "A", body = { command = "sleep 2" } }) end)
      assert.truthy(S.wait_for(function() return h.ctx.fleet.awake == 1 end, 10000)) -- A holds the one instance
      local res = h.call("/exec", { thread = "B", body = { command = "touch ran" } })
      assert.equal(200, res.status)
      local doc = res:json()
      assert.equal("fleet-busy", doc.reason)
      assert.truthy(doc.error:find("^fleet%-busy: "))
      assert.equal(doc.error, doc.stderr)
      assert.equal("", doc.stdout)
      assert.equal(127, doc.exitCode)
      for _, route in ipairs({ "/read", "/write" }) do
        res = h.call(route, { thread = "B", body = { path = "f", content = "x" } })
        assert.equal(503, res.status)
        assert.equal("fleet-busy", res:json().reason)
        assert.truthy(res:json().error:find("%S"))
      end
      assert.is_nil(S.read(workspace.path(h.root, "B")))
      assert.is_false(core.fs.exists(workspace.path(h.root, "B")))
      -- the awake thread is still served
      assert.equal(0, h.call("/exec", { thread = "A", body = { command = "true" } }):json().exitCode)
      assert.truthy(S.wait_for(function() return first end, 10000))
      h.done()
    end)
  end)

  it("a thread's follow-ups reuse its workspace; another thread does not see it", function()
    run(function()
      local h = setup()
      h.call("/exec", { thread = "A", body = { command = "echo hi > marker.txt" } })
      assert.equal("hi\n", h.call("/exec", { thread = "A", body = { command = "cat marker.txt" } }):json().stdout)
      assert.equal(1, h.call("/exec", { thread = "B", body = { command = "cat marker.txt" } }):json().exitCode)
      h.done()
    end)
  end)
end)

describe("sandboxd routes: a workspace a command removed", function()
  it("is made again for the next operation", function()
    run(function()
      local h = setup()
      h.call("/exec", { body = { command = "echo x > f" } })
      h.call("/exec", { body = { command = "rm -rf \"$PWD\"" } })
      local doc = h.call("/exec", { body = { command = "ls -A | wc -l" } }):json()
      assert.equal(0, doc.exitCode)
      assert.equal("0\n", doc.stdout)
      h.call("/exec", { body = { command = "rm -rf \"$PWD\"" } })
      assert.equal(200, h.call("/write", { body = { path = "g", content = "y" } }).status)
      h.done()
    end)
  end)
end)

describe("sandboxd routes: /read and /write", function()
  local all_bytes = {}
  for i = 0, 255 do all_bytes[#all_bytes + 1] = string.char(i) end
  all_bytes = table.concat(all_bytes):rep(3)

  it("are binary-safe through base64 and land in the thread's workspace", function()
    run(function()
      local h = setup()
      local res = h.call("/write", { body = { path = "sub/dir/bin.dat", content = core.crypto.base64_encode(all_bytes), encoding = "base64" } })
      assert.equal(200, res.status)
      assert.same({ ok = true, size = #all_bytes }, res:json())
      assert.equal(all_bytes, S.read(workspace.path(h.root, "T1") .. "/sub/dir/bin.dat"))
      res = h.call("/read", { body = { path = "sub/dir/bin.dat" } })
      assert.equal(200, res.status)
      local doc = res:json()
      assert.equal("base64", doc.encoding)
      assert.equal(all_bytes, core.crypto.base64_decode(doc.content))
      -- plain text content without an encoding
      h.call("/write", { body = { path = "t.txt", content = "plain" } })
      assert.equal("plain", core.crypto.base64_decode(h.call("/read", { body = { path = "t.txt" } }):json().content))
      h.done()
    end)
  end)

  it("refuse escapes from the workspace with a clear 403", function()
    run(function()
      local h = setup()
      h.call("/exec", { body = { command = "mkdir a; ln -s /etc/passwd out; ln -s .. up" } })
      for _, path in ipairs({ "../x", "/etc/passwd", "a/../../x", "out", "up/x" }) do
        for _, route in ipairs({ "/read", "/write" }) do
          local res = h.call(route, { body = { path = path, content = "x" } })
          assert.equal(403, res.status, route .. " " .. path)
          local doc = res:json()
          assert.equal("escape", doc.reason)
          assert.truthy(doc.error:find("%S"))
          assert.is_nil(doc.error:find(h.root, 1, true)) -- the host path is never shown
        end
      end
      h.done()
    end)
  end)

  it("answer a missing file 404, bad input 400, and an oversized file 413", function()
    run(function()
      local small = S.snapshot(S.FAST .. "\nsandbox.max_file_bytes = 2 * KiB\nserver.max_body_bytes = 1 * MiB\n")
      local h = setup{ policy = function() return small end }
      assert.equal(404, h.call("/read", { body = { path = "nope" } }).status)
      assert.equal(400, h.call("/read", { body = {} }).status)
      assert.equal(400, h.call("/read", { body = { path = 5 } }).status)
      assert.equal(400, h.call("/write", { body = { path = "f" } }).status)
      assert.equal(400, h.call("/write", { body = { path = "f", content = "!!!", encoding = "base64" } }).status)
      assert.equal(400, h.call("/write", { body = { path = "f", content = "x", encoding = "rot13" } }).status)
      assert.equal(413, h.call("/write", { body = { path = "f", content = string.rep("x", 2049) } }).status)
      h.call("/exec", { body = { command = "head -c 4096 /dev/zero > big" } })
      local res = h.call("/read", { body = { path = "big" } })
      assert.equal(413, res.status)
      assert.equal("too_large", res:json().reason)
      h.done()
    end)
  end)
end)

describe("sandboxd routes: /healthz", function()
  it("answers {ok, build: {commit, builtAt}} behind the bearer, without a thread key", function()
    run(function()
      local h = setup()
      local res = h.call("/healthz", { thread = false })
      assert.equal(200, res.status)
      local doc = res:json()
      assert.is_true(doc.ok)
      assert.same({ commit = "abc123", builtAt = "2026-01-01T00:00:00Z" }, doc.build)
      assert.same({ awake = 0, max = 25 }, doc.instances)
      h.done()
    end)
  end)
end)

describe("sandboxd routes: the body's network", function()
  it("is absent, host or none on every route; anything else is 400 in words", function()
    for _, route in ipairs({ "/exec", "/read", "/write" }) do
      local base = { command = "true", path = "f", content = "" }
      local function parse(network)
        base.network = network
        return routes.parse(snap, route, cjson.encode(base))
      end
      assert.is_nil(assert(parse(nil)).network)
      assert.equal("host", assert(parse("host")).network)
      assert.equal("none", assert(parse("none")).network)
      for _, bad in ipairs({ "None", "", "bridge", 1, true, { "none" } }) do
        local call, status, why = parse(bad)
        assert.is_nil(call)
        assert.equal(400, status)
        assert.truthy(why:find('^the request\'s network must be "host" or "none" %(policies/agents.lua network%), got '), why)
      end
    end
  end)

  it("none on a server without walls is 409 network-unavailable; nothing runs", function()
    run(function()
      local h = setup()
      h.ctx.networks = { host = true }
      local res = h.call("/exec", { body = { command = "touch ran", network = "none" } })
      assert.equal(409, res.status)
      local doc = cjson.decode(res.body)
      assert.equal("network-unavailable", doc.reason)
      assert.equal(127, doc.exitCode)
      res = h.call("/exec", { body = { command = "ls", network = "host" } })
      assert.equal(200, res.status)
      assert.equal("", cjson.decode(res.body).stdout)
      h.done()
    end)
  end)
end)
