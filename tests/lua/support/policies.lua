-- Shared helpers for policy specs: the hash, the shipped snapshot, and scratch policy
-- directories made from the shipped files with edits.

local loader = require("switchboard.policy.loader")
-- the backends' and fronts' settings in the schema (a script without busted's helper)
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local sha256 = require("support.sha256")
local tmp = require("support.tmp")

local M = {}

M.core = loader.core()

-- The engine's sha256 when the module is built, else the pure-Lua one (same digest).
function M.hash(bytes)
  if M.core then return M.core.crypto.hex(M.core.crypto.sha256(bytes)) end
  return sha256.hash(bytes)
end

M.SHIPPED = "policies"
M.FILES = loader.FILES

function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function M.write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local dirs = {}

-- A scratch copy of the shipped policies. edits: name → function(src) → src | string
-- (the whole file) | false (leave the file out).
function M.dir(edits)
  edits = edits or {}
  local dir = tmp.scratch("policies")
  dirs[#dirs + 1] = dir
  for _, name in ipairs(M.FILES) do
    local src = M.read(M.SHIPPED .. "/" .. name .. ".lua")
    local e = edits[name]
    -- a walled sandboxd's bridge would be made in the network namespace it runs in: a spec's is
    -- the host's own unless the spec made one, so pasta unless the spec's edit says otherwise;
    -- SB_TEST_OUTBOUND=bridge|auto when the whole run is in a namespace of its own (docs/testing.md)
    if name == "isolation" then
      local asked = os.getenv("SB_TEST_OUTBOUND")
      src = src .. ('\noutbound = "%s"\n'):format((asked == "bridge" or asked == "auto") and asked or "pasta")
    end
    if type(e) == "function" then src = e(src) elseif e ~= nil then src = e end
    if src then M.write(dir .. "/" .. name .. ".lua", src) end
  end
  return dir
end

function M.cleanup()
  for _, d in ipairs(dirs) do tmp.remove(d) end
  dirs = {}
end

-- Load a directory with the spec hash. Returns snap | nil, errs.
function M.load(dir, opts)
  opts = opts or {}
  opts.hash = opts.hash or M.hash
  return loader.load(dir or M.SHIPPED, opts)
end

local shipped
function M.shipped()
  if not shipped then shipped = assert(M.load(M.SHIPPED)) end
  return shipped
end

-- Does any message in errs contain every given fragment (plain text)?
function M.has(errs, ...)
  for _, e in ipairs(errs or {}) do
    local all = true
    for _, frag in ipairs({ ... }) do
      if not e:find(frag, 1, true) then all = false; break end
    end
    if all then return true end
  end
  return false
end

return M
