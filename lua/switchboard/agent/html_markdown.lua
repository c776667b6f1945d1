-- HTML as readable markdown for the model (web_fetch): headings, paragraphs, links, lists,
-- code and pre, emphasis, images' alt text; script, style and the like dropped; entities
-- decoded. Not a full HTML parser: a tolerant pass over tags and text, enough for pages meant
-- to be read.
--
--   html_markdown.convert(html, base_url?) → markdown text (links made absolute against base)
local M = {}

-- Nested lists deeper than this are indented no further (a page of thousands of nested lists
-- must not make its markdown grow with the square of its size).
M.MAX_INDENT = 8

local NAMED = {
  amp = "&", lt = "<", gt = ">", quot = '"', apos = "'", nbsp = " ", copy = "©", reg = "®",
  mdash = "—", ndash = "–", hellip = "…", rsquo = "’", lsquo = "‘", rdquo = "”", ldquo = "“",
  laquo = "«", raquo = "»", middot = "·", bull = "•", times = "×", deg = "°", euro = "€",
  trade = "™", larr = "←", rarr = "→", shy = "", eacute = "é", egrave = "è", agrave = "à", aacute = "á",
  ccedil = "ç", uuml = "ü", ouml = "ö", auml = "ä", szlig = "ß", ntilde = "ñ", iacute = "í", oacute = "ó",
}

function M.decode_entities(s)
  return (s:gsub("&(#?[xX]?)(%w+);?", function(kind, name)
    local n
    if kind == "#" then n = tonumber(name, 10)
    elseif kind == "#x" or kind == "#X" then n = tonumber(name, 16)
    else return NAMED[name] or NAMED[name:lower()] end
    if n and n > 0 and n < 0x110000 and not (n >= 0xD800 and n <= 0xDFFF) then return utf8.char(n) end
    return "\u{FFFD}"
  end))
end

-- Elements whose content is never read.
local DROP = { script = true, style = true, noscript = true, template = true, svg = true, iframe = true,
               head = true, canvas = true, object = true, select = true, button = true }
local BLOCK = { p = true, div = true, section = true, article = true, header = true, footer = true, main = true,
                nav = true, aside = true, table = true, form = true, figure = true, figcaption = true,
                dl = true, address = true, details = true, summary = true, body = true, html = true }

local function attr(attrs, name)
  local v = attrs:match("[%s]" .. name .. "%s*=%s*\"([^\"]*)\"") or attrs:match("[%s]" .. name .. "%s*=%s*'([^']*)'")
    or attrs:match("[%s]" .. name .. "%s*=%s*([^%s>\"']+)")
  return v and M.decode_entities(v)
end

function M.absolute(href, base)
  if not href or href == "" or not base or href:match("^%a[%w+.-]*:") then return href end
  local origin = base:match("^(%a[%w+.-]*://[^/?#]+)")
  if not origin then return href end
  if href:sub(1, 2) == "//" then return base:match("^(%a[%w+.-]*:)") .. href end
  if href:sub(1, 1) == "/" then return origin .. href end
  if href:sub(1, 1) == "#" or href:sub(1, 1) == "?" then return (base:gsub("[#?].*$", "")) .. href end
  local dir = base:gsub("[#?].*$", ""):match("^(.*/)") or (origin .. "/")
  if #dir < #origin + 1 then dir = origin .. "/" end
  return dir .. href
end

