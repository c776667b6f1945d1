-- A run's page as plain server-rendered HTML (no script, no build step), readable on a phone:
-- the ask, agent, model, repository, timings, tokens, prompt-cache reads and writes, cost,
-- compactions, outcome and pull request, then each turn — the model's text (its thinking
-- collapsed), each tool call with its input and its output (collapsed when longer than
-- tool_open_bytes or tool_open_lines) and its screenshot, each compaction; the answer (once:
-- not also as the last turn's text); the run's changes as a unified diff per file (added and
-- removed lines coloured, a file longer than diff_open_lines collapsed, binary files named);
-- the Slack thread and the thread's other runs. Everything shown is escaped — the model's
-- Markdown through pages/markdown.lua's safe subset; the texts come from the record, already
-- scrubbed of secrets when they were written. Screenshots are data: images (the CSP allows
-- img-src data: and nothing else).
--
--   render.page(run, events, thread, {tool_open_bytes, tool_open_lines?, diff_open_lines?}) → html
--   thread.runs (optional): the thread's runs {ask, started_ms, outcome, id}, oldest first
local M = {}

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }
local function esc(s)
  if s == nil then return "" end
  if math.type(s) == "float" and s == math.floor(s) and s < 2^53 then s = math.tointeger(s) end
  return (tostring(s):gsub("[&<>\"']", ESC))
end
M.esc = esc

local json = require("switchboard.core").json
local markdown = require("switchboard.pages.markdown")

-- 1234567 → "1,234,567"
local function num(n)
  if type(n) ~= "number" then return tostring(n or "") end
  local s = tostring(math.tointeger(n) or math.floor(n))
  local sign, digits = s:match("^(-?)(%d+)$")
  if not digits then return s end
  return sign .. digits:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
end
M.num = num

