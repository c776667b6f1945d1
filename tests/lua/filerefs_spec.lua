-- core.file_table and core.file_refs (src/proc/filerefs.c) through the real engine, on real
-- processes that hold files by mapping them after closing the descriptor: what sandboxd's
-- file-table watch (sandboxd/file_table.lua) counts an instance by.
local core = require("switchboard.core")
local tmp = require("support.tmp")

-- N processes, each opening `path`, mapping it and closing the descriptor COUNT times, then
-- sleeping (the attack of issue 35, small).
local HOLDER = [[
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int procs = atoi(argv[2]), count = atoi(argv[3]);
  for (int p = 0; p < procs; p++) {
    if (fork() == 0) {
      for (int n = 0; n < count; n++) {
        int fd = open(argv[1], O_RDONLY);
        if (fd < 0 || mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) _exit(1);
        close(fd);
      }
      printf("held\n");
      fflush(stdout);
      pause();
    }
  }
  pause();
  return 0;
}
]]

local dir, holder_bin

local function children(pid)
  local f = io.open(("/proc/%d/task/%d/children"):format(pid, pid))
  local text = f and f:read("a") or ""
  if f then f:close() end
  local out = {}
  for p in text:gmatch("%d+") do out[#out + 1] = tonumber(p) end
  return out
end

-- Starts the holder: procs × count mappings of a file whose path has spaces in it (the maps
-- line's last field). Returns the process and its children's pids once each holds them all.
local function hold(procs, count)
  local out = ""
  local proc = assert(core.spawn{ argv = { holder_bin, dir .. "/a file, with spaces", tostring(procs), tostring(count) },
    env = { PATH = "/usr/bin:/bin" }, deadline_ms = 60000,
    on_output = function(stream, bytes) if stream == "stdout" then out = out .. bytes end end })
  local t0 = core.now_ms()
  while select(2, out:gsub("held", "")) < procs and core.now_ms() - t0 < 30000 do core.sleep(10) end
  assert.equal(procs, select(2, out:gsub("held", "")), "the holder's children never held their files")
  return proc, children(proc.pid)
end

local function pids_file(name, pids)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(table.concat(pids, "\n"), "\n")
  f:close()
  return path
end

setup(function()
  dir = tmp.dir("filerefs")
  local f = assert(io.open(dir .. "/holder.c", "w"))
  f:write(HOLDER)
  f:close()
  assert.is_true(os.execute(("cc -O2 -o %s/holder %s/holder.c"):format(dir, dir)) == true, "cc failed")
  holder_bin = dir .. "/holder"
  f = assert(io.open(dir .. "/a file, with spaces", "w"))
  f:write(string.rep("x", 4096))
  f:close()
end)

teardown(tmp.remove_all)

describe("core.file_table", function()
  it("reads the host's allocated file objects and fs.file-max", function()
    local allocated, max = core.file_table()
    assert.is_true(allocated > 0 and max >= allocated, tostring(allocated) .. " " .. tostring(max))
  end)
end)

describe("core.file_refs", function()
  it("counts the mappings that hold files after their descriptor was closed, once per process", function()
    core.run(function()
      local proc, kids = hold(2, 1000)
      assert.equal(2, #kids)
      -- a pid listed twice (cgroup v1's cgroup.procs may) is counted once
      local path = pids_file("procs", { kids[1], kids[2], kids[1] })
      local counts = core.file_refs({ path, dir .. "/no-such-cgroup/cgroup.procs" })
      assert.equal(2, #counts)
      assert.equal(2, counts[1].processes)
      -- 1,000 mappings each, plus the program's and libc's segments and its few descriptors
      assert.is_true(counts[1].files >= 2000 and counts[1].files < 2000 + 200, tostring(counts[1].files))
      assert.is_false(counts[1].cut)
      assert.is_false(counts[2]) -- its cgroup is gone
      proc:kill("KILL")
      proc:wait()
    end)
  end)

  it("stops counting a group past stop_at, saying so", function()
    core.run(function()
      local proc, kids = hold(2, 1000)
      local counts = core.file_refs({ pids_file("procs2", kids) }, 500)
      assert.is_true(counts[1].cut)
      assert.is_true(counts[1].files > 500 and counts[1].files < 1200, tostring(counts[1].files))
      assert.equal(1, counts[1].processes) -- the second process was never read
      proc:kill("KILL")
      proc:wait()
    end)
  end)

  it("counts outside a task too (the main chunk), and a process that is gone as nothing", function()
    local counts = core.file_refs({ pids_file("gone", { 2147483646 }) })
    assert.same({ files = 0, processes = 1, cut = false }, counts[1])
    assert.same({}, core.file_refs({}))
    assert.has_error(function() core.file_refs({ {} }) end)
  end)
end)
