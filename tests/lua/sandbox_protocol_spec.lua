-- The pieces both ends of the wire share (issue items 1, 3, 4): the bearer check, the thread-key
-- rule and the answer shapes.
local core = require("switchboard.core")
local auth = require("switchboard.sandboxd.auth")
local protocol = require("switchboard.shell.protocol")
local cmd = require("switchboard.commands.sandboxd")

describe("the bearer check", function()
  local check = auth.checker("s3cret-token")

  it("accepts exactly `Bearer <token>` (the scheme in any case)", function()
    assert.is_true(check("Bearer s3cret-token"))
    assert.is_true(check("bearer s3cret-token"))
    assert.is_true(check("BEARER  s3cret-token "))
  end)

  it("refuses a missing header, another scheme, a prefix, a longer token and an empty one", function()
    for _, h in ipairs({ false, "", "s3cret-token", "Basic s3cret-token", "Bearer", "Bearer ",
                         "Bearer s3cret", "Bearer s3cret-token-and-more", "Bearer S3CRET-TOKEN",
                         "Bearer s3cret-token\0", "Token s3cret-token" }) do
      assert.is_false(check(h or nil), tostring(h))
    end
  end)

  it("compares in constant time: digests of equal length through core.crypto.ct_equal", function()
    local calls = {}
    local real = core.crypto.ct_equal
    core.crypto.ct_equal = function(a, b)
      calls[#calls + 1] = { #a, #b }
      return real(a, b)
    end
    local c = auth.checker("x")
    c("Bearer a-much-longer-guess"); c(nil); c("Bearer x")
    core.crypto.ct_equal = real
    assert.same({ { 32, 32 }, { 32, 32 }, { 32, 32 } }, calls)
  end)

  it("remembers a pass for the request table it was given, and only a pass, only for its token", function()
    local hashed = 0
    local real = core.crypto.sha256
    core.crypto.sha256 = function(s) hashed = hashed + 1; return real(s) end
    local head, handler = auth.checker("s3cret-token"), auth.checker("s3cret-token")
    local other = auth.checker("another-token")
    local req, refused = {}, {}
    hashed = 0
    assert.is_true(head("Bearer s3cret-token", req))
    assert.is_true(handler("Bearer s3cret-token", req)) -- the head's pass holds: no second hash
    assert.equal(1, hashed)
    assert.is_false(other("Bearer s3cret-token", req)) -- another token's checker checks afresh
    assert.equal(2, hashed)
    assert.is_false(head("Bearer wrong", refused))
    assert.is_false(handler("Bearer s3cret-token-not", refused)) -- a refusal leaves no mark
    assert.is_true(handler("Bearer s3cret-token", {})) -- a table of its own is checked afresh
    assert.equal(5, hashed)
    core.crypto.sha256 = real
  end)

  it("refuses to be built without a token", function()
    assert.has_error(function() auth.checker("") end)
    assert.has_error(function() auth.checker(nil) end)
  end)

  it("a refusal carries nothing that helps a guesser", function()
    assert.equal(401, auth.REFUSAL_STATUS)
    assert.equal('{"error":"unauthorized"}', auth.REFUSAL_BODY)
  end)
end)

describe("the thread-key rule", function()
  it("takes visible ASCII up to the limit", function()
    assert.is_true(protocol.check_thread_key("C123:1700000000.000100", 256))
    assert.is_true(protocol.check_thread_key("a thread with spaces", 256))
    assert.is_true(protocol.check_thread_key(string.rep("k", 256), 256))
  end)

  it("refuses a missing, empty, long, control-byte or padded key, saying why", function()
    local cases = {
      { nil, "missing" }, { "", "missing" }, { string.rep("k", 257), "at most 256" },
      { "a\tb", "visible ASCII" }, { "a\nb", "visible ASCII" }, { "caf\195\169", "visible ASCII" },
      { " lead", "space" }, { "trail ", "space" },
    }
    for _, c in ipairs(cases) do
      local ok, why = protocol.check_thread_key(c[1], 256)
      assert.is_false(ok)
      assert.truthy(why:find(c[2], 1, true), why)
    end
  end)
end)

describe("the answer shapes", function()
  it("a failure is the dual shape: error, reason, empty stdout, stderr the same text, exit 127", function()
    assert.same({ error = "boom", reason = "fleet-busy", stdout = "", stderr = "boom", exitCode = 127 },
      protocol.exec_failure("boom", "fleet-busy"))
    assert.same({ error = "boom", stdout = "", stderr = "boom", exitCode = 127 }, protocol.exec_failure("boom"))
  end)

  it("a result is {stdout, stderr, exitCode, durationMs} with whole milliseconds", function()
    assert.same({ stdout = "o", stderr = "e", exitCode = 3, durationMs = 13 },
      protocol.exec_result("o", "e", 3, 12.6))
  end)
end)

describe("sandboxd --listen", function()
  it("reads HOST:PORT and [V6]:PORT", function()
    assert.same({ "127.0.0.1", 8080 }, { cmd.parse_listen("127.0.0.1:8080") })
    assert.same({ "::1", 0 }, { cmd.parse_listen("[::1]:0") })
    assert.same({ "localhost", 9 }, { cmd.parse_listen("localhost:9") })
  end)

  it("refuses anything else with an example", function()
    for _, bad in ipairs({ "8080", "host:", ":80", "h:70000", "::1:80", "h:8o" }) do
      local host, why = cmd.parse_listen(bad)
      assert.is_nil(host)
      assert.equal("usage", why.kind)
      assert.truthy(why.message:find("HOST:PORT", 1, true))
    end
  end)
end)
