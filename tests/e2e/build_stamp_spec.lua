-- The build stamp generator (docs/contract.md#build-stamp): from the tree, -dirty when it is not clean,
-- "unknown" with no invented time outside a checkout, and values escaped, never pasted in.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")

local SCRIPT = "cmake/build_stamp.cmake"

local function stamp(source_dir, env)
  local out = tmp.dir("stamp") .. "/build_stamp.h"
  local e = { PATH = os.getenv("PATH") }
  for k, v in pairs(env or {}) do e[k] = v end
  local r = core.spawn{
    argv = { "cmake", "-DSOURCE_DIR=" .. source_dir, "-DOUTPUT=" .. out, "-P", SCRIPT },
    env = e,
  }:wait()
  assert.are.equal(0, r.exit, r.stderr)
  -- Compile the header and print the values the C compiler sees.
  local dir = out:match("^(.*)/")
  local src = dir .. "/show.c"
  local f = assert(io.open(src, "w"))
  f:write('#include <stdio.h>\n#include "build_stamp.h"\n'
    .. 'int main(void){printf("%s\\n%s\\n", SB_BUILD_COMMIT, SB_BUILT_AT);return 0;}\n')
  f:close()
  r = core.spawn{ argv = { "cc", "-Wall", "-Werror", "-o", dir .. "/show", src },
                  env = { PATH = os.getenv("PATH") } }:wait()
  assert.are.equal(0, r.exit, r.stderr)
  r = core.spawn{ argv = { dir .. "/show" } }:wait()
  return r.stdout:match("^(.-)\n(.-)\n$")
end

local function git(dir, script)
  local r = core.spawn{ argv = { "bash", "-c", script }, cwd = dir,
    env = { PATH = os.getenv("PATH"), HOME = dir, GIT_AUTHOR_NAME = "t", GIT_AUTHOR_EMAIL = "t@t",
            GIT_COMMITTER_NAME = "t", GIT_COMMITTER_EMAIL = "t@t" } }:wait()
  assert.are.equal(0, r.exit, r.stderr)
  return r.stdout
end

describe("the build stamp", function()
  after_each(function() tmp.remove_all() end)

  it("outside a git checkout says unknown and invents no time", async(function()
    local commit, built_at = stamp(tmp.dir("nogit"))
    assert.are.equal("unknown", commit)
    assert.are.equal("", built_at)
  end))

  it("takes HEAD from the tree, with -dirty when a file changed", async(function()
    local repo = tmp.dir("repo")
    git(repo, "git init -q . && echo a > f && git add f && git commit -qm one")
    local head = git(repo, "git rev-parse HEAD"):match("%x+")
    local commit, built_at = stamp(repo)
    assert.are.equal(head, commit)
    assert.truthy(built_at:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"))
    git(repo, "echo b > f")
    assert.are.equal(head .. "-dirty", (stamp(repo)))
  end))

  it("escapes a quote or a backslash in a value instead of pasting it into code",
    async(function()
      local evil = 'abc"); system("id"); //\\'
      local commit, built_at = stamp(tmp.dir("x"), {
        SWITCHBOARD_BUILD_COMMIT = evil, SWITCHBOARD_BUILT_AT = 'now"',
      })
      assert.are.equal(evil, commit)
      assert.are.equal('now"', built_at)
    end))
end)
