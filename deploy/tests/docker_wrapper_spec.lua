-- The sandbox image's lazy `docker` (deploy/sandbox/docker-wrapper.sh; docs/deploy.md "The image"), run for
-- real with a stand-in engine: a `dockerd` that binds the socket after a moment and lives on
-- as a daemon, and a client whose `info` answers only while that socket exists. The wrapper
-- must start the engine in a session of its own on first use, wait for it (bounded), pass the
-- caller's arguments to the real client, start nothing the second time, and fail legibly,
-- naming the log, when the engine never comes up.
local core = require("switchboard.core")

local WRAPPER = "deploy/sandbox/docker-wrapper.sh"

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, text, mode)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  if mode then os.execute(("chmod %s '%s'"):format(mode, path)) end
end

local function tmpdir() return require("support.tmp").dir("docker") end

-- A stand-in engine in dir: dockerd (binds dir/docker.sock after `delay` seconds, or never
-- when delay is "never") and docker (the real client).
local function engine(dir, delay)
  write(dir .. "/dockerd", ([[#!/bin/sh
echo "$$" >>"%s/starts"
ps -o sid= -p $$ | tr -d ' ' >"%s/dockerd.sid"
[ "%s" = never ] && exec sleep 600
sleep %s
exec python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); s.bind("%s/docker.sock"); s.listen(); time.sleep(600)'
]]):format(dir, dir, delay, delay, dir), "755")
  write(dir .. "/docker", ([[#!/bin/sh
if [ "$1" = info ]; then [ -S "%s/docker.sock" ]; exit $?; fi
echo "real docker: $*"
]]):format(dir), "755")
end

local function run_wrapper(dir, args, wait_s)
  local argv = { "sh", WRAPPER }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local p = assert(core.spawn{
    argv = argv, deadline_ms = 60000,
    env = { PATH = dir .. ":" .. os.getenv("PATH"), DOCKER_WRAPPER_REAL = dir .. "/docker",
            DOCKER_WRAPPER_DOCKERD = dir .. "/dockerd", DOCKER_WRAPPER_LOG = dir .. "/dockerd.log",
            DOCKER_WRAPPER_SOCK = dir .. "/docker.sock", DOCKER_WRAPPER_WAIT_S = tostring(wait_s or 20) },
  })
  local t0 = core.now_ms()
  local r = p:wait()
  r.elapsed_ms = core.now_ms() - t0
  return r
end

-- Kills the stand-in daemons a test started (their pids are in dir/starts).
local function cleanup(dir)
  for pid in (read(dir .. "/starts") or ""):gmatch("%d+") do
    os.execute("pkill -KILL -s " .. pid .. " 2>/dev/null")
  end
  os.execute("rm -rf '" .. dir .. "'")
end

describe("the docker wrapper", function()
  it("is plain sh that parses, under 45 lines, and ends by exec-ing the real client", function()
    local src = assert(read(WRAPPER))
    assert.truthy(src:match("^#!/bin/sh\n"))
    assert.equal(0, select(3, os.execute("sh -n " .. WRAPPER .. " 2>/dev/null")) or 0)
    local _, lines = src:gsub("\n", "")
    assert.truthy(lines < 45, lines .. " lines")
    assert.truthy(src:match('exec "%$REAL" "%$@"\n$'))
    assert.truthy(src:find("setsid -f", 1, true))
    assert.truthy(src:find("ip_forward", 1, true))
  end)

  it("starts the engine in its own session on first use, waits for it, then runs the real client", function()
    core.run(function()
      local dir = tmpdir()
      engine(dir, "1")
      local r = run_wrapper(dir, { "run", "--rm", "alpine:3", "echo hi" })
      assert.equal(0, r.exit, r.stderr)
      assert.equal("real docker: run --rm alpine:3 echo hi\n", r.stdout)
      local starts = read(dir .. "/starts")
      local dockerd = tonumber(starts:match("%d+"))
      -- its own session (setsid -f): the caller's group can be reaped without killing it
      assert.equal(tostring(dockerd), (read(dir .. "/dockerd.sid") or ""):match("%d+"))
      assert.truthy(os.execute("kill -0 " .. dockerd .. " 2>/dev/null"), "the engine died with its caller")

      local again = run_wrapper(dir, { "ps" })
      assert.equal(0, again.exit)
      assert.equal("real docker: ps\n", again.stdout)
      local _, n = read(dir .. "/starts"):gsub("%d+", "")
      assert.equal(1, n) -- the running engine is reused
      cleanup(dir)
    end)
  end)

  it("gives up after its bounded wait and names the log when the engine never comes up", function()
    core.run(function()
      local dir = tmpdir()
      engine(dir, "never")
      local r = run_wrapper(dir, { "ps" }, 2)
      assert.equal(1, r.exit)
      assert.equal("", r.stdout)
      assert.truthy(r.stderr:find("the engine did not come up within 2 s — see " .. dir .. "/dockerd.log", 1, true), r.stderr)
      assert.truthy(r.elapsed_ms < 20000, "waited " .. r.elapsed_ms .. " ms")
      cleanup(dir)
    end)
  end)
end)