local function new_out()
  local o = { parts = {}, lists = {}, pre = 0, link = nil }
  function o.text(s) o.parts[#o.parts + 1] = s end
  -- a break of n lines (1 or 2), merged with its neighbours at the end: the largest wins
  function o.block(n) o.parts[#o.parts + 1] = n == 2 and "\2" or "\1" end
  return o
end

local function open_tag(o, name, attrs, base)
  if name:match("^h[1-6]$") then
    o.block(2); o.text(("#"):rep(tonumber(name:sub(2))) .. " ")
  elseif name == "p" or name == "blockquote" then
    o.block(2); if name == "blockquote" then o.text("> ") end
  elseif BLOCK[name] then o.block(1)
  elseif name == "br" then o.text("\n")
  elseif name == "hr" then o.block(2); o.text("---"); o.block(2)
  elseif name == "tr" then o.block(1)
  elseif name == "td" or name == "th" then o.text(" | ")
  elseif name == "ul" or name == "ol" then o.lists[#o.lists + 1] = { ordered = name == "ol", n = 0 }; o.block(1)
  elseif name == "li" then
    local l = o.lists[#o.lists] or { ordered = false, n = 0 }
    l.n = l.n + 1
    o.block(1)
    o.text(("\3"):rep(math.min(M.MAX_INDENT, math.max(0, #o.lists - 1))) .. (l.ordered and (l.n .. ". ") or "- "))
  elseif name == "dt" then o.block(1)
  elseif name == "dd" then o.block(1); o.text(": ")
  elseif name == "pre" then o.block(2); o.text("```\n"); o.pre = o.pre + 1
  elseif name == "code" and o.pre == 0 then o.text("`")
  elseif name == "strong" or name == "b" then o.text("**")
  elseif name == "em" or name == "i" then o.text("*")
  elseif name == "a" then
    local href = attr(attrs, "href")
    if href and not href:match("^javascript:") then o.link = M.absolute(href, base); o.text("[") end
  elseif name == "img" then
    local alt = attr(attrs, "alt")
    if alt and alt ~= "" then o.text("[image: " .. alt .. "]") end
  end
end

local function close_tag(o, name)
  if name:match("^h[1-6]$") or name == "p" or name == "blockquote" then o.block(2)
  elseif BLOCK[name] or name == "tr" or name == "dd" or name == "dt" then o.block(1)
  elseif name == "ul" or name == "ol" then table.remove(o.lists); o.block(1)
  elseif name == "pre" then o.pre = math.max(0, o.pre - 1); o.text("\n```"); o.block(2)
  elseif name == "code" and o.pre == 0 then o.text("`")
  elseif name == "strong" or name == "b" then o.text("**")
  elseif name == "em" or name == "i" then o.text("*")
  elseif name == "a" and o.link then o.text("](" .. o.link .. ")"); o.link = nil
  end
end

local function finish(parts)
  local s = table.concat(parts)
  s = s:gsub("[ \t\n]*[\1\2][\1\2 \t\n]*", function(run)
    return run:find("\2", 1, true) and "\n\n" or "\n"
  end)
  s = s:gsub("\3", "  "):gsub("[ \t]+\n", "\n"):gsub("\n\n\n+", "\n\n")
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- html without each open … close (plain text; an open without its close cuts to the end).
local function cut_between(html, open, close)
  local out, pos = {}, 1
  while true do
    local i = html:find(open, pos, true)
    if not i then out[#out + 1] = html:sub(pos); break end
    out[#out + 1] = html:sub(pos, i - 1)
    local _, j = html:find(close, i + #open, true)
    if not j then break end
    pos = j + 1
  end
  return table.concat(out)
end

function M.convert(html, base)
  html = cut_between(cut_between(html, "<!--", "-->"), "<![CDATA[", "]]>"):gsub("<[!?][^<>]*>", "")
  local o = new_out()
  local pos, drop = 1, nil
  while pos <= #html do
    -- [^<>]: a "<" without its ">" ends the search at the next "<", so a page never makes
    -- this quadratic
    local s, e, slash, name, attrs = html:find("<(/?)([%a][%w-]*)([^<>]*)>", pos)
    local text = html:sub(pos, (s or #html + 1) - 1)
    if not drop and text ~= "" then
      text = text:gsub("<", "&lt;")
      if o.pre > 0 then o.text(M.decode_entities(text))
      else o.text((M.decode_entities(text:gsub("%s+", " ")):gsub("\u{A0}", " "))) end
    end
    if not s then break end
    name = name:lower()
    if drop then
      if slash == "/" and name == drop then drop = nil end
    elseif DROP[name] and slash == "" and not attrs:match("/%s*$") then
      drop = name
    elseif slash == "/" then close_tag(o, name)
    else open_tag(o, name, " " .. attrs, base) end
    pos = e + 1
  end
  return finish(o.parts)
end

return M
