-- Raw HTTP peers for the engine-server specs: the engine in this process, clients
-- (tests/c/http_probe and friends) in other processes whose output lands in files that the
-- test task polls with core.sleep, so nothing blocks the loop.
local BUILD = os.getenv("SB_BUILD_DIR") or "./build"
package.cpath = BUILD .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")

local PROBE = BUILD .. "/tests/http_probe"
core.log_format("text", "error") -- rejected peers log at info/warn; keep the run readable

-- A private scratch directory, removed with the spec's scratch root when busted ends.
local dir = require("support.tmp").scratch("http-spec")

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- The default bound only rules out a peer that never ends: every client here carries its own
-- --timeout (8 s at most), and a sanitized client beside stress-ng took over 5 s to finish.
local function wait_until(what, fn, ms)
  local deadline = core.now_ms() + (ms or 60000)
  while true do
    local v = fn()
    if v then return v end
    if core.now_ms() > deadline then error("timed out waiting for " .. what, 2) end
    core.sleep(10)
  end
end

local n_clients = 0

-- Starts a client command in the background; its stdout and stderr go to files.
local function background(cmd)
  n_clients = n_clients + 1
  local base = dir .. "/c" .. n_clients
  local c = {out_path = base .. ".out", err_path = base .. ".err", done_path = base .. ".done"}
  -- children must not inherit a sanitizer runtime preloaded into the interpreter
  assert(os.execute(string.format("(env -u LD_PRELOAD %s > %s 2> %s; echo $? > %s) &", cmd, q(c.out_path),
                                  q(c.err_path), q(c.done_path))))
  function c.output() return read_file(c.out_path) end
  function c.status() return read_file(c.err_path) end
  function c.wait(ms)
    wait_until("client " .. cmd, function() return read_file(c.done_path) ~= "" end, ms)
    return c.output(), c.status()
  end
  function c.wait_output(text, ms)
    return wait_until(string.format("%q in the response", text), function()
      return c.output():find(text, 1, true) ~= nil
    end, ms)
  end
  return c
end

-- http_probe HOST PORT step... (see tests/c/http_probe.c)
local function probe(port, steps, timeout_ms)
  local args = {}
  for i, s in ipairs(steps) do args[i] = q(s) end
  return background(string.format("%s --timeout %d 127.0.0.1 %d %s", PROBE,
                                  timeout_ms or 8000, port, table.concat(args, " ")))
end

local function get(path, extra)
  return "send:GET " .. path .. " HTTP/1.1\\r\\nHost: t\\r\\n" .. (extra or "") .. "\\r\\n"
end

local function serve(handler, limits)
  return assert(core.http.serve{host = "127.0.0.1", port = 0, handler = handler, limits = limits})
end

local function status_of(response)
  return tonumber(response:match("^HTTP/1%.1 (%d%d%d)"))
end

local function body_of(response)
  return response:match("\r\n\r\n(.*)$")
end

return {
  BUILD = BUILD,
  core = core,
  PROBE = PROBE,
  dir = dir,
  q = q,
  read_file = read_file,
  wait_until = wait_until,
  background = background,
  probe = probe,
  get = get,
  serve = serve,
  status_of = status_of,
  body_of = body_of,
}
