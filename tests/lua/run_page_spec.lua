-- The run page's rendering (pages/render.lua, pages/markdown.lua) against hostile content —
-- the model's Markdown, a diff's lines and a record's image fields come from the model and
-- the repository, so none may become markup — and the card's diff line and View run button
-- (dispatch/run_card.lua, fronts/slack/blocks.lua); the screenshot tool's command quoting
-- (agent/screenshot.lua) and the diff's counts (agent/diff.lua).
local render = require("switchboard.pages.render")
local markdown = require("switchboard.pages.markdown")
local run_card = require("switchboard.dispatch.run_card")
local blocks = require("switchboard.fronts.slack.blocks")
local screenshot = require("switchboard.agent.screenshot")
local diff = require("switchboard.agent.diff")
local policies = require("support.policies")

local function page(run, events, thread, opts)
  run.ask = run.ask or "the ask"
  run.started_ms = run.started_ms or 0
  return render.page(run, events or {}, thread, opts or { tool_open_bytes = 2048, tool_open_lines = 40, diff_open_lines = 8 })
end

describe("the run page", function()
  it("renders a safe subset of the model's Markdown and nothing else", function()
    local html = markdown.html(table.concat({
      "<script>alert(1)</script> **bold** and `<b>code</b>`",
      "[bad](javascript:alert(1)) [good](https://example.com/a?b=1&c=\"x\") [data](data:text/html,hi)",
      "- one <img src=x onerror=alert(1)>",
      "- two",
      "```",
      "</pre><script>x</script>",
      "```",
    }, "\n"))
    assert.is_nil(html:find("<script", 1, true), html)
    assert.is_nil(html:find("<img", 1, true), html)
    assert.is_nil(html:find('href="javascript', 1, true), html)
    assert.is_nil(html:find('href="data', 1, true), html)
    assert.truthy(html:find("&lt;script&gt;alert(1)&lt;/script&gt;", 1, true), html)
    assert.truthy(html:find("<strong>bold</strong>", 1, true), html)
    assert.truthy(html:find("<code>&lt;b&gt;code&lt;/b&gt;</code>", 1, true), html)
    assert.truthy(html:find('<a href="https://example.com/a?b=1&amp;c=&quot;x&quot;" rel="nofollow noopener noreferrer">good</a>', 1, true), html)
    assert.truthy(html:find("<ul>\n<li>one &lt;img src=x onerror=alert(1)&gt;</li>\n<li>two</li>\n</ul>", 1, true), html)
    assert.truthy(html:find("<pre><code>&lt;/pre&gt;&lt;script&gt;x&lt;/script&gt;</code></pre>", 1, true), html)
  end)

  it("shows the diff per file, escaped and coloured, long files collapsed and binary files named", function()
    local patch = table.concat({
      "diff --git a/x.html b/x.html", "new file mode 100644", "index 0000000..1111111",
      "--- /dev/null", "+++ b/x.html", "@@ -0,0 +1,2 @@", "+<script>alert(1)</script>", "+<p>ok</p>",
      "diff --git a/long.txt b/long.txt", "index 1..2 100644", "--- a/long.txt", "+++ b/long.txt",
      "@@ -1,6 +1,6 @@", "-a", "+b", " c", " d", " e", " f",
      "diff --git a/logo.png b/logo.png", "index 1..2 100644", "Binary files a/logo.png and b/logo.png differ", "",
    }, "\n")
    local html = page({}, { { type = "diff", added = 3, removed = 1, patch = patch, files = {
      { path = "x.html", added = 2, removed = 0 }, { path = "long.txt", added = 1, removed = 1 },
      { path = "logo.png", added = 0, removed = 0, binary = true } } } })
    assert.is_nil(html:find("<script>", 1, true))
    assert.truthy(html:find('<span class="add">+&lt;script&gt;alert(1)&lt;/script&gt;</span>', 1, true), html)
    assert.truthy(html:find('<span class="del">-a</span>', 1, true), html)
    assert.truthy(html:find("<h2>Changes: +3 −1 in 3 files</h2>", 1, true), html)
    assert.truthy(html:find("<details open><summary>x.html <small>+2 −0</small>", 1, true), html)
    assert.truthy(html:find("<details><summary>long.txt <small>+1 −1</small>", 1, true), html)
    assert.truthy(html:find("<div>logo.png: binary file</div>", 1, true), html)
  end)

  it("embeds a kept screenshot and nothing that is not base64; numbers with separators; the answer once", function()
    local events = {
      { type = "answer", turn = 1, usage = { input_tokens = 1234567, output_tokens = 3 }, content = {
        { type = "tool_use", id = "s1", name = "screenshot", input = { url = "x" } },
        { type = "tool_use", id = "s2", name = "screenshot", input = { url = "y" } } } },
      { type = "tool_result", id = "s1", content = "[an image and its caption]" },
      { type = "tool_result", id = "s2", content = ("line\n"):rep(50) },
      { type = "image", tool_id = "s1", url = "x\"><script>", media_type = "image/png", size = 4, data = "iVBORw0K" },
      { type = "image", tool_id = "s2", url = "y", media_type = "image/png", size = 4, data = "\"><script>x</script>" },
      { type = "answer", turn = 2, usage = {}, content = { { type = "text", text = "All **done**." } } },
    }
    local html = page({ answer = "All **done**.", tokens_in = 1234567, tokens_out = 89 }, events,
      { key = "T1/C2/1700000000.000100", runs = { { id = 1, ask = "first", started_ms = 0, outcome = "done" },
        { id = 2, ask = "<b>second</b>", started_ms = 0 } } })
    assert.truthy(html:find('<img class="shot" alt="screenshot of x&quot;&gt;&lt;script&gt;" src="data:image/png;base64,iVBORw0K">', 1, true), html)
    assert.is_nil(html:find("<script>", 1, true), html)
    assert.truthy(html:find("1,234,567 in / 89 out", 1, true), html)
    assert.truthy(html:find("1,234,567 tokens in", 1, true), html)
    -- the second output is 50 lines, under the byte bound: collapsed by its lines
    assert.truthy(html:find("<summary>output (51 lines, 250 bytes)</summary>", 1, true), html)
    local _, shown = html:gsub("<strong>done</strong>", "")
    assert.equal(1, shown, html)
    assert.truthy(html:find('href="https://app.slack.com/client/T1/C2/thread/C2-1700000000.000100"', 1, true), html)
    assert.truthy(html:find("&lt;b&gt;second&lt;/b&gt;", 1, true), html)
  end)
end)

