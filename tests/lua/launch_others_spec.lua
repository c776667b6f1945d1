-- launch/others.lua: which of the bot's environment values are registered for redaction.
local tmp = require("support.tmp")
local others = require("switchboard.launch.others")
local core = require("switchboard.core")

describe("a front that serves other people", function()
  teardown(function() tmp.remove_all() end)

  it("tells a bare service address from a URL that carries a credential", function()
    for _, v in ipairs({ "http://127.0.0.1:8080", "http://sandboxd.internal:8080/", "https://[::1]:8443",
      "http://sandboxd" }) do
      assert.is_true(others.is_bare_address(v), v)
    end
    for _, v in ipairs({ "http://user:pass@sandboxd:8080", "https://hooks.slack.com/services/T0/B0/XYZ",
      "http://host/?token=abc", "http://host/#frag", "xoxb-not-a-url", "", "http://", "host:8080" }) do
      assert.is_false(others.is_bare_address(v), v)
    end
  end)

  it("registers credential-named values for redaction, but not a bare address such as SANDBOX_URL", function()
    local path = tmp.dir("others") .. "/environ"
    local f = assert(io.open(path, "wb"))
    f:write("SANDBOX_URL=http://127.0.0.1:18080\0SANDBOX_TOKEN=sandbox-token-for-this-spec-0123\0",
      "SLACK_WEBHOOK_URL=https://hooks.example/services/T1/B1/secret-path-for-this-spec\0",
      "HOME=/home/spec-user-not-secret\0")
    f:close()
    assert.equal(2, others.register_env_secrets(path))
    local text = "url http://127.0.0.1:18080/ports/x token sandbox-token-for-this-spec-0123 hook "
      .. "https://hooks.example/services/T1/B1/secret-path-for-this-spec home /home/spec-user-not-secret"
    local scrubbed = core.log_scrub(text)
    assert.truthy(scrubbed:find("http://127.0.0.1:18080/ports/x", 1, true), scrubbed)
    assert.falsy(scrubbed:find("sandbox-token-for-this-spec", 1, true), scrubbed)
    assert.falsy(scrubbed:find("secret-path-for-this-spec", 1, true), scrubbed)
    assert.truthy(scrubbed:find("/home/spec-user-not-secret", 1, true), scrubbed)
  end)
end)
