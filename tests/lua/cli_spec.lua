-- The CLI's one job besides picking a command: a bug in a command reaches the engine's one
-- protected call with its own location and traceback (what an operator's bug report carries),
-- and the pid file goes whether the command returns or raises.
local core = require("switchboard.core")
local cli = require("switchboard.cli")
local files = require("support.files")

local BROKEN_LINE = debug.getinfo(1, "l").currentline + 3
local broken = {
  name = "version", summary = "a command with a bug",
  run = function() local missing = nil; return missing.field end,
}

describe("the CLI", function()
  local saved, dir
  before_each(function()
    saved = package.loaded["switchboard.commands.version"]
    package.loaded["switchboard.commands.version"] = broken
    dir = files.tmpdir()
  end)
  after_each(function()
    package.loaded["switchboard.commands.version"] = saved
    os.execute(("rm -rf '%s'"):format(dir))
  end)

  it("lets a command's raise reach the top with its real location in the traceback", function()
    local ok, err = pcall(core.run, cli.main, "--pid-file", dir .. "/pid", "version")
    assert.is_false(ok)
    err = tostring(err)
    local here = "cli_spec.lua:" .. BROKEN_LINE
    assert.truthy(err:find(here .. ": attempt to index a nil value", 1, true), err)
    local trace = err:match("stack traceback:\n(.*)$")
    assert.truthy(trace, err)
    -- the frame that raised is in the traceback itself, not only in the message's first line
    assert.truthy(trace:find(here .. ": in ", 1, true), "the traceback lost the raising frame:\n" .. err)
    assert.is_nil(io.open(dir .. "/pid", "r"), "the pid file outlived the raise")
  end)

  it("removes the pid file after a command that returns", function()
    package.loaded["switchboard.commands.version"] = { name = "version", summary = "s",
      run = function() return assert(io.open(dir .. "/pid", "r")) and 0 end }
    assert.equal(0, core.run(cli.main, "--pid-file", dir .. "/pid", "version"))
    assert.is_nil(io.open(dir .. "/pid", "r"))
  end)
end)