local CSS = [[
body{font:15px/1.45 -apple-system,system-ui,sans-serif;margin:0;padding:12px;max-width:60rem;margin:auto;color:#1d1d1f;background:#fff}
h1{font-size:1.15rem;margin:.2rem 0 .6rem;word-wrap:break-word}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem .8rem;margin:0 0 1rem}
dt{color:#666}dd{margin:0;word-break:break-word}
section.turn{border-top:1px solid #ddd;padding:.5rem 0}
h2{font-size:1rem;margin:.3rem 0}
pre{white-space:pre-wrap;word-break:break-word;background:#f5f5f7;padding:.5rem;border-radius:6px;margin:.3rem 0;font-size:13px}
.text{white-space:pre-wrap;word-break:break-word}
.tool{margin:.4rem 0;border-left:3px solid #8ab;padding-left:.5rem}
.err{border-left-color:#d33}
summary{cursor:pointer;color:#235}
.outcome{font-weight:600}
.md p{margin:.3rem 0}.md code{background:#f5f5f7;padding:0 .2rem;border-radius:3px}
.diff{font:12px/1.35 ui-monospace,monospace;white-space:pre;overflow-x:auto;background:#fafafa;padding:.3rem;margin:.2rem 0}
.diff span{display:block}.add{background:#e6ffec;color:#116329}.del{background:#ffebe9;color:#82071e}.hunk{color:#6a737d}
img.shot{max-width:100%;border:1px solid #ddd;margin:.3rem 0}
]]

local function ms_text(ms)
  if type(ms) ~= "number" then return "—" end
  if ms < 1000 then return ("%d ms"):format(math.floor(ms)) end
  return ("%.1f s"):format(ms / 1000)
end

local function when(ms)
  if type(ms) ~= "number" then return "—" end
  return os.date("!%Y-%m-%d %H:%M:%S UTC", math.floor(ms // 1000))
end

local function tool_input_text(input)
  if type(input) ~= "table" then return tostring(input or "") end
  if type(input.command) == "string" then
    local rest = {}
    for k, v in pairs(input) do if k ~= "command" then rest[#rest + 1] = k .. "=" .. tostring(v) end end
    table.sort(rest)
    return input.command .. (#rest > 0 and ("\n[" .. table.concat(rest, ", ") .. "]") or "")
  end
  return json.encode(input)
end

-- A tool result's content: text, or blocks (an image's; a result from a record written
-- before transcripts named images) shown as their text with images named.
local function content_text(content)
  if type(content) ~= "table" then return tostring(content or "") end
  local out = {}
  for _, b in ipairs(content) do
    if type(b) == "table" and b.type == "text" then out[#out + 1] = tostring(b.text or "")
    elseif type(b) == "table" then out[#out + 1] = "[" .. tostring(b.type or "block") .. "]" end
  end
  return table.concat(out, "\n")
end

local function output_html(content, open_bytes, open_lines)
  content = content_text(content)
  local _, lines = content:gsub("\n", "")
  lines = lines + 1
  if #content <= open_bytes and lines <= open_lines then return "<pre>" .. esc(content) .. "</pre>" end
  return ("<details><summary>output (%s lines, %s bytes)</summary><pre>%s</pre></details>")
    :format(num(lines), num(#content), esc(content))
end

local function image_html(img)
  if not img then return "" end
  if img.data and tostring(img.data):match("^[%w+/=]+$") and img.media_type == "image/png" then
    return ('<div><img class="shot" alt="%s" src="data:image/png;base64,%s"></div>'):format(
      esc("screenshot of " .. tostring(img.url)), img.data)
  end
  return ("<div>(the screenshot of %s, %s bytes, is larger than the page keeps)</div>"):format(esc(img.url), num(img.size))
end

-- The run's diff: each file's lines classed, long files collapsed, binary files named.
local function split_patch(patch)
  local out, cur = {}, nil
  for line in (tostring(patch or "") .. "\n"):gmatch("([^\n]*)\n") do
    local b = line:match("^diff %-%-git a/.- b/(.*)$")
    if b then
      cur = { path = b, lines = {} }
      out[#out + 1] = cur
    elseif cur then
      cur.lines[#cur.lines + 1] = line
    end
  end
  return out
end

local function line_class(line)
  local c = line:sub(1, 1)
  if line:match("^%+%+%+ ") or line:match("^%-%-%- ") then return "hunk" end
  if c == "+" then return "add" elseif c == "-" then return "del" elseif line:match("^@@") then return "hunk" end
  return nil
end

local function diff_html(d, open_lines)
  if not d then return "" end
  local n = #(d.files or {})
  local out = { ('<section class="turn"><h2>Changes: +%s −%s in %s file%s</h2>'):format(num(d.added), num(d.removed),
    num(n), n == 1 and "" or "s") }
  local counts = {}
  for _, f in ipairs(d.files or {}) do counts[f.path] = f end
  for _, f in ipairs(split_patch(d.patch)) do
    local c = counts[f.path] or {}
    local title = ("%s <small>+%s −%s</small>"):format(esc(f.path), num(c.added or 0), num(c.removed or 0))
    if c.binary then
      out[#out + 1] = ("<div>%s: binary file</div>"):format(esc(f.path))
    else
      local body = {}
      for _, line in ipairs(f.lines) do
        if not line:match("^index ") and not line:match("^new file mode") and not line:match("^deleted file mode") then
          local cls = line_class(line)
          body[#body + 1] = cls and ('<span class="%s">%s</span>'):format(cls, esc(line)) or ("<span>" .. esc(line) .. "</span>")
        end
      end
      out[#out + 1] = ('<details%s><summary>%s (%s lines)</summary><div class="diff">%s</div></details>'):format(
        #f.lines <= open_lines and " open" or "", title, num(#f.lines), table.concat(body))
    end
  end
  if d.cut then out[#out + 1] = "<div>(the diff is longer than the page keeps: record.pages.diff_max_bytes)</div>" end
  out[#out + 1] = "</section>"
  return table.concat(out, "\n")
end

-- The turns: an answer's text and tool calls, each call followed by its result.
local function turns_html(events, o, answer)
  local results, images, last = {}, {}, nil
  for i, e in ipairs(events) do
    if e.type == "tool_result" and e.id then results[e.id] = e end
    if e.type == "image" and e.tool_id then images[e.tool_id] = e end
    if e.type == "answer" then last = i end
  end
  local out = {}
  for i, e in ipairs(events) do
    if e.type == "answer" then
      out[#out + 1] = ('<section class="turn"><h2>Turn %s</h2><div class="meta">%s · %s tokens in / %s out</div>')
        :format(esc(e.turn), ms_text(e.duration_ms), num(e.usage and e.usage.input_tokens or 0),
          num(e.usage and e.usage.output_tokens or 0))
      for _, b in ipairs(e.content or {}) do
        if b.type == "text" and i == last and answer and (b.text or "") ~= "" and answer:find(b.text, 1, true) then
          out[#out + 1] = '<div class="meta">(the answer, below)</div>'
        elseif b.type == "text" then
          out[#out + 1] = '<div class="md">' .. markdown.html(b.text) .. "</div>"
        elseif b.type == "thinking" and b.thinking and b.thinking ~= "" then
          out[#out + 1] = ("<details><summary>thinking (%d bytes)</summary><pre>%s</pre></details>")
            :format(#b.thinking, esc(b.thinking))
        elseif b.type == "tool_use" then
          local r = results[b.id]
          out[#out + 1] = ('<div class="tool%s"><div><strong>%s</strong>%s</div><pre>%s</pre>%s</div>'):format(
            r and r.is_error and " err" or "", esc(b.name),
            r and (" · " .. ms_text(r.duration_ms) .. (r.is_error and " · error" or "")) or " · not run",
            esc(tool_input_text(b.input)), (r and output_html(r.content, o.tool_open_bytes, o.tool_open_lines) or "")
              .. image_html(images[b.id]))
        end
      end
      out[#out + 1] = "</section>"
    elseif e.type == "compaction" then
      local what = e.how == "summary"
        and ("earlier turns summarised by the model, the latest %s messages kept"):format(esc(e.kept))
        or ("%s older tool results elided"):format(esc(e.results))
      out[#out + 1] = ('<section class="turn"><h2>Compaction before turn %s</h2><div>%s (~%s → ~%s tokens)</div>%s</section>')
        :format(esc(e.turn), what, esc(e.before), esc(e.after), e.summary
          and ("<details><summary>the summary</summary><pre>%s</pre></details>"):format(esc(e.summary)) or "")
    elseif e.type == "message_in" then
      out[#out + 1] = ('<section class="turn"><h2>Message in before turn %s</h2><div class="meta">from %s, while the run worked</div><div class="text">%s</div></section>')
        :format(esc(e.turn), esc(e.user), esc(e.text))
    elseif e.type == "todos" then
      local items = {}
      for _, t in ipairs(e.todos or {}) do
        items[#items + 1] = ("<li>%s %s</li>"):format(t.status == "completed" and "☑" or t.status == "in_progress" and "▶" or "☐", esc(t.content))
      end
      out[#out + 1] = ('<section class="turn"><h2>Plan at turn %s</h2><ul>%s</ul></section>'):format(esc(e.turn), table.concat(items))
    elseif e.type == "model_error" then
      out[#out + 1] = ('<section class="turn"><h2>Turn %s: model API error</h2><pre>%s</pre></section>')
        :format(esc(e.turn), esc(e.message))
    elseif e.type == "publish" then
      local pr = e.pull_request
      out[#out + 1] = ('<section class="turn"><h2>Publish: %s</h2>%s%s</section>'):format(esc(e.state),
        pr and ('<div><a href="%s">pull request #%s</a> (%s, branch %s)</div>'):format(esc(pr.url), esc(pr.number),
          esc(pr.action), esc(pr.branch)) or "",
        e.problem and ("<pre>" .. esc(e.problem) .. "</pre>") or "")
    end
  end
  return table.concat(out, "\n")
end

-- What the events say beyond the run's row: the prompt cache's reads and writes (the answers'
-- usage) and how often the conversation was compacted.
local function tally(events)
  local t = { cache_read = 0, cache_write = 0, compactions = 0, answers = 0 }
  for _, e in ipairs(events) do
    if e.type == "answer" and type(e.usage) == "table" then
      t.answers = t.answers + 1
      t.cache_read = t.cache_read + (tonumber(e.usage.cache_read_input_tokens) or 0)
      t.cache_write = t.cache_write + (tonumber(e.usage.cache_creation_input_tokens) or 0)
    elseif e.type == "compaction" then
      t.compactions = t.compactions + 1
    end
  end
  return t
end

-- The Slack thread in the web client (app.slack.com/client/TEAM/CHANNEL/thread/CHANNEL-TS:
-- no workspace domain needed), when the thread is a Slack one (TEAM/CHANNEL/TS).
local function slack_link(key)
  local team, channel, ts = tostring(key or ""):match("^(%w+)/(%w+)/([%d.]+)$")
  if not team then return nil end
  return ("https://app.slack.com/client/%s/%s/thread/%s-%s"):format(team, channel, channel, ts)
end

local function other_runs_html(run, thread)
  local runs = thread and thread.runs
  if not runs or #runs < 2 then return "" end
  local out = { '<section class="turn"><h2>The thread\'s runs</h2><ol>' }
  for _, r in ipairs(runs) do
    out[#out + 1] = ("<li>%s%s — %s, %s%s</li>"):format(r.id == run.id and "<strong>" or "", esc((r.ask or ""):sub(1, 120)),
      esc(when(r.started_ms)), esc(r.outcome or "running"), r.id == run.id and " (this run)</strong>" or "")
  end
  out[#out + 1] = "</ol></section>"
  return table.concat(out, "\n")
end

function M.page(run, events, thread, opts)
  opts = opts or {}
  local o = { tool_open_bytes = opts.tool_open_bytes or 2048, tool_open_lines = opts.tool_open_lines or 40 }
  local diff, asker
  for _, e in ipairs(events) do
    if e.type == "diff" then diff = e end
    if e.type == "asker" and e.user == run.user then asker = e.name end
  end
  local t = tally(events)
  local dur = run.ended_ms and (run.ended_ms - run.started_ms) or nil
  local rows = {
    { "agent", run.agent }, { "model", run.model }, { "repository", thread and thread.repo },
    { "asked by", asker and ("%s (%s)"):format(asker, run.user) or run.user }, { "started", when(run.started_ms) },
    { "duration", run.ended_ms and ms_text(dur) or "running" },
    { "outcome", run.outcome or "running" }, { "turns", run.turns },
    { "tokens", run.tokens_in and ("%s in / %s out"):format(num(run.tokens_in), num(run.tokens_out)) },
    { "prompt cache", t.answers > 0 and ("%s tokens read / %s written"):format(num(t.cache_read), num(t.cache_write)) or nil },
    { "changes", diff and ("+%s −%s in %s files"):format(num(diff.added), num(diff.removed), num(#(diff.files or {}))) or nil },
    { "cost", run.cost and ("$%.4f"):format(run.cost) },
    { "compactions", t.compactions > 0 and t.compactions or nil },
  }
  local dl = {}
  for _, r in ipairs(rows) do
    if r[2] ~= nil then dl[#dl + 1] = ("<dt>%s</dt><dd>%s</dd>"):format(r[1], esc(r[2])) end
  end
  if run.pr_url then
    dl[#dl + 1] = ('<dt>pull request</dt><dd><a href="%s">%s</a></dd>'):format(esc(run.pr_url), esc(run.pr_url))
  end
  local link = slack_link(thread and thread.key)
  if link then dl[#dl + 1] = ('<dt>thread</dt><dd><a href="%s">in Slack</a></dd>'):format(esc(link)) end
  local tail = {}
  if run.answer and run.answer ~= "" then
    tail[#tail + 1] = '<section class="turn"><h2>Answer</h2><div class="md">' .. markdown.html(run.answer) .. "</div></section>"
  end
  if run.problem and run.problem ~= "" then
    tail[#tail + 1] = '<section class="turn"><h2>Problem</h2><pre>' .. esc(run.problem) .. "</pre></section>"
  end
  return table.concat({
    "<!doctype html>",
    '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<meta name="referrer" content="no-referrer"><meta name="robots" content="noindex">',
    "<title>" .. esc("run: " .. (run.ask or ""):sub(1, 80)) .. "</title>",
    "<style>" .. CSS .. "</style></head><body>",
    "<h1>" .. esc(run.ask) .. "</h1>",
    "<dl>" .. table.concat(dl) .. "</dl>",
    turns_html(events, o, run.answer),
    table.concat(tail, "\n"),
    diff_html(diff, opts.diff_open_lines or 300),
    other_runs_html(run, thread),
    "</body></html>",
  }, "\n")
end

return M