describe("the card and the tools", function()
  it("a final card says +N −M in K files and links the page with a View run button, not its URL", function()
    local c = run_card.new{ thread = "T/C/1.0", agent = "coding", ask = "go" }
    c.page_url = "https://sb.example.com/runs/" .. ("a"):rep(32)
    c:add_note("run page: " .. c.page_url)
    c.diff = { added = 1234, removed = 5, files = 1 }
    c:ended("done", 5000, "ok")
    local view = blocks.render(c, { now_ms = 5000, thread = "T/C/1.0" })
    local text = require("cjson").encode(view.blocks)
    assert.is_nil(text:find("run page:", 1, true), text)
    assert.truthy(text:find("+1234 −5 in 1 file", 1, true), text)
    local button
    for _, b in ipairs(view.blocks) do
      for _, e in ipairs(b.elements or {}) do if e.action_id == blocks.VIEW_ACTION then button = e end end
    end
    assert.is_not_nil(button, text)
    assert.equal(c.page_url, button.url)
    assert.equal("View run", button.text.text)
  end)

  it("quotes the screenshot's URL as one shell word", function()
    local snap = assert(policies.load(policies.dir()))
    local cmd = screenshot.command(snap, "http://x/'$(touch p)'", 640, 400, ".s.png", 30)
    assert.truthy(cmd:find([['http://x/'\''$(touch p)'\''']], 1, true), cmd)
    cmd = screenshot.command(snap, "site/a b.html", 640, 400, ".s.png", 30)
    assert.truthy(cmd:find([["file://$PWD/"'site/a b.html']], 1, true), cmd)
    local out = screenshot.call(nil, snap, { url = "javascript:alert(1)" }, {})
    assert.is_true(out.is_error)
    out = screenshot.call(nil, snap, { url = "x", width = 10 ^ 9 }, {})
    assert.is_true(out.is_error)
  end)

  it("counts a diff's files and lines", function()
    assert.equal("+3 −1 in 2 files", diff.summary{ added = 3, removed = 1, files = { {}, {} } })
  end)
end)
