-- The status card (dispatch/card.lua, the same card data the console renders) as Block Kit.
--
--   blocks.render(card, {now_ms, max_block_chars, thread, file}) → {text, blocks}
--
--   agent:coding · local · acme/api                  context
--   cloned acme/api · instructions: AGENTS.md        context: the notes, folded into one line
--   $ npm test                                        the command, as code
--   ✓ exit 0 after 3.2s                               the status line
--   ```output```                                      the output, head and tail when cut
--   [Stop]                                            while it is not final
--
-- An agent's card (kind = "agent") reads like Slack instead: the ask as the person's words (a
-- quote), the model's answer converted from Markdown to mrkdwn (fronts/slack/mrkdwn.lua) as
-- text — split over several sections, or up as a file past card.max_answer_blocks — and the
-- pull request as a button (and a link):
--
--   agent:coding · local · acme/api                  context
--   > fix the failing test                           the ask, quoted
--   ✓ done after 3 turns in 42s · …                  the status line
--   ⇢ pull request #7 opened (branch …)              the pull request, linked
--   <the answer, as mrkdwn>                          one section per part
--   ✎ +12 −3 in 2 files                             the run's changes (card.diff)
--   [Open pull request #7] [View run] [Preview]      link buttons (View run: the run page;
--                                                    Preview: an exposed port's URL)
--
-- file: where the whole output went when it did not fit: {permalink = url, name = …} or
-- {error = why}. `text` is the notification fallback (the status line).
local text = require("switchboard.fronts.slack.text")
local mrkdwn = require("switchboard.fronts.slack.mrkdwn")
local card_mod = require("switchboard.dispatch.card")
local events = require("switchboard.fronts.slack.events")

local M = {}

-- Slack's limit for a section's text (characters; we count bytes, never fewer).
M.SECTION_LIMIT = 3000

-- Triple backticks would end the code block early: break them with a zero-width space.
local function code(s)
  return "```" .. text.escape(s):gsub("```", "`\u{200B}``") .. "```"
end

-- The output cut to fit one section once escaped.
local function body_code(body, budget, where)
  local b = budget
  for _ = 1, 8 do
    local cut = card_mod.cut(body, math.max(0, b), where)
    local out = code(cut)
    if #out <= budget then return out end
    b = math.floor(b * budget / #out) - 16 -- escaping grows the text by up to 5×
  end
  return code(card_mod.cut(body, 0, where))
end

-- Whether the card's output does not fit one section (then the front uploads it as a file):
-- M.needs_file below.

local function context(s)
  return { type = "context", elements = { { type = "mrkdwn", text = s } } }
end

local function section(s)
  return { type = "section", text = { type = "mrkdwn", text = s } }
end

-- The run page as a link button (Slack opens the URL; the block_actions event it still sends
-- is acknowledged and ignored: events.stop_action knows only Stop).
M.VIEW_ACTION = "switchboard_view_run"
local function view_button(card)
  return { type = "button", action_id = M.VIEW_ACTION, url = card.page_url,
           text = { type = "plain_text", text = "View run" } }
end

-- An exposed port's preview URL (agent/processes.lua expose_port) as a link button.
function M.preview_button(card)
  return { type = "button", action_id = "switchboard_preview", url = card.preview_url,
           text = { type = "plain_text", text = "Preview" } }
end

-- The card's buttons: Stop while it is not final (events.lua reads its action), View run (a
-- link to the run's page) when the run has one.
local function stop_button(opts, card)
  local elements = {}
  if opts.thread then
    elements[1] = { type = "button", action_id = events.STOP_ACTION, style = "danger", value = opts.thread,
                    text = { type = "plain_text", text = "Stop" } }
  end
  if card and card.page_url then
    elements[#elements + 1] = view_button(card)
  end
  if card and card.preview_url then elements[#elements + 1] = M.preview_button(card) end
  return { type = "actions", elements = elements }
end

-- A card this renderer does not know (another kind of run card): its text as the console
-- prints it, in one code block, with the Stop button while it is not final.
local function is_known(card)
  return type(card) == "table" and type(card.status_line) == "function"
    and type(card.body_text) == "function" and type(card.final) == "function"
end

function M.render_text(message, opts)
  local max = math.min(opts.max_block_chars or M.SECTION_LIMIT, M.SECTION_LIMIT)
  local body = tostring(message.text or "")
  local out = { section(body_code(body, max)) }
  if not message.final and opts.thread then out[#out + 1] = stop_button(opts) end
  return { text = card_mod.cut_line(body:match("^[^\n]*") or "", 300), blocks = out }
end

-- The answer of an agent's card as mrkdwn sections' texts.
local function answer_parts(card, max)
  local parts = {}
  if card.problem and card.problem ~= "" then parts[#parts + 1] = text.escape(card.problem) end
  if card.answer and card.answer ~= "" then parts[#parts + 1] = mrkdwn.convert(card.answer) end
  if #parts == 0 then return {} end
  return mrkdwn.split(table.concat(parts, "\n\n"), max)
end

local function is_agent(card) return is_known(card) and card.kind == "agent" end

function M.needs_file(card, max_block_chars, max_answer_blocks)
  if not is_known(card) then return false end
  if is_agent(card) then
    return card:final() and #answer_parts(card, math.min(max_block_chars or M.SECTION_LIMIT, M.SECTION_LIMIT))
      > (max_answer_blocks or 10)
  end
  local body = card:body_text()
  return card:final() and body ~= "" and #code(body) > (max_block_chars or M.SECTION_LIMIT)
end

-- A card's first blocks: who runs it where (agent · backend · repository), then its notes.
local function head_blocks(card, max)
  local head = { "*agent:" .. text.escape(card.agent or "?") .. "*" }
  if card.backend then head[#head + 1] = text.escape(card.backend) end
  if card.repo then head[#head + 1] = text.escape(card.repo) end
  if card.model then head[#head + 1] = text.escape(card.model .. (card.effort and (" · effort " .. card.effort) or "")) end
  local blocks = { context(table.concat(head, " · ")) }
  -- the notes folded into one context line, newest last, cut to fit one block
  local notes = {}
  for _, note in ipairs(card.notes or {}) do
    -- the run page is the View run button, not a bare URL
    if not (card.page_url and note == "run page: " .. card.page_url) then
      notes[#notes + 1] = card_mod.cut_line(note, max // 4)
    end
  end
  if #notes > 0 then
    blocks[#blocks + 1] = context(text.escape(card_mod.cut_line(table.concat(notes, " · "), max - 100)))
  end
  return blocks
end

-- The ask as a quote: each line after "> ".
local function quoted(ask, max)
  local cut = card_mod.cut(ask or "", max)
  return (text.escape(cut):gsub("\n", "\n&gt; "):gsub("^", "&gt; "))
end

function M.render_agent(card, opts)
  local max = math.min(opts.max_block_chars or M.SECTION_LIMIT, M.SECTION_LIMIT)
  local blocks = head_blocks(card, max)
  blocks[#blocks + 1] = section(quoted(card.ask or card.command, max // 2))
  local status = card:status_line(opts.now_ms, max)
  blocks[#blocks + 1] = section(text.escape(status))
  local pr = card.pull_request
  if card:final() then
    if pr and pr.url then
      blocks[#blocks + 1] = section(("⇢ %spull request #%s %s: <%s> (branch %s)"):format(pr.draft and "draft " or "",
        text.escape(tostring(pr.number)), text.escape(pr.action or ""), pr.url, text.escape(pr.branch or "")))
    elseif card.publish_problem then
      blocks[#blocks + 1] = section(text.escape("✗ no pull request — " .. card.publish_problem):sub(1, max))
    end
    if opts.file and opts.file.permalink then
      blocks[#blocks + 1] = context(("The answer is long: <%s|%s>"):format(opts.file.permalink,
        text.escape(opts.file.name or "answer.md")))
    else
      local parts = answer_parts(card, max)
      local limit = opts.max_answer_blocks or 10
      for i, part in ipairs(parts) do
        if i > limit then
          blocks[#blocks + 1] = context(opts.file and opts.file.error
            and ("The rest of the answer is not shown: " .. text.escape(opts.file.error))
            or "The rest of the answer is not shown.")
          break
        end
        blocks[#blocks + 1] = section(part)
      end
    end
    local diff = card.diff_line and card:diff_line()
    if diff then blocks[#blocks + 1] = context(text.escape("✎ " .. diff)) end
    local buttons = {}
    if pr and pr.url then
      buttons[1] = {
        type = "button", action_id = "switchboard_open_pr", url = pr.url,
        text = { type = "plain_text", text = ("Open %spull request #%s"):format(pr.draft and "draft " or "", tostring(pr.number)) },
      }
    end
    if card.page_url then buttons[#buttons + 1] = view_button(card) end
    if card.preview_url then buttons[#buttons + 1] = M.preview_button(card) end
    if #buttons > 0 then blocks[#blocks + 1] = { type = "actions", elements = buttons } end
  elseif opts.thread then
    blocks[#blocks + 1] = stop_button(opts, card)
  end
  return { text = card_mod.cut_line(status, 300), blocks = blocks }
end

-- opts.message: the dispatcher's message, for cards of a kind this renderer does not know.
function M.render(card, opts)
  if not is_known(card) then return M.render_text(opts.message or {}, opts) end
  if is_agent(card) then return M.render_agent(card, opts) end
  local max = math.min(opts.max_block_chars or M.SECTION_LIMIT, M.SECTION_LIMIT)
  local blocks = head_blocks(card, max)
  blocks[#blocks + 1] = section(code("$ " .. card_mod.cut(card.command or "", max // 2)))
  local status = card:status_line(opts.now_ms, max)
  blocks[#blocks + 1] = section(text.escape(status))
  local body = card:body_text()
  if card:final() and body ~= "" then
    local where
    if opts.file and opts.file.permalink then
      where = opts.file.permalink
    elseif opts.file and opts.file.error then
      where = { error = opts.file.error }
    end
    blocks[#blocks + 1] = section(body_code(body, max, where))
    if opts.file and opts.file.permalink then
      blocks[#blocks + 1] = context(("The whole output: <%s|%s>"):format(opts.file.permalink,
        text.escape(opts.file.name or "output.txt")))
    end
  end
  if not card:final() and opts.thread then blocks[#blocks + 1] = stop_button(opts) end
  return { text = card_mod.cut_line(status, 300), blocks = blocks }
end

return M
