-- Black-box: an internal error (a bug: a raise nothing decides about) reaches the top with its
-- location — the binary's report names the file and line where it was raised and the stack
-- under it, never only cli.lua, so an operator's bug report says where to look. Status 70.
--
-- The bug is planted in a copy of the program (SWITCHBOARD_LUA_DIR): `switchboard version`
-- calls a function of a module of its own that raises, a string or an error object.
local async = require("support.async")
local tmp = require("support.tmp")
local bin = require("support.bin")

local LUA_DIR = os.getenv("SWITCHBOARD_LUA_DIR") or "lua"

local function copy_program(to)
  assert(os.execute(("cp -r '%s/switchboard' '%s/'"):format(LUA_DIR, to)))
end

-- The program with commands/version.lua's run calling planted.boom(), which raises `raise_src`.
local function planted(raise_src)
  local dir = tmp.dir("planted")
  copy_program(dir)
  local f = assert(io.open(dir .. "/switchboard/planted.lua", "w"))
  f:write("local core = require('switchboard.core')\n",
    "local M = {}\n",
    "function M.boom()\n",
    "  local depth = 1\n",
    "  " .. raise_src .. " -- line 5\n",
    "end\n",
    "return M\n")
  f:close()
  local path = dir .. "/switchboard/commands/version.lua"
  local src = assert(io.open(path)):read("a")
  local patched, n = src:gsub("function M%.run%(([^)]*)%)\n",
    "function M.run(%1)\n  require('switchboard.planted').boom()\n", 1)
  assert(n == 1, "commands/version.lua has no M.run to plant the bug in")
  f = assert(io.open(path, "w"))
  f:write(patched)
  f:close()
  return dir
end

describe("an internal error", function()
  after_each(function() tmp.remove_all() end)

  for _, c in ipairs({
    { "a string", 'error("the planted bug")' },
    { "an error object", 'error(core.error("planted", "the planted bug"))' },
  }) do
    it("raised as " .. c[1] .. ": exit 70, its message, and where it was raised", async(function()
      local dir = planted(c[2])
      local r = bin.run({ "version" }, { env = { SWITCHBOARD_LUA_DIR = dir } })
      assert.equal(70, r.exit, r.stderr)
      assert.truthy(r.stderr:find("internal error", 1, true), r.stderr)
      assert.truthy(r.stderr:find("the planted bug", 1, true), r.stderr)
      assert.truthy(r.stderr:find("switchboard/planted.lua:5", 1, true), "no location in:\n" .. r.stderr)
      assert.truthy(r.stderr:find("commands/version.lua", 1, true), "no stack in:\n" .. r.stderr)
      assert.falsy(r.stderr:find("table: 0x", 1, true), r.stderr)
    end))
  end
end)
