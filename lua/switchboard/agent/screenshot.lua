-- The agent's `screenshot` tool: a page rendered by headless Chromium inside the thread's
-- sandbox (the same walls, executor and deadlines as bash), given back to the model as an
-- image block, and handed to ctx.attach (when the run has one) so the run page and the Slack
-- thread get the picture too.
--
--   screenshot.definition(snap) → the tool's API definition
--   screenshot.call(ex, snap, input, ctx) → outcome fields {kind, content, is_error, image?}
--     input: {url, width?, height?, full_page?}; url: http(s)://…, file://…, or a path in the
--            workspace (shown as file://<workspace>/<path>)
--     image: {bytes, media_type, width, height, url, ms} of a picture taken
--
-- Chromium runs one command: `timeout` bounds it, its profile and HOME live in a fresh temporary
-- directory (a fresh profile per shot, gone after it), and it writes the PNG into the workspace
-- under a hidden name that the tool reads back through the executor's file read (binary-safe:
-- base64 on the wire) and then removes. Chromium's own sandbox is left on: inside the walls, as
-- the instance's unprivileged user, it starts (docs/agent.md "screenshot"); only as root (an
-- unwalled local executor), where Chromium refuses it, is it turned off (--no-sandbox).
local text = require("switchboard.agent.text")
local core = require("switchboard.core")
local processes = require("switchboard.agent.processes")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

function M.definition(snap)
  local s = snap.agents.screenshot
  return tool_schema.tool("screenshot", ("Take a screenshot of a web page with headless Chromium in the workspace's "
    .. "sandbox and see it as an image. url: an http(s) URL the sandbox can reach, a file:// "
    .. "URL, a preview URL expose_port gave (or http://127.0.0.1:PORT/ for a server of yours), or a "
    .. "path of an HTML file in the workspace (a server "
    .. "started by a bash call ends with that call: start it with run_in_background where bash "
    .. "offers it, or render a local page by its path). "
    .. "The window is width×height pixels (default %d×%d, at most %d a side); full_page makes "
    .. "the window %d pixels tall to show more of a long page. The picture is also posted in "
    .. "the Slack thread and on the run's page."):format(s.width, s.height, s.max_side, s.max_side), {
    { "url", "string", "http(s)://…, file://…, or a workspace path.", required = true },
    { "width", "integer", ("Window width in pixels (default %d)."):format(s.width) },
    { "height", "integer", ("Window height in pixels (default %d)."):format(s.height) },
    { "full_page", "boolean", "A tall window to show more of a long page." },
  })
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The URL as a shell word: a URL as given, a workspace path made a file:// URL at run time.
local function url_word(url)
  if url:match("^https?://") or url:match("^file://") then return quote(url) end
  return '"file://$PWD/"' .. quote((url:gsub("^%./", "")))
end

local function side(v, default, max)
  if v == nil then return default end
  local n = math.tointeger(v)
  if not n or n < 16 or n > max then return nil end
  return n
end

function M.command(snap, url, w, h, out, secs)
  local s = snap.agents.screenshot
  return table.concat({
    'd=$(mktemp -d) || exit 1',
    -- Chromium refuses to run as root with its sandbox on (an unwalled local executor)
    'ns=; [ "$(id -u)" = 0 ] && ns=--no-sandbox',
    ('HOME="$d" timeout -k 5 %d %s $ns --headless --disable-gpu --no-first-run --hide-scrollbars '
      .. '--user-data-dir="$d/profile" --screenshot="$PWD/%s" --window-size=%d,%d %s >"$d/log" 2>&1; s=$?')
      :format(secs, quote(s.command), out, w, h, url_word(url)),
    ('if [ $s -ne 0 ] || [ ! -s %s ]; then grep -v -e dbus -e "^$" "$d/log" | tail -n 8; fi'):format(quote(out)),
    'rm -rf "$d"; exit $s',
  }, "\n")
end

function M.call(ex, snap, input, ctx)
  local s = snap.agents.screenshot
  local url = input.url
  if type(url) ~= "string" or url == "" or url:find("[%c]") or #url > 4096 then
    return { kind = "input", is_error = true, content = "screenshot needs {\"url\": \"…\"} (one line, no control characters)" }
  end
  if url:match("^%a[%w+.-]*:") and not (url:match("^https?://") or url:match("^file://")) then
    return { kind = "input", is_error = true, content = "screenshot takes http://, https:// and file:// URLs or a workspace path" }
  end
  local w = side(input.width, s.width, s.max_side)
  local h = input.full_page == true and s.max_side or side(input.height, s.height, s.max_side)
  if not w or not h then
    return { kind = "input", is_error = true, content = ("screenshot: width and height are whole numbers of pixels, 16 to %d"):format(s.max_side) }
  end
  local timeout = math.min(s.timeout_ms, math.max(1000, (ctx.remaining_ms or s.timeout_ms) - 1000))
  local out = (".switchboard-screenshot-%s.png"):format(core.crypto.hex(core.crypto.random_bytes(6)))
  local opts = { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap }
  local t0 = core.now_ms()
  -- a preview URL of this thread's: rendered at the port itself, inside the sandbox (its host is
  -- sandboxd's address, which the walls do not reach)
  local inside = processes.inside_url(ex, url)
  local result, err = ex:exec(M.command(snap, inside or url, w, h, out, math.max(1, timeout // 1000)),
    { timeout_ms = timeout + 10000, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  if not result then return nil, err end
  local bytes = result.exit_code == 0 and ex:read_file(out, opts) or nil
  ex:exec("rm -f " .. out, { timeout_ms = 10000, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  local ms = math.floor(core.now_ms() - t0)
  if not bytes or text.image_type(bytes) ~= "image/png" then
    return { kind = "result", is_error = true, result = result, content = ("screenshot of %s failed (exit %s after %d ms):\n%s")
      :format(url, tostring(result.exit_code), ms, text.valid(result.text or result.stdout or "")) }
  end
  local limits = snap.agents.tool_output
  if #bytes > limits.max_image_bytes then
    return { kind = "result", is_error = true, content = ("the screenshot of %s is %d bytes, more than the %d an image may "
      .. "have (tool_output.max_image_bytes); take it with a smaller window"):format(url, #bytes, limits.max_image_bytes) }
  end
  local iw, ih = text.image_size(bytes, "image/png")
  local image = { bytes = bytes, media_type = "image/png", width = iw, height = ih, url = url, ms = ms }
  if ctx.attach then ctx.attach(image) end
  return { kind = "result", is_error = false, image = image, content = {
    { type = "image", source = { type = "base64", media_type = "image/png", data = core.crypto.base64_encode(bytes) } },
    { type = "text", text = ("screenshot of %s: %s×%s pixels, %d bytes, taken in %d ms%s"):format(url, tostring(iw), tostring(ih), #bytes, ms,
      inside and (" (rendered inside the sandbox at %s)"):format(inside) or "") },
  } }
end

M.TOOLS = {
  { name = "screenshot", reaches = { "executor", "publish" }, policy = "agents.screenshot",
    help = "a page rendered by headless Chromium in the sandbox: an image for the model, the thread and the run page",
    definition = M.definition, call = M.call },
}

return M
