-- `switchboard console` on a real pseudo-terminal: tests/support/console_pty.py starts the
-- binary on a pty (24 rows, 40 columns; the pty is its controlling terminal), types at it and
-- renders its output with a VT100 emulator (python3-pyte); this spec judges the screens.
-- The console must own its input line (typed text survives status updates and output), cut
-- the status line to the terminal's width (again on SIGWINCH), leave a submitted line on a
-- line of its own, and give the terminal back in its original mode however it ends.
local core = require("switchboard.core")
local cjson = require("cjson")
local bin = require("support.bin")
local files = require("support.files")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

-- A status line (or the start of one): "[console-tty-name] coding running 3s". Cards say
-- "[thread] agent:coding", so they never match.
local STATUS = "%] cod"

-- Runs the driver's scenario; returns what it saw (fails the test with its screen when one
-- of its waits ran out). lua_dir: a program to run instead of the shipped one.
local function drive(state, scenario, lua_dir)
  local out = state .. "/seen.json"
  local r
  core.run(function()
    -- the interpreter is not instrumented: no sanitizer preload for it (bin.env drops it)
    local proc = assert(core.spawn{
      argv = { "/usr/bin/python3", "tests/support/console_pty.py", BIN, state, scenario, out },
      env = bin.env{ SWITCHBOARD_LUA_DIR = lua_dir }, deadline_ms = 240000 })
    r = proc:wait()
  end)
  local seen = cjson.decode(files.read(out) or "{}")
  if r.exit ~= 0 or seen.error then
    error(("the pty driver failed (exit %s): %s\nscreen:\n%s\nstderr: %s\nconsole's stderr: %s")
      :format(tostring(r.exit), tostring(seen.error), table.concat(seen.screen or {}, "\n"),
              tostring(r.stderr), tostring(files.read(state .. "/console.stderr"))))
  end
  return seen
end

local function status_index(rows)
  for i, row in ipairs(rows) do
    if row:find(STATUS) then return i, row end
  end
end

local function has_row(rows, want)
  for _, row in ipairs(rows) do
    if row == want then return true end
  end
  return false
end

local function assert_restored(seen)
  assert.is_false(seen.termios_during.echo, "the console did not own the line (echo stayed on)")
  assert.is_false(seen.termios_during.icanon)
  assert.is_true(seen.termios_during.isig, "Ctrl-C must stay the terminal's SIGINT")
  assert.same(seen.termios_before, seen.termios_after)
  assert.is_true(seen.termios_after.echo and seen.termios_after.icanon)
end

describe("switchboard console on a terminal", function()
  local state
  before_each(function() state = files.tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. state .. "'") end)

  it("keeps typed text under the status line, cuts the status to the width, leaves lines whole", function()
    local seen = drive(state, "session")

    -- Typed while the status ticked: intact, on its own row under the status, cursor after it.
    local typing = seen.typing
    local i, status = status_index(typing.rows)
    assert.truthy(i, "no status line while the ask ran")
    assert.truthy(status:find("running %d+s$"), status)
    assert.is_true(utf8.len(status) < 40, status)
    assert.equal("> hello wörld", typing.rows[i + 1])
    assert.same({ i + 1, utf8.len("> hello wörld") }, { typing.cursor[1] + 1, typing.cursor[2] })

    -- 30 columns (SIGWINCH): the status is cut to fit, the typed text is still there.
    local resized = seen.resized
    assert.equal(30, resized.columns)
    i, status = status_index(resized.rows)
    assert.truthy(i, "no status line after the resize")
    assert.is_true(utf8.len(status) < 30, status)
    assert.truthy(status:find("…$"), status)
    assert.equal("> hello wörld", resized.rows[i + 1])

    -- Wide again: the whole status comes back.
    i, status = status_index(seen.widened.rows)
    assert.truthy(status and status:find("running %d+s$"), status)

    -- Submitted lines stand alone in the scrollback, with the answer under them.
    local all = seen.all_rows
    assert.is_true(has_row(all, "> run `sleep 120`"))
    assert.is_true(has_row(all, "> stop"))
    for n, row in ipairs(all) do
      if row == "> /thread" then assert.equal("thread: console-tty-name", all[n + 1]) end
    end
    assert.is_true(has_row(all, "> /thread"))
    assert.same({}, seen.glued, "a typed line glued to a status line")

    -- Never a second (stale) status row anywhere, scrollback included; none left at exit.
    assert.equal(1, seen.max_status_rows)
    assert.is_nil(status_index(all), "a status line left behind at exit")

    assert.equal(0, seen.exit)
    assert_restored(seen)
  end)

  it("Ctrl-C is still SIGINT: the console stops and gives the terminal back", function()
    local seen = drive(state, "ctrl-c")
    assert.equal(0, seen.exit)
    assert_restored(seen)
  end)

  it("SIGTERM stops the console and gives the terminal back", function()
    local seen = drive(state, "term")
    assert.equal(0, seen.exit)
    assert_restored(seen)
  end)

  -- Not the console: a program that leaves the terminal raw when it dies. The engine's own
  -- hooks (shutdown after a Lua error, atexit for os.exit) must restore the mode.
  local function abandoning(how)
    local dir = state .. "/lua"
    os.execute("mkdir -p '" .. dir .. "/switchboard'")
    local f = assert(io.open(dir .. "/switchboard/cli.lua", "w"))
    f:write(([[
local core = require("switchboard.core")
return { main = function()
  assert(core.tty_mode("raw"))
  io.stdout:write("raw\n")
  io.stdout:flush()
  core.read_stdin()
  if %q == "error" then error("a bug while the terminal is raw") end
  os.exit(3)
end }
]]):format(how))
    f:close()
    return drive(state, how == "error" and "lua-error" or "os-exit", dir)
  end

  it("a Lua error leaves the terminal in its original mode", function()
    local seen = abandoning("error")
    assert.equal(70, seen.exit)
    assert_restored(seen)
  end)

  it("os.exit leaves the terminal in its original mode", function()
    local seen = abandoning("exit")
    assert.equal(3, seen.exit)
    assert_restored(seen)
  end)
end)
