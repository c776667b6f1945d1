-- Black-box: one instance cannot take the host's file table (issue 35 item 2). Each of 8
-- processes opens a file, mmaps it and closes the descriptor, 60,000 times: 4 descriptors open
-- at any time (RLIMIT_NOFILE never trips), and every mapping keeps its file object. Before,
-- /proc/sys/fs/file-nr climbed by ~480,000 (of a 24 GiB host's 2.4 M; a few instances fill it
-- and every other thread and the server stop). Now sandboxd's watch (sandboxd/file_table.lua)
-- retires the instance once it holds more than its share (pids_max × open_files = 40,960): the
-- spec samples the host's count while the attack runs and bounds its peak, reads the note in the
-- command's answer and the log line, and runs the thread's next command on the same files.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)
local UID_COUNT = 64

-- The shipped walls (pids_max 160, open_files 256: a share of 40,960) and the shipped watch
-- (check every 100 ms, count after a rise of 16,384); spare_instances = 0.
local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"10m\"\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = %d\nspare_instances = 0\n"):format(UID_BASE, UID_COUNT)
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local PROCS, MAPS = 8, 60000
local SHARE = 160 * 256

-- The attack, exactly as issue 35 tells it; compiled inside the instance.
local ATTACK = [[
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int procs = atoi(argv[2]), count = atoi(argv[3]);
  for (int p = 0; p < procs; p++) {
    if (fork() == 0) {
      int n = 0;
      for (; n < count; n++) {
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0) break;
        void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED) break;
      }
      printf("mapped %d\n", n);
      fflush(stdout);
      sleep(600);
      _exit(0);
    }
  }
  while (wait(NULL) > 0) {}
  return 0;
}
]]

local function allocated()
  local n = core.file_table()
  assert(n, "/proc/sys/fs/file-nr could not be read")
  return n
end

-- The cgroup.procs files of the server's instances (pids controller, or v2's one tree).
local function instance_procs_files(h)
  local own = S.read("/proc/" .. h.pid .. "/cgroup") or ""
  local base = own:match("%d+:[^:\n]*pids[^:\n]*:([^\n]*)")
  base = base and ("/sys/fs/cgroup/pids" .. base) or ("/sys/fs/cgroup" .. (own:match("0::([^\n]*)") or ""))
  local server = ("%s/switchboard-%d"):format(base:gsub("/+$", ""), h.pid)
  local files = {}
  for _, name in ipairs(core.fs.list(server) or {}) do
    if name:match("^i") then files[#files + 1] = server .. "/" .. name .. "/cgroup.procs" end
  end
  return files
end

-- The file references every instance of the server holds.
local function held(h)
  local n = 0
  for _, c in ipairs(core.file_refs(instance_procs_files(h))) do n = n + (c and c.files or 0) end
  return n
end

local function exec(h, thread, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 120000,
    body = { command = command, timeoutMs = 60000 } })
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

