-- Black-box: many walled servers on one host (issue 21 §2, docs/isolation.md "Many servers on one
-- host"). Two walled sandboxd and a walled resident run at once, with their roots where an
-- operator puts them (/var/lib, /opt), and a command in any of them must reach none of the
-- others' state — nor its own server's root, nor the resident's other repositories; their
-- instances get host uids of disjoint blocks; a server whose uids would overlap refuses to
-- start, naming the one in the way; and a --root under a directory the instances' uids cannot
-- search (/root, 0700) works.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local R = require("support.resident")
local policies = require("support.policies")

local function rand(n) return core.crypto.hex(core.crypto.random_bytes(n)) end

-- A uid range of this run's own (other checkouts run their suites on this host too).
local UID_BASE = require("support.walls").private_uid_base(256)
local UID_COUNT = 32

local function policy_dir(extra)
  return policies.dir{
    -- instances stay awake through the test (their workspaces are looked at from the host)
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"120s\"\nresident.fetch_every_ms = 1 * second\n" end,
    execution = function(src)
      return src .. '\nresident.install = { { file = "setup.sh", command = "sh setup.sh", deps = { "deps" } } }\n'
    end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = %d\nuid_blocks = 4\nspare_instances = 0\n"):format(UID_BASE, UID_COUNT)
        .. (extra or "") .. "\n"
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(), { describe = describe, it = it, pending = pending })

-- Roots made here are removed by teardown (the servers' own cleanup removes their contents).
local made = {}
local function root_under(parent)
  local top = ("%s/switchboard-test-%s"):format(parent, rand(6))
  made[#made + 1] = top
  return top .. "/state/root" -- two missing levels: made by the server (0755 above, 0700 itself)
end

after_each(S.cleanup_servers)
teardown(function()
  for _, dir in ipairs(made) do S.rm(dir) end
  S.cleanup()
end)

local function exec(url, token, thread, command)
  local status, _, raw = core.http.request{ method = "POST", url = url .. "/exec", deadline_ms = 120000,
    headers = { authorization = "Bearer " .. token, ["x-thread-key"] = thread, ["content-type"] = "application/json" },
    body = cjson.encode({ command = command }) }
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

local function uids_of(h)
  local first, last = h.log():match("listening[^\n]*uids=(%d+)%-(%d+)")
  return tonumber(first), tonumber(last)
end

-- The host uid owning each workspace directory in a server's root (the instance's uid).
local function workspace_owners(dir)
  local p = io.popen(("stat -c '%%u' '%s'/*/ 2>/dev/null"):format(dir))
  local out = {}
  for u in p:read("a"):gmatch("%d+") do out[#out + 1] = tonumber(u) end
  p:close()
  return out
end

describe_walls("walled servers on one host", function()
  it("two sandboxd and a resident: disjoint uid blocks, and no command reaches another's state or its own root", function()
    core.run(function()
      local dir = policy_dir()
      local a = S.start_sandboxd{ policies = dir, root = root_under("/var/lib") }
      local b = S.start_sandboxd{ policies = dir, root = root_under("/opt") }
      local base = R.make_base()
      R.sh(("git clone -q --bare %s/base/acme/api %s/base/acme/other"):format(base, base))
      local res = R.start(base, { policies = dir, walls = true, root = root_under("/var/lib") })
      assert.equal("warm", R.onboard(res, "acme/api"))
      assert.equal("warm", R.onboard(res, "acme/other"))
      S.rm(base .. "/src")

      -- three blocks of UID_COUNT, none overlapping
      local blocks = { { uids_of(a) }, { uids_of(b) }, { uids_of(res) } }
      for i, x in ipairs(blocks) do
        assert.truthy(x[1], "no uids= on a listening line")
        assert.equal(UID_COUNT - 1, x[2] - x[1])
        for j = i + 1, #blocks do
          local y = blocks[j]
          assert.is_true(x[2] < y[1] or y[2] < x[1], ("blocks %d-%d and %d-%d overlap"):format(x[1], x[2], y[1], y[2]))
        end
      end

      -- secrets in each: a file in A's workspace, the resident's other repository
      local mark = "hush-" .. rand(6)
      assert.equal(0, exec(a.url, S.TOKEN, "TA", "echo " .. mark .. " > " .. mark).exitCode)
      assert.equal(0, exec(b.url, S.TOKEN, "TB", "echo mine > f").exitCode)
      local status = core.http.request{ method = "POST", url = res.url .. "/attach", deadline_ms = 60000,
        headers = { authorization = "Bearer " .. R.TOKEN, ["x-thread-key"] = "TR", ["content-type"] = "application/json" },
        body = cjson.encode({ repo = "acme/api" }) }
      assert.equal(200, status)
      -- each server's instances run as uids of its own block
      for i, h in ipairs({ a, b }) do
        local owners = workspace_owners(h.root)
        assert.is_true(#owners >= 1, h.root)
        for _, u in ipairs(owners) do
          assert.is_true(u >= blocks[i][1] and u <= blocks[i][2], ("uid %d outside %d-%d"):format(u, blocks[i][1], blocks[i][2]))
        end
      end

      -- from inside each server's instance: every root of the three (its own included), the
      -- other repository and A's marker are out of reach
      -- (a root under an exposed entry such as /opt is covered by an empty directory; the
      -- resident's thread sees the path down to its own repository's objects, bound read-only)
      local probe = table.concat({
        ("for d in '%s' '%s' '%s/threads' '%s/repos/acme/other'; do ls -A \"$d\" 2>/dev/null | grep -q . && echo \"SEEN $d\"; done")
          :format(a.root, b.root, res.root, res.root),
        ("ls -A '%s/repos/acme' 2>/dev/null | grep -vx api | sed 's/^/SEEN /'"):format(res.root),
        ("find '%s' -type f ! -path '*/objects/*' 2>/dev/null | sed 's/^/SEEN /' | head -5"):format(res.root),
        ("find / -xdev -name '%s' 2>/dev/null | sed 's/^/FOUND /' | head -5"):format(mark),
        "ls /var 2>/dev/null | head -3 | sed 's/^/VAR /'",
        "echo probed",
      }, "\n")
      local outs = {
        exec(a.url, S.TOKEN, "TA", probe),
        exec(b.url, S.TOKEN, "TB", probe),
        exec(res.url, R.TOKEN, "TR", probe),
      }
      for i, r in ipairs(outs) do
        assert.truthy(r.stdout:find("probed", 1, true), r.stdout .. r.stderr)
        assert.is_nil(r.stdout:find("SEEN", 1, true), i .. ": " .. r.stdout)
        assert.is_nil(r.stdout:find("FOUND", 1, true), i .. ": " .. r.stdout)
        if i < 3 then assert.is_nil(r.stdout:find("VAR ", 1, true), i .. ": " .. r.stdout) end -- not in the allow-list
      end
      -- and the resident's thread still has its own repository (the shared objects bound read-only)
      local r = exec(res.url, R.TOKEN, "TR", "cat README && git log --oneline | wc -l")
      assert.equal("hello\n1\n", r.stdout, r.stderr)
      for _, h in ipairs({ a, b }) do h:stop(); h:wait() end
      res.stop(); res.wait()
    end)
  end)

  it("a server whose uid block would overlap a running one refuses to start, naming it", function()
    core.run(function()
      local first = S.start_sandboxd{ policies = policy_dir() }
      local lo = uids_of(first)
      -- no other block to move to: uid_blocks = 1, from the running server's first uid
      local second = S.start_sandboxd{ policies = policy_dir(("uid_base = %d\nuid_blocks = 1"):format(lo)), may_fail = true }
      local result = second:wait()
      assert.equal(78, result.exit, second.log())
      local log = second.log()
      assert.truthy(log:find(("sandboxd pid %d (root %s, listen 127.0.0.1:0) holds uids %d-%d"):format(first.pid,
        first.root, lo, lo + UID_COUNT - 1), 1, true), log)
      assert.truthy(log:find("give this one another uid_base", 1, true), log)
      assert.is_nil(log:find("--no-walls", 1, true), log) -- not a kernel problem: no such advice
      -- the first goes on, and once it is gone the block is free again
      assert.equal(200, (S.call(first.url, "/healthz", { thread = false })))
      first:stop(); first:wait()
      local third = S.start_sandboxd{ policies = policy_dir(("uid_base = %d\nuid_blocks = 1"):format(lo)) }
      assert.equal(lo, (uids_of(third)))
      third:stop(); third:wait()
    end)
  end)

  it("a --root under a directory the instances' uids cannot search (/root, 0700) works; its missing parents are made 0755", function()
    core.run(function()
      local mode = io.popen("stat -c %a /root"):read("l")
      assert.equal("700", mode, "this test wants /root at 0700")
      local root = root_under("/root")
      local h = S.start_sandboxd{ policies = policy_dir(), root = root }
      local r = exec(h.url, S.TOKEN, "T", "echo ok > f && cat f && id -u")
      assert.equal("ok\n1000\n", r.stdout, r.stderr)
      local function mode_of(p) local f = io.popen("stat -c %a '" .. p .. "'"); local m = f:read("l"); f:close(); return m end
      assert.equal("755", mode_of(root:match("^(.*)/root$")))   -- made by the server
      assert.equal("711", mode_of(root))                         -- searchable, not listable
      h:stop(); h:wait()
    end)
  end)
end)
