-- The locales a walled command loads (shell/locale_view.lua, switchboard-walls hold --locale):
-- where the host's /usr/lib/locale has locale directories but no archive, a real walled sandboxd
-- shows, at /usr/lib/locale, a copy of them with a locale archive made at its start, so a bash
-- with LANG=C.UTF-8 maps one archive instead of opening each category's file (issue 43: ~60
-- system calls and ~120 us of CPU per command). The locales are the host's own (`locale -a`
-- lists the same), the directory is read-only inside, it goes with the server, and a killed
-- server's copy is removed by the next start on its root.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)
local MIB = 1024 * 1024
local HOST = "/usr/lib/locale"

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nspare_instances = 0\nworkspace_max_bytes = 32 * MiB\n")
        :format(UID_BASE)
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(), { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

-- root's locale copies: name -> true
local function views(root)
  local out = {}
  for _, name in ipairs(core.fs.list(root) or {}) do
    if name:match("^%.locale%-view%-%d+%-%x+$") then out[name] = true end
  end
  return out
end

-- a pid no process has now (a killed server's)
local function dead_pid()
  for pid = 4194000, 4194300 do
    if not core.fs.exists("/proc/" .. pid) then return pid end
  end
  error("no free pid number found")
end

local function exec(h, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = "T-locale", body = { command = command }, deadline_ms = 120000 })
  assert.equal(200, status, raw)
  local doc = cjson.decode(raw)
  return doc, raw
end

describe_walls("a walled command's locales", function()
  it("come from one archive of the host's own locales, read-only, made at start and gone with the server", function()
    core.run(function()
      local root = core.fs.realpath(S.tmpdir())
      -- what a killed server left on this root
      local left = (".locale-view-%d-0badc0de"):format(dead_pid())
      assert(core.fs.mkdir_p(root .. "/" .. left .. HOST .. "/C.utf8", tonumber("755", 8)))
      local h = S.start_sandboxd{ policies = policy_dir(), root = root } -- LANG=C.UTF-8 (support/sandbox.lua)
      assert.falsy(views(root)[left], "a killed server's locale copy was kept")
      -- a process that set LANG's locale: bash, whose maps a child reads while it lives
      local doc, raw = exec(h, 'echo "LANG=$LANG"; maps=$(cat /proc/$$/maps); printf "%s\\n" "$maps"; '
        .. 'echo "--- locales"; locale -a; echo "--- charmap $(locale charmap)"; '
        .. 'if touch /usr/lib/locale/x 2>/dev/null; then echo writable; else echo read-only; fi')
      assert.equal(0, doc.exitCode, raw)
      local out = doc.stdout
      assert.truthy(out:find("LANG=C.UTF-8\n", 1, true), out)
      assert.truthy(out:find("--- charmap UTF-8\n", 1, true), out)
      assert.truthy(out:find("\nread-only\n", 1, true), out)
      -- the same locales as the host lists (the archive's and the directories' names, as glibc's
      -- `locale -a` prints them)
      local inside = out:match("%-%-%- locales\n(.-)%-%-%- charmap")
      assert.equal(sh("LANG=C.UTF-8 locale -a"), inside)
      local maps = out:match("LANG=C.UTF%-8\n(.-)%-%-%- locales")
      if core.fs.exists(HOST .. "/locale-archive") then
        -- the host has an archive: its own /usr/lib/locale is shown as it is, nothing is made
        assert.same({}, views(root), "a copy was made beside the host's own archive")
        assert.truthy(maps:find(HOST .. "/locale-archive", 1, true), maps)
      else
        local dirs = {}
        for name in sh("cd " .. HOST .. " && ls -d */LC_CTYPE 2>/dev/null"):gmatch("([^\n/]+)/LC_CTYPE") do
          dirs[#dirs + 1] = name
        end
        assert(#dirs > 0, "this host has no locale in " .. HOST .. ": nothing to check")
        local view = next(views(root))
        assert.truthy(view and core.fs.exists(root .. "/" .. view .. HOST .. "/locale-archive"),
          "no locale copy with an archive in " .. root)
        assert.equal(nil, next(views(root), view), "more than one locale copy")
        -- LANG's locale mapped from the archive, not a category's file of its directory
        assert.truthy(maps:find(HOST .. "/locale-archive", 1, true), maps)
        assert.falsy(maps:find(HOST .. "/[^/\n]+/LC_"), maps)
        -- the directories are there too, the same as the host's
        for _, name in ipairs(dirs) do
          local d = exec(h, "ls " .. HOST .. "/" .. name)
          assert.equal(sh("ls " .. HOST .. "/" .. name), d.stdout)
        end
        assert.truthy(h.log():find("walls%.locale[^\n]*archive="), h.log())
      end
      h:stop(); h:wait()
      assert.same({}, views(root), "the server's locale copy outlived it")
      S.rm(root)
    end)
  end)
end)