describe_walls("the host's file table", function()
  it("is held to an instance's share: mmap-and-close 8 × 60,000 is ended, the next command runs on the same files", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local status, _, raw = S.call(h.url, "/write", { thread = "ft", body = { path = "attack.c", content = ATTACK } })
      assert.equal(200, status, raw)
      local built = exec(h, "ft", "cc -O2 -o attack attack.c && echo kept > kept.txt && echo built")
      assert.equal(0, built.exitCode, built.stderr)
      -- what an instance at work holds, counted as the watch counts it: far under its share
      -- (a command of 21 processes, each with its libraries mapped and its descriptors open)
      local busy
      core.go(function() busy = exec(h, "ft", "for i in $(seq 20); do sleep 3 & done; wait") end)
      local counts
      assert.truthy(S.wait_for(function()
        counts = core.file_refs(instance_procs_files(h))
        return #counts == 1 and counts[1] and counts[1].processes >= 21
      end, 60000), "the 20 sleeps were never seen")
      print(("an instance running 20 sleeps holds %d file references in %d processes")
        :format(counts[1].files, counts[1].processes))
      assert.is_true(counts[1].files < SHARE // 20, tostring(counts[1].files))
      assert.truthy(S.wait_for(function() return busy end, 60000))
      assert.equal(0, busy.exitCode, busy.stderr)

      -- the host's count before, and its peak while the attack runs (sampled every 5 ms: the
      -- attack maps ~400,000 files a second on this machine's two cores). The bound: the share,
      -- plus what the attack maps between two looks (a 100 ms tick at ~400,000 a second is
      -- ~40,000), the count itself and the kill (a few hundred ms on a loaded host): 5 shares,
      -- 204,800 — unwatched, the attack reaches ~480,000 (11.7 shares) and sleeps
      local bound = 5 * SHARE
      local base = allocated()
      local peak, samples, answer = base, 0, nil
      local rising_ms, peak_ms
      core.go(function() answer = exec(h, "ft", ("./attack kept.txt %d %d"):format(PROCS, MAPS)) end)
      local t0 = core.now_ms()
      while answer == nil and peak - base <= bound and core.now_ms() - t0 < 180000 do
        local n = allocated()
        if n > peak then peak, peak_ms = n, core.now_ms() end
        if not rising_ms and n - base > 1000 then rising_ms = core.now_ms() end
        samples = samples + 1
        core.sleep(5)
      end
      local excess = peak - base
      print(("file-nr: base %d, peak %d (+%d, %.1f × the share) %d ms after it began to rise; %d samples over %d ms"):format(
        base, peak, excess, excess / SHARE, math.floor((peak_ms or t0) - (rising_ms or t0)), samples,
        math.floor(core.now_ms() - t0)))
      assert.is_true(excess <= bound, ("the host's count rose by %d, over 5 × the share (%d)\n%s")
        :format(excess, bound, h.log()))
      assert.is_not_nil(answer, "the attack's command never answered")

      -- the command was answered, honestly: not exit 0, the note naming the mechanism
      assert.are_not.equal(0, answer.exitCode, cjson.encode(answer))
      assert.truthy(answer.stderr:find("this sandbox instance was ended: its processes held ", 1, true), cjson.encode(answer))
      assert.truthy(answer.stderr:find("of the host's file objects (open files, and files kept by mmap after their "
        .. "descriptor was closed), over its share of 40960 (policies/isolation.lua pids_max × open_files)", 1, true),
        cjson.encode(answer))
      assert.is_nil(answer.stderr:find(h.root, 1, true), answer.stderr)
      local line = h.log():match("[^\n]*sandboxd%.instance_retired[^\n]*") or ""
      assert.truthy(line:find("reason=file_table", 1, true) and line:find("share=40960", 1, true), h.log())
      local files = tonumber(line:match("files=(%d+)"))
      assert.truthy(files and files > SHARE, line)

      -- nothing lost: the thread goes on on its files, and what the server's instances hold
      -- is the fresh instance's alone (counted as the watch counts: the host's own count moves
      -- with every other test on this machine)
      local after = exec(h, "ft", "cat kept.txt && ls attack")
      assert.equal(0, after.exitCode, cjson.encode(after) .. "\n" .. h.log())
      assert.equal("kept\nattack\n", after.stdout)
      -- told once: the attack's own answer said it (the attack ran in the exec lane: a command
      -- of the lane counts as running, so the thread's next command is not told again)
      assert.is_nil(after.stderr:find("earlier:", 1, true), after.stderr)
      assert.is_true(held(h) < SHARE // 20, tostring(held(h)))
      h:stop()
      assert.equal(0, h:wait().exit)
    end)
  end)

  it("ends an instance whose background processes take it, and the thread's next command says so", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local status, _, raw = S.call(h.url, "/write", { thread = "bg", body = { path = "attack.c", content = ATTACK } })
      assert.equal(200, status, raw)
      local base = allocated()
      -- the command ends at once; the attack goes on in a session of its own (out of the
      -- command's process group, which dies with the command: the command waits until the
      -- attack's session is its own), no command running
      local started = exec(h, "bg", "cc -O2 -o attack attack.c && echo kept > kept.txt && "
        .. ("(setsid sh -c 'echo $$ > bg.pid; exec ./attack kept.txt %d %d' </dev/null >/dev/null 2>&1 &); "
          .. "while [ ! -s bg.pid ]; do sleep 0.01; done; echo started"):format(PROCS, MAPS))
      assert.equal(0, started.exitCode, started.stderr)
      assert.truthy(S.wait_for(function() return h.log():find("reason=file_table", 1, true) end, 60000),
        ("never retired (the host's count is +%d)\n%s"):format(allocated() - base, h.log()))
      local after = exec(h, "bg", "cat kept.txt")
      assert.equal(0, after.exitCode, cjson.encode(after) .. "\n" .. h.log())
      assert.equal("kept\n", after.stdout)
      assert.truthy(after.stderr:find("earlier: this sandbox instance was ended: its processes held ", 1, true),
        cjson.encode(after))
      -- told once
      local again = exec(h, "bg", "true")
      assert.equal("", again.stderr)
      assert.is_true(held(h) < SHARE // 20, tostring(held(h)))
      h:stop()
      assert.equal(0, h:wait().exit)
    end)
  end)
end)

-- The resident's walled threads run sandboxd's runner: the same watch holds them.
describe_walls("the host's file table, in the resident's walled threads", function()
  it("ends the thread's instance that takes more than its share; the worktree and its next command are kept", function()
    core.run(function()
      local R = require("support.resident")
      local resident = require("switchboard.exec.resident")
      local base = R.make_base()
      local dir = policies.dir{
        timeouts = function(src) return src .. "\n" .. S.FAST .. "\nresident.fetch_every_ms = 1 * second\n" end,
        execution = function(src)
          return src .. '\nresident.install = { { file = "setup.sh", command = "sh setup.sh", deps = { "deps" } } }\n'
        end,
        isolation = function(src)
          return src .. ("\nuid_base = %d\nuid_count = %d\nspare_instances = 0\n"):format(UID_BASE, UID_COUNT)
        end,
      }
      local snap = assert(policies.load(dir))
      local h = R.start(base, { policies = dir, walls = true })
      assert.equal("warm", R.onboard(h, "acme/api"))
      local ex = resident.new{ url = h.url, token = S.TOKEN, thread_key = "RT", repo = "acme/api",
        policy = function() return snap end }
      local built = assert(ex:exec("cat > attack.c <<'EOF'\n" .. ATTACK .. "EOF\n"
        .. "cc -O2 -o attack attack.c && echo kept >> README && echo built"))
      assert.truthy(built.text:find("built", 1, true), built.text)
      local r = assert(ex:exec(("./attack README %d %d"):format(PROCS, MAPS)))
      assert.truthy(r.text:find("this sandbox instance was ended: its processes held ", 1, true), r.text)
      -- through sandboxd's stderr pipe, which a loaded host may read after the answer: waited for
      assert.truthy(S.wait_for(function() return h.log():find("reason=file_table", 1, true) end, 30000), h.log())
      local after = assert(ex:exec("tail -1 README && ls attack"))
      assert.equal("kept\nattack", after.text)
      h.stop(); h.wait()
      S.rm(base)
    end)
  end)
end)
