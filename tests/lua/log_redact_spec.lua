-- The log line's last line of defence: every registered secret is masked, however the secret
-- relates to the mask itself. Runs in a child Lua so that a scrub that never ends is a deadline,
-- not a hung suite, and so the secrets registered here stay out of this process.
local async = require("support.async")
local core = require("switchboard.core")

local function log_in_child(secret, line)
  local build = os.getenv("SB_BUILD_DIR") or "./build"
  local script = ([[
    package.cpath = %q .. "/lua/?.so;" .. package.cpath
    local core = require("switchboard.core")
    core.log_redact(%q)
    core.log("warn", "probe", { text = %q })
  ]]):format(build, secret, line)
  local p = assert(core.spawn { argv = { "lua5.4", "-e", script }, deadline_ms = 10000,
                                env = require("support.preload").env{ PATH = os.getenv("PATH") } })
  return p:wait()
end

describe("log redaction", function()
  it("masks a secret wherever it occurs in the line", async(function()
    local r = log_in_child("tok-3141592653", "a tok-3141592653 b tok-3141592653")
    assert.equal(0, r.exit, r.stderr)
    assert.is_nil(r.stderr:find("tok-3141592653", 1, true))
    local _, masks = r.stderr:gsub("%[redacted%]", "")
    assert.equal(2, masks)
  end))

  it("ends when the secret is part of the mask itself", async(function()
    local r = log_in_child("redact", "a redact b")
    assert.is_false(r.timed_out)
    assert.equal(0, r.exit, r.stderr)
    assert.matches("a %[redacted%] b", r.stderr)
  end))
end)
