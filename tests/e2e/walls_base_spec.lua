-- Black-box, walled: a repository's prepared base (issue 37 item 3, sandboxd/bases.lua) with
-- ext4 workspace images. The clone command is stood in by a command doing what the agent's
-- does (agent/repo.lua): with no .git it "clones" (git init, a commit, a 2,000-file tree, the
-- setup's marker; a walled instance cannot reach a git server on the host's loopback) and, told
-- SWITCHBOARD_BASE, leaves .git/switchboard-base; with the marker it reports "from-base". The
-- first thread's image becomes the base — copied while its instance has it mounted, after a
-- sync, and checked — the second thread's image is a copy of it: the files there, the marker
-- gone from both threads' own, the copy its own (what one writes the other never sees), and the
-- base's image sparse on the host's disk.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local workspace = require("switchboard.shell.workspace")

local UID_BASE = require("support.walls").private_uid_base(64)

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nworkspace_max_bytes = 64 * MiB\ndisk_reserve_bytes = 0\n")
        :format(UID_BASE)
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local CLONE = [[
set -e
if [ -f .git/switchboard-base ]; then rm -f .git/switchboard-base; echo from-base; exit 0; fi
git init -q -b main . && git config user.email a@b && git config user.name t
mkdir tree && for i in $(seq 2000); do echo "file $i" > tree/f$i; done
echo one > tracked && git add tracked tree && git commit -qm first
echo prepared > .setup-marker
if [ -n "${SWITCHBOARD_BASE:-}" ]; then echo "$(git rev-parse HEAD) main" > .git/switchboard-base; fi
echo cloned
]]

local function exec(h, thread, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 180000,
    body = { command = command, timeoutMs = 120000, base = "acme/api" } })
  assert.equal(200, status, raw)
  local r = cjson.decode(raw)
  assert.equal(0, r.exitCode, r.stderr)
  return r
end

describe_walls("a repository's prepared base, walled", function()
  it("is made from the first thread's image and copied, sparse, into the next thread's", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local root = core.fs.realpath(h.root)
      assert.equal("cloned\n", exec(h, "first", CLONE).stdout)
      -- the line reaches this spec through sandboxd's stderr pipe, which a loaded host may read
      -- after the answer: waited for, generously
      assert.is_true(S.wait_for(function() return h.log():find("sandboxd.base_prepared", 1, true) ~= nil end, 30000), h.log())
      -- the first thread's own workspace lost the marker; it goes on as it was
      assert.equal("no-marker\n", exec(h, "first", "test -e .git/switchboard-base && echo marker || echo no-marker").stdout)
      local r = exec(h, "second", CLONE)
      assert.equal("from-base\n", r.stdout)
      assert.equal("snapshot", r.workspace and r.workspace.state, cjson.encode(r))
      assert.truthy(r.workspace.text:find("^workspace from a snapshot of %x+ %(main%)"), r.workspace.text)
      r = exec(h, "second", "cat .setup-marker; ls tree | wc -l; git log --format=%s; id -u; echo mine > own.txt")
      assert.equal("prepared\n2000\nfirst\n1000\n", r.stdout)
      assert.equal("absent\n", exec(h, "first", "test -e own.txt && echo present || echo absent").stdout)
      -- the base's image: sparse on the host's disk (it holds its files, not its 64 MiB), 0700 dir
      local function sh(cmd)
        local p = io.popen(cmd)
        local out = p:read("l")
        p:close()
        return out
      end
      local img = sh("ls " .. root .. "/.bases/*/ws/.workspace.img")
      assert.truthy(img, sh("find " .. root .. "/.bases"))
      local held = tonumber(sh("du -B1 " .. img):match("^(%d+)"))
      assert.is_true(held < 48 * 1024 * 1024, "the base's image holds " .. held)
      assert.equal("700", sh("stat -c %a " .. root .. "/.bases"))
      h:stop(); h:wait()
    end)
  end)
end)
