-- What a tool gives the model, made fit for a request: valid UTF-8, bounded, and bytes that
-- are not text described rather than sent (the API refuses a body that is not valid UTF-8,
-- and a megabyte of output fills the window for nothing).
--
--   text.valid(s)                 → s with every byte that is not part of valid UTF-8
--                                   replaced by U+FFFD (unchanged when already valid)
--   text.bound(s, max, head_pct, saved_at)
--                                 → s, or its head and tail around a marker line naming how
--                                   much was cut and where the whole is (saved_at)
--   text.chars(s)                 → its length in characters (s valid UTF-8)
--   text.image_type(bytes)        → "image/png" | "image/jpeg" | "image/gif" | "image/webp" | nil
--   text.image_size(bytes, media) → width, height from the image's header, or nil
--   text.is_binary(bytes)         → true for NUL bytes or mostly invalid UTF-8
--   text.describe_binary(path, bytes) → one line: what the file is and its size
local M = {}

local REPLACEMENT = "\u{FFFD}"

function M.valid(s)
  local n, bad = utf8.len(s)
  if n then return s end
  local out, at = {}, 1
  while bad do
    out[#out + 1] = s:sub(at, bad - 1)
    out[#out + 1] = REPLACEMENT
    at = bad + 1
    n, bad = utf8.len(s, at)
    if n then break end
  end
  out[#out + 1] = s:sub(at)
  return table.concat(out)
end

function M.chars(s) return utf8.len(s) or #s end

-- The byte offset just past the first n characters, and the byte where the last n start.
local function head_bytes(s, n) return (utf8.offset(s, n + 1) or (#s + 1)) - 1 end
local function tail_start(s, n)
  if n <= 0 then return #s + 1 end
  return utf8.offset(s, -n) or 1
end

function M.bound(s, max, head_pct, saved_at)
  local total = M.chars(s)
  if total <= max then return s, false end
  local head = max * head_pct // 100
  local tail = max - head
  local h, t = head_bytes(s, head), tail_start(s, tail)
  local where = saved_at
    and ("; the whole output is saved at %s: read it with read_file (offset and limit are line numbers) or grep it"):format(saved_at)
    or "; narrow the command (head, tail, grep)"
  return ("%s\n… [%d of %d characters cut here%s] …\n%s")
    :format(s:sub(1, h), total - head - tail, total, where, s:sub(t)), true
end

local MAGIC = {
  { "^\x89PNG\r\n\x1a\n", "image/png" },
  { "^\xFF\xD8\xFF", "image/jpeg" },
  { "^GIF8[79]a", "image/gif" },
}

function M.image_type(bytes)
  for _, m in ipairs(MAGIC) do
    if bytes:find(m[1]) then return m[2] end
  end
  if bytes:sub(1, 4) == "RIFF" and bytes:sub(9, 12) == "WEBP" then return "image/webp" end
  return nil
end

local function be16(s, i) local a, b = s:byte(i, i + 1); return a and b and a * 256 + b end
local function le16(s, i) local a, b = s:byte(i, i + 1); return a and b and b * 256 + a end
local function le24(s, i) local a, b, c = s:byte(i, i + 2); return a and b and c and (c * 256 + b) * 256 + a end

-- JPEG: the first start-of-frame segment (SOF0-15 but DHT, JPG and DAC) holds the size.
local function jpeg_size(s)
  local i = 3
  while i + 8 <= #s do
    if s:byte(i) ~= 0xFF then return nil end
    local marker = s:byte(i + 1)
    if marker >= 0xC0 and marker <= 0xCF and marker ~= 0xC4 and marker ~= 0xC8 and marker ~= 0xCC then
      return be16(s, i + 7), be16(s, i + 5)
    end
    local len = be16(s, i + 2)
    if not len then return nil end
    i = i + 2 + len
  end
  return nil
end

local function webp_size(s)
  local chunk = s:sub(13, 16)
  if chunk == "VP8X" then return le24(s, 25) + 1, le24(s, 28) + 1 end
  if chunk == "VP8 " and #s >= 30 then return le16(s, 27) & 0x3FFF, le16(s, 29) & 0x3FFF end
  if chunk == "VP8L" and #s >= 25 then
    local b0, b1, b2, b3 = s:byte(22, 25)
    local bits = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)
    return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
  end
  return nil
end

function M.image_size(bytes, media)
  if media == "image/png" and #bytes >= 24 then
    return (string.unpack(">I4", bytes, 17)), (string.unpack(">I4", bytes, 21))
  elseif media == "image/gif" and #bytes >= 10 then
    return le16(bytes, 7), le16(bytes, 9)
  elseif media == "image/jpeg" then
    return jpeg_size(bytes)
  elseif media == "image/webp" then
    return webp_size(bytes)
  end
  return nil
end

-- Text with a stray byte or two is still text (it is sent with U+FFFD); NUL bytes, or more
-- than 1 byte in 20 of the first 8 KiB not being UTF-8, make it binary.
function M.is_binary(bytes)
  local probe = bytes:sub(1, 8192)
  if probe:find("\0", 1, true) then return true end
  if utf8.len(probe) then return false end
  local fixed = M.valid(probe)
  local bad = select(2, fixed:gsub(REPLACEMENT, ""))
  return bad * 20 > #probe
end

local KINDS = {
  { "^\x7FELF", "an ELF executable or library" },
  { "^\x1F\x8B", "gzip-compressed data" },
  { "^PK\x03\x04", "a zip archive (or a jar, docx, …)" },
  { "^%%PDF", "a PDF document" },
  { "^BZh", "bzip2-compressed data" },
  { "^\xFD7zXZ", "xz-compressed data" },
  { "^SQLite format 3", "an SQLite database" },
  { "^\xCA\xFE\xBA\xBE", "a Java class or Mach-O universal binary" },
  { "^\0asm", "a WebAssembly module" },
}

function M.describe_binary(path, bytes)
  local what = "binary data of no type this tool knows"
  for _, k in ipairs(KINDS) do
    if bytes:find(k[1]) then what = k[2]; break end
  end
  local img = M.image_type(bytes)
  if img then what = "an image (" .. img .. ")" end
  return ("%s is a binary file: %s, %d bytes; its bytes are not shown. Inspect it with bash "
    .. "(file, xxd | head, strings) if you need to."):format(path, what, #bytes)
end

return M
