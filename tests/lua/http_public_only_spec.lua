-- core.http.request's public_only (src/http/client.c; web_fetch from the bot, docs/agent.md):
-- the engine refuses, as it connects, every address that is not the public internet —
-- whatever name led there — with kind "refused_address" and not_sent; without it the same
-- page is served. A page server listens on this host's loopback so the refusal is the only
-- thing between the request and the page.
local core = require("switchboard.core")
local files = require("support.files")

local dir, pid, port

setup(function()
  dir = files.tmpdir()
  port = 20000 + (core.crypto.random_bytes(2):byte(1) * 256 + core.crypto.random_bytes(1):byte()) % 20000
  local p = io.popen(("/usr/bin/python3 tests/support/web_page_server.py --bind 127.0.0.1 --port %d --dir %s >%s/err 2>&1 & echo $!")
    :format(port, dir, dir))
  pid = tonumber(p:read("l"))
  p:close()
end)

teardown(function()
  if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
  os.execute("rm -rf '" .. dir .. "'")
end)

local function get(url, public_only)
  return core.http.request{ url = url, public_only = public_only, deadline_ms = 30000 }
end

describe("core.http.request public_only", function()
  it("refuses loopback, link-local and mapped addresses as it connects; serves them without it", function()
    local r = {}
    core.run(function()
      local t0 = core.now_ms()
      while not files.read(dir .. "/ready") and core.now_ms() - t0 < 120000 do core.sleep(20) end
      assert(files.read(dir .. "/ready"), files.read(dir .. "/err"))
      r.plain = { get(("http://127.0.0.1:%d/secret"):format(port)) }
      r.by_address = { get(("http://127.0.0.1:%d/secret"):format(port), true) }
      r.by_name = { get(("http://localhost:%d/secret"):format(port), true) }
      r.metadata = { get("http://169.254.169.254/latest/meta-data/", true) }
      r.v6_loopback = { get("http://[::1]:9/", true) }
      r.v4_mapped = { get(("http://[::ffff:127.0.0.1]:%d/secret"):format(port), true) }
      r.bad = pcall(core.http.request, { url = "http://127.0.0.1:1/", public_only = "yes" })
    end)
    assert.equal(200, r.plain[1])
    assert.equal("loopback secret", r.plain[3])
    for _, k in ipairs{ "by_address", "by_name", "metadata", "v6_loopback", "v4_mapped" } do
      local status, err = r[k][1], r[k][2]
      assert.is_nil(status, k)
      assert.equal("refused_address", err.kind, k .. ": " .. tostring(err))
      assert.is_true(err.not_sent, k)
      assert.matches("not a public address", tostring(err), 1, true)
    end
    assert.matches("refused to connect to 127.0.0.1", tostring(r.by_address[2]), 1, true)
    assert.matches("refused to connect to 169.254.169.254", tostring(r.metadata[2]), 1, true)
    assert.matches("refused to connect to ::1", tostring(r.v6_loopback[2]), 1, true)
    assert.is_false(r.bad)
    -- the page server saw only the request without public_only
    assert.equal("/secret\n", files.read(dir .. "/log"))
  end)
end)
