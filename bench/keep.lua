-- A slept thread's workspace kept (issue 37; bench/README.md "Slept workspaces"): a real walled
-- sandboxd with sandbox.sleep_after 2 s, threads that leave a node_modules-like tree of FILES
-- files, a git repository with a commit and an untracked file, then sleep.
--
--   lua5.4 bench/keep.lua [ROUNDS=5] [FILES=3000]
--
-- after_sleep:  the first command of a thread after its instance slept (wake: a fresh instance,
--               the kept image remounted, its files handed to the new uid) — `cat` of a file
-- rebuild:      what that thread paid before (its workspace deleted at sleep): the first command
--               on an empty workspace rebuilding the same state (the tree and the commit) —
--               a lower bound of today's re-clone plus setup, which adds the network
-- disk:         bytes a slept thread holds on the host's disk (du of its directory: the image,
--               its free blocks given back at sleep) against its files' size (du inside
--               /workspace), and what its image holds awake (reserved whole)
-- copy_1gib:    copying a 1 GiB image holding 256 MiB of files on --root's file system
--               (cp --sparse=always; cp --reflink=always where the file system has it)
-- base:         a new thread on a prepared repository (sandboxd/bases.lua) whose
--               .switchboard/setup.sh takes BASE_SETUP_S (20) s: the agent's clone command
--               (agent/repo.lua) sent as its executor sends it, to a sandboxd --no-walls (a
--               walled instance cannot reach the git stand-in on the host's loopback) —
--               before: the first thread's clone + setup; after: the next thread's copy of the
--               base + fetch (ready_ms), and the copy alone (sandboxd's log, copy_ms)
-- base_walled: the same on a walled sandboxd (ext4 images; the base is the image, its copy a
--               sparse cp): the "clone" is stood in by a command making the same files and
--               sleeping BASE_SETUP_S (tests/e2e/walls_base_spec.lua's), since a walled instance
--               cannot reach the stand-in — before: that command; after: a new thread's first
--               command on the base's copy (instance start included)
-- Goal: after_sleep ≤ 500 ms; base ready ≤ 1 s. One JSON document on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local workspace = require("switchboard.shell.workspace")

core.log_format("text", "warn")

local ROUNDS, FILES = tonumber(arg[1]) or 5, tonumber(arg[2]) or 3000

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

local BUILD = ([[
set -e
mkdir -p node_modules && for i in $(seq %d); do mkdir -p node_modules/p$((i %% 100)) && echo "module $i" > node_modules/p$((i %% 100))/f$i.js; done
git init -q repo && cd repo && git config user.email a@b && git config user.name t
echo one > tracked && git add tracked && git commit -qm first && echo loose > untracked.txt
]]):format(FILES)

local function exec(h, thread, command)
  local t0 = core.now_ms()
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 600000,
    body = { command = command, timeoutMs = 300000 } })
  local ms = core.now_ms() - t0
  assert(status == 200, raw)
  local doc = cjson.decode(raw)
  assert(doc.exitCode == 0, doc.stderr)
  return doc, ms
end

-- A new thread on a prepared repository (the base row). Call inside core.run.
local function base_bench(setup_s)
  local repo = require("switchboard.agent.repo")
  local dir = S.tmpdir()
  local token = "ghs_bench" .. core.crypto.hex(core.crypto.random_bytes(8))
  sh(("cd %s && mkdir -p repos/acme gitd src/.switchboard && git init -q --bare repos/acme/api.git && cd src"
    .. " && git init -q && for i in $(seq 2000); do echo $i > f$i; done"
    .. " && printf 'mkdir -p node_modules && for i in $(seq 3000); do echo $i > node_modules/m$i; done; sleep %d\n' > .switchboard/setup.sh"
    .. " && git add . && git -c user.email=b@x -c user.name=b commit -qm init"
    .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main")
    :format(dir, setup_s))
  os.execute(("/usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --token %s >%s/gitd/out 2>&1 &")
    :format(dir, dir, token, dir))
  local port = S.wait_for(function() return S.read(dir .. "/gitd/port") end, 180000)
  local url = "http://127.0.0.1:" .. port .. "/acme/api.git"
  local pol = policies.dir{ timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end }
  -- --no-walls: the real clone needs the git stand-in on the host's loopback, which walls refuse
  local h = S.start_sandboxd{ policies = pol, args = { "--no-walls" } }
  local function ask(thread)
    local t0 = core.now_ms()
    local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 600000,
      body = { command = repo.script(url, "switchboard/" .. thread, false, 600), timeoutMs = 600000,
               env = { GH_TOKEN = token }, base = "acme/api" } })
    local ms = core.now_ms() - t0
    assert(status == 200, raw)
    local doc = cjson.decode(raw)
    assert(doc.exitCode == 0, doc.stderr)
    return ms, doc
  end
  local before = ask("bench-base-1") -- no base yet: clone + setup, then the base is made
  local ready, copy = {}, {}
  for i = 2, 4 do
    local ms, doc = ask("bench-base-" .. i)
    assert(doc.workspace and doc.workspace.state == "snapshot", "not from the base")
    ready[#ready + 1] = ms
  end
  for n in h.log():gmatch("sandboxd%.workspace_from_base[^\n]-copy_ms=(%d+)") do copy[#copy + 1] = tonumber(n) end
  local made = tonumber(h.log():match("sandboxd%.base_prepared[^\n]-copy_ms=(%d+)"))
  local base_bytes = tonumber(sh("du -s -B1 " .. h.root .. "/.bases | cut -f1"):match("%d+"))
  h:stop(); h:wait()
  local pid = S.read(dir .. "/gitd/pid")
  if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  S.rm(dir)
  return { setup_s = setup_s, files = 5000, before_ready_ms = before, base_made_copy_ms = made,
           after_ready_ms = { median = median(ready), all = ready }, copy_ms = { median = median(copy), all = copy },
           base_bytes = base_bytes, mode = "--no-walls (a directory copy)" }
end

-- The walled base row. Call inside core.run.
local function base_walled_bench(setup_s)
  local pol = policies.dir{ timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end }
  local h = S.start_sandboxd{ policies = pol }
  local clone = ([[
set -e
if [ -f .git/switchboard-base ]; then rm -f .git/switchboard-base; echo from-base; exit 0; fi
git init -q -b main . && git config user.email a@b && git config user.name t
for i in $(seq 2000); do echo $i > f$i; done && git add . && git commit -qm init
mkdir -p node_modules && for i in $(seq 3000); do echo $i > node_modules/m$i; done; sleep %d
if [ -n "${SWITCHBOARD_BASE:-}" ]; then echo "$(git rev-parse HEAD) main" > .git/switchboard-base; fi
]]):format(setup_s)
  local function ask(thread)
    local t0 = core.now_ms()
    local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 600000,
      body = { command = clone, timeoutMs = 600000, base = "acme/api" } })
    local ms = core.now_ms() - t0
    assert(status == 200, raw)
    local doc = cjson.decode(raw)
    assert(doc.exitCode == 0, doc.stderr)
    return ms, doc
  end
  local before = ask("bench-walled-base-1")
  local ready, copy = {}, {}
  for i = 2, 4 do
    local ms, doc = ask("bench-walled-base-" .. i)
    assert(doc.workspace and doc.workspace.state == "snapshot", "not from the base")
    ready[#ready + 1] = ms
  end
  for n in h.log():gmatch("sandboxd%.workspace_from_base[^\n]-copy_ms=(%d+)") do copy[#copy + 1] = tonumber(n) end
  local made = tonumber(h.log():match("sandboxd%.base_prepared[^\n]-copy_ms=(%d+)"))
  local base_bytes = tonumber(sh("du -s -B1 " .. h.root .. "/.bases | cut -f1"):match("%d+"))
  h:stop(); h:wait()
  return { setup_s = setup_s, files = 5000, before_ready_ms = before, base_made_copy_ms = made,
           after_ready_ms = { median = median(ready), all = ready }, copy_ms = { median = median(copy), all = copy },
           base_bytes = base_bytes, mode = "walled (the image, sparse copy)" }
end

local result = { rounds = ROUNDS, files = FILES, load_before = sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", "") }

core.run(function()
  local pol = policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src) return src .. "\nspare_instances = 1\n" end,
  }
  local h = S.start_sandboxd{ policies = pol }
  local root = core.fs.realpath(h.root)
  local after, rebuild, disk, files, awake_disk = {}, {}, {}, {}, {}
  for i = 1, ROUNDS do
    local thread = "bench-keep-" .. i
    local _, ms = exec(h, thread, BUILD) -- a new thread building its state: today's price after a sleep
    rebuild[#rebuild + 1] = ms
    local used = exec(h, thread, "du -s -B1 /workspace | cut -f1")
    files[#files + 1] = tonumber(used.stdout:match("%d+"))
    local _, before = h.log():gsub("sandboxd%.instance_slept", "")
    assert(S.wait_for(function()
      local _, n = h.log():gsub("sandboxd%.instance_slept", "")
      return n > before
    end, 60000), "no sleep")
    disk[#disk + 1] = tonumber(sh("du -s -B1 " .. workspace.path(root, thread)):match("^(%d+)"))
    local doc
    doc, ms = exec(h, thread, "cat repo/untracked.txt && ls node_modules | wc -l")
    assert(doc.workspace and doc.workspace.state == "kept", "not kept")
    after[#after + 1] = ms
    awake_disk[#awake_disk + 1] = tonumber(sh("du -s -B1 " .. workspace.path(root, thread)):match("^(%d+)"))
  end
  h:stop(); h:wait()
  result.after_sleep_ms = { median = median(after), all = after }
  result.rebuild_ms = { median = median(rebuild), all = rebuild }
  result.slept_disk_bytes = median(disk)
  result.awake_disk_bytes = median(awake_disk)
  result.files_bytes = median(files)

  -- a 1 GiB base image on --root's file system: its copy's cost
  local dir = S.tmpdir()
  local img = dir .. "/base.img"
  sh(("fallocate -l 1G %s && mkfs.ext4 -q -F -O ^has_journal %s && mkdir %s/m && mount -o loop %s %s/m && "
    .. "head -c 256M /dev/urandom > %s/m/data && umount %s/m"):format(img, img, dir, img, dir, dir, dir))
  local function timed(cmd)
    local t0 = core.now_ms()
    local ok = os.execute(cmd .. " 2>/dev/null")
    return ok and (core.now_ms() - t0) or false
  end
  result.copy_1gib = {
    fs = sh("stat -f -c %T " .. dir):gsub("\n", ""),
    sparse_ms = timed(("cp --sparse=always %s %s/sparse.img && sync"):format(img, dir)),
    sparse_bytes = tonumber(sh("du -B1 " .. dir .. "/sparse.img"):match("^(%d+)")),
    full_ms = timed(("cp --sparse=never %s %s/full.img && sync"):format(img, dir)),
    reflink_ms = timed(("cp --reflink=always %s %s/reflink.img"):format(img, dir)),
    -- what sandboxd/bases.lua runs: a reflink where the file system has it, else sparse
    bases_cp_ms = timed(("mkdir %s/ws && cp -a --reflink=auto --sparse=always %s %s/ws/ && sync"):format(dir, img, dir)),
  }
  S.rm(dir)
  result.base = base_bench(tonumber(os.getenv("BASE_SETUP_S")) or 20)
  result.base_walled = base_walled_bench(tonumber(os.getenv("BASE_SETUP_S")) or 20)
  result.load_after = sh("cut -d' ' -f1-3 /proc/loadavg"):gsub("\n", "")
  S.cleanup_servers()
  S.cleanup()
end)

io.stdout:write(cjson.encode(result), "\n")
