-- The model's Markdown as safe HTML for the run page: everything is escaped first, then a small
-- subset is given back its meaning — fenced code blocks, inline code, **bold**, headings, lists
-- (- * 1.) and links whose address is http(s) (any other scheme, javascript: included, stays
-- text). No raw HTML passes; the page's CSP (no script) is the second lock.
--
--   markdown.html(text) → html
local code_spans = require("switchboard.code_spans")

local M = {}

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }
local function esc(s) return (tostring(s):gsub("[&<>\"']", ESC)) end

-- Text outside code spans: escaped, then bold and http(s) links. The escaped URL holds no
-- quote or angle bracket, so it cannot leave its attribute.
local function text_html(t)
  local e = esc(t)
  e = e:gsub("%*%*([^*]+)%*%*", "<strong>%1</strong>")
  e = e:gsub("%[([^%]]+)%]%((https?://[^%s%)]+)%)", function(label, url)
    return ('<a href="%s" rel="nofollow noopener noreferrer">%s</a>'):format(url, label)
  end)
  return e
end

function M.inline(s)
  return code_spans.map(s, text_html, function(code) return "<code>" .. esc(code) .. "</code>" end)
end

local function list_item(line)
  local item = line:match("^%s*[-*+]%s+(.*)$")
  if item then return "ul", item end
  item = line:match("^%s*%d+[.)]%s+(.*)$")
  if item then return "ol", item end
  return nil
end

function M.html(src)
  local out, para, list = {}, {}, nil
  local function end_para()
    if #para > 0 then out[#out + 1] = "<p>" .. table.concat(para, "<br>") .. "</p>" end
    para = {}
  end
  local function end_list()
    if list then out[#out + 1] = "</" .. list .. ">" end
    list = nil
  end
  local lines = {}
  for line in (tostring(src or "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local i = 1
  while i <= #lines do
    local line = lines[i]
    if line:match("^%s*```") then
      end_para(); end_list()
      local code = {}
      i = i + 1
      while i <= #lines and not lines[i]:match("^%s*```%s*$") do
        code[#code + 1] = lines[i]
        i = i + 1
      end
      out[#out + 1] = "<pre><code>" .. esc(table.concat(code, "\n")) .. "</code></pre>"
    elseif line:match("^%s*$") then
      end_para(); end_list()
    elseif line:match("^#+%s") then
      end_para(); end_list()
      out[#out + 1] = "<h3>" .. M.inline(line:match("^#+%s+(.*)$")) .. "</h3>"
    else
      local kind, item = list_item(line)
      if kind then
        end_para()
        if list ~= kind then end_list(); list = kind; out[#out + 1] = "<" .. kind .. ">" end
        out[#out + 1] = "<li>" .. M.inline(item) .. "</li>"
      else
        end_list()
        para[#para + 1] = M.inline(line)
      end
    end
    i = i + 1
  end
  end_para(); end_list()
  return table.concat(out, "\n")
end

return M
