-- Thread affinity over several sandboxd servers (docs/deploy.md "Kubernetes"): SANDBOX_URL may
-- list several base URLs separated by commas — a StatefulSet's stable pod names, like
-- http://sandboxd-0.sandboxd:8080,http://sandboxd-1.sandboxd:8080 — and each thread key goes
-- to one of them by rendezvous (highest random weight) hashing: the URL whose
-- SHA-256(key, URL) scores highest. Every bot replica computes the same answer with no shared
-- state, and adding or removing one URL moves only the threads that scored highest on it.
-- A pod that goes away is not skipped: its name comes back with the StatefulSet, and until then
-- that thread's commands fail as infrastructure errors (the fresh pod has an empty workspace,
-- like a container that slept; docs/contract.md#workspaces).
local core = require("switchboard.core")

local M = {}

-- "a, b ,c" → {"a", "b", "c"} (trailing slashes kept as given; the executor trims them).
function M.split(list)
  local urls = {}
  for part in tostring(list):gmatch("[^,]+") do
    local url = part:match("^%s*(.-)%s*$")
    if url ~= "" then urls[#urls + 1] = url end
  end
  return urls
end

-- The first 8 bytes of the digest as an unsigned comparison key (a hex string compares the
-- same way and never overflows an integer).
local function score(key, url)
  return core.crypto.hex(core.crypto.sha256(key .. "\0" .. url)):sub(1, 16)
end

-- The URL for thread_key among the comma-separated list; a single URL is returned as it is.
function M.pick(list, thread_key)
  local urls = M.split(list)
  if #urls <= 1 then return urls[1] or list end
  local best, best_score = nil, nil
  for _, url in ipairs(urls) do
    local s = score(thread_key or "default", url)
    if best_score == nil or s > best_score then best, best_score = url, s end
  end
  return best
end

return M
