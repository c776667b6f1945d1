-- What an agent run gets from Slack besides the ask's text (docs/slack.md "Context"):
--   * the first run in a thread: the thread's earlier messages (conversations.replies), the
--     newest `max_messages`, at most `max_bytes`, oldest first, each with its author's name
--     (users.info, cached); the bot's own cards are left out
--   * a later run: the messages posted since the previous run began (after the bot's latest
--     card before the ask), mentions of the bot left out (they were asks, or reached the run)
--   * files attached to the ask, fetched with the bot token (files:read): images as image
--     blocks, text files inline (cut at a bound), anything else named on the card and skipped;
--     the token goes only to Slack's own file hosts (file_url.lua), a redirect is followed
--     only to them and without it, and any other address is not fetched at all
--
--   context.gather(api, pol, o) → blocks, notes     pol: snap.slack.context
--     o: channel, thread_ts, ask_ts, files (the event's), first (no conversation yet), bot_user?,
--        request (default core.http.request), names (a cache: user id → name)
--   blocks: Messages API content blocks to put before the ask's text; notes: card lines
--   context.name_of(api, user_id, names) → the user's display name (or the id)
local core = require("switchboard.core")
local text_cut = require("switchboard.text_cut")
local file_url = require("switchboard.fronts.slack.file_url")

local M = {}

local IMAGES = { ["image/png"] = true, ["image/jpeg"] = true, ["image/gif"] = true, ["image/webp"] = true }
local TEXT_TYPES = { ["application/json"] = true, ["application/xml"] = true, ["application/x-yaml"] = true,
                     ["application/yaml"] = true, ["application/javascript"] = true, ["application/x-sh"] = true,
                     ["application/toml"] = true, ["application/x-ndjson"] = true }

local function is_text(mime) return mime:match("^text/") ~= nil or TEXT_TYPES[mime] == true end

-- A user's display name (users.info, cached in names), or the id when Slack has none.
function M.name_of(api, id, names)
  if type(id) ~= "string" then return "someone" end
  if names[id] then return names[id] end
  local body = api:call("users.info", { user = id }, { form = true })
  local u = type(body) == "table" and body.user or nil
  local name
  if type(u) == "table" then
    local profile = type(u.profile) == "table" and u.profile or {}
    local candidates = { profile.display_name, u.real_name, u.name }
    for i = 1, 3 do
      local v = candidates[i]
      if type(v) == "string" and v ~= "" then name = v break end
    end
  end
  names[id] = name or id
  return names[id]
end

local name_of = M.name_of

local function utf8_cut(s, max)
  if #s <= max then return s, false end
  return s:sub(1, text_cut.prefix_len(s, max)), true
end

-- The newest message of the bot before the ask (its previous card: where the previous run
-- started), and the bot's user id its messages carry.
local function previous_card(messages, ask_ts)
  local since, bot_user
  for _, m in ipairs(messages) do
    if type(m) == "table" and m.bot_id ~= nil and type(m.ts) == "string" and tonumber(m.ts)
        and tonumber(m.ts) < tonumber(ask_ts) then
      if not since or tonumber(m.ts) > tonumber(since) then since = m.ts end
      if type(m.user) == "string" then bot_user = m.user end
    end
  end
  return since, bot_user
end

-- The thread's messages before the ask, as one text block: on the thread's first run all of
-- them; on a later run those posted since the previous run began (after the bot's latest card
-- before the ask), leaving out mentions of the bot (they were asks, or reached the run that
-- was working).
function M.thread_block(api, pol, o)
  if pol.max_messages == 0 or o.thread_ts == o.ask_ts then return nil end
  local body, err = api:call("conversations.replies", { channel = o.channel, ts = o.thread_ts,
    limit = math.min(1000, pol.max_messages * 2 + 10) }, { form = true, channel = o.channel })
  if not body then
    return nil, ("the thread's earlier messages could not be read (%s): the run sees only the ask")
      :format(tostring(err and err.error or err))
  end
  local messages = type(body) == "table" and type(body.messages) == "table" and body.messages or {}
  local since, bot_user
  if o.first == false then
    since, bot_user = previous_card(messages, o.ask_ts)
    if not since then return nil end
    bot_user = o.bot_user or bot_user
  end
  local mention = bot_user and ("<@" .. bot_user .. ">")
  local earlier = {}
  for _, m in ipairs(messages) do
    if type(m) == "table" and type(m.ts) == "string" and tonumber(m.ts) and tonumber(m.ts) < tonumber(o.ask_ts)
        and m.bot_id == nil and m.subtype == nil and type(m.text) == "string" and m.text ~= ""
        and (not since or tonumber(m.ts) > tonumber(since))
        and not (mention and m.text:find(mention, 1, true)) then
      earlier[#earlier + 1] = m
    end
  end
  local first = math.max(1, #earlier - pol.max_messages + 1)
  local lines, used = {}, 0
  for i = #earlier, first, -1 do -- newest first while counting, so the bound drops the oldest
    local line = name_of(api, earlier[i].user, o.names) .. ": " .. earlier[i].text
    if used + #line > pol.max_bytes then break end
    table.insert(lines, 1, line)
    used = used + #line + 1
  end
  if #lines == 0 then return nil end
  local dropped = #earlier - #lines
  local head = (since and "Messages posted in this Slack thread since the previous run, oldest first"
    or "Earlier messages in this Slack thread, oldest first")
    .. (dropped > 0 and (" (the %d oldest left out)"):format(dropped) or "") .. ":\n"
  return { type = "text", text = head .. table.concat(lines, "\n") }, nil, #lines, since ~= nil
end

local REDIRECTS = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
local NOT_SLACK = "not fetched: not a Slack file URL"

-- GET url: the bot token goes only to the first request, which file_url allowed; a redirect
-- is followed (up to pol.max_redirects) only to an allowed origin, and without the token.
local function fetch(api, pol, o, url)
  local origins = file_url.origins(api.url)
  if not file_url.allowed(url, origins) then return nil, NOT_SLACK end
  local headers = { authorization = "Bearer " .. api.token }
  for _ = 0, pol.max_redirects do
    local status, answer, body = (o.request or core.http.request){
      method = "GET", url = url, deadline_ms = api.deadline_ms, headers = headers,
    }
    if not status then return nil, "it could not be fetched (" .. tostring(answer) .. ")" end
    if not REDIRECTS[status] then return status, answer, body end
    local next_url = file_url.resolve(url, answer and answer.location)
    if not next_url or not file_url.allowed(next_url, origins) then
      return nil, NOT_SLACK .. " (Slack redirected it elsewhere)"
    end
    url, headers = next_url, {}
  end
  return nil, ("it could not be fetched (more than %d redirects)"):format(pol.max_redirects)
end

local function download(api, pol, o, file, max)
  local url = file.url_private_download or file.url_private
  if type(url) ~= "string" then return nil, "it has no download address" end
  local status, headers, body = fetch(api, pol, o, url)
  if not status then return nil, headers end
  if status ~= 200 then return nil, ("Slack answered %d for it"):format(status) end
  local ctype = headers and (headers["content-type"] or "") or ""
  if ctype:match("^text/html") and file.mimetype ~= "text/html" then
    return nil, "Slack answered with its sign-in page: the bot token lacks files:read (deploy/slack/manifest.yaml)"
  end
  if #body > max then return nil, ("it is %d bytes, over the %d this bot reads"):format(#body, max) end
  return body
end

-- why → the card's note: "NAME was not read: why", or "NAME not fetched: …" for an address
-- that is not Slack's
local function skipped(name, why)
  if why:sub(1, #NOT_SLACK) == NOT_SLACK then return name .. " " .. why end
  return name .. " was not read: " .. why
end

-- One attached file → a block, or a note saying why it was skipped.
function M.file_block(api, pol, o, file)
  local name = type(file.name) == "string" and file.name or type(file.title) == "string" and file.title or "a file"
  local mime = type(file.mimetype) == "string" and file.mimetype:lower() or ""
  local size = tonumber(file.size)
  size = size and size == size and size >= 0 and size < 2^53 and math.floor(size) or nil
  if IMAGES[mime] then
    if size and size > pol.max_image_bytes then
      return nil, ("%s was not read: %d bytes, over slack.context.max_image_bytes"):format(name, size)
    end
    local bytes, why = download(api, pol, o, file, pol.max_image_bytes)
    if not bytes then return nil, skipped(name, why) end
    return { type = "image", source = { type = "base64", media_type = mime, data = core.crypto.base64_encode(bytes) } },
      "read " .. name .. " (image)"
  end
  if is_text(mime) then
    -- a text file up to four times the bound is read and cut; a larger one is skipped
    local bytes, why = download(api, pol, o, file, 4 * pol.max_text_file_bytes)
    if not bytes then return nil, skipped(name, why) end
    if not utf8.len(bytes) then return nil, name .. " was not read: it is not UTF-8 text" end
    local text, cut = utf8_cut(bytes, pol.max_text_file_bytes)
    return { type = "text", text = ("Attached file %s%s:\n```\n%s\n```"):format(name,
      cut and (" (its first %d of %d bytes)"):format(#text, #bytes) or "", text) },
      "read " .. name .. (cut and (" (cut to %d bytes)"):format(#text) or "")
  end
  return nil, ("%s (%s) was not read: only images and text files are"):format(name, mime ~= "" and mime or "unknown type")
end

function M.gather(api, pol, o)
  local blocks, notes = {}, {}
  o.names = o.names or {}
  local block, why, n, since = M.thread_block(api, pol, o)
  if block then
    blocks[#blocks + 1] = block
    notes[#notes + 1] = ("context: %d %s message%s of this thread"):format(n, since and "new" or "earlier",
      n == 1 and "" or "s") .. (since and " since the previous run" or "")
  elseif why then
    notes[#notes + 1] = why
  end
  local files = type(o.files) == "table" and o.files or {}
  for i, file in ipairs(files) do
    if i > pol.max_files then
      notes[#notes + 1] = ("%d more files were not read (slack.context.max_files = %d)"):format(#files - pol.max_files, pol.max_files)
      break
    end
    if type(file) == "table" then
      local block, note = M.file_block(api, pol, o, file)
      if block then blocks[#blocks + 1] = block end
      if note then notes[#notes + 1] = note end
    end
  end
  return blocks, notes
end

return M
