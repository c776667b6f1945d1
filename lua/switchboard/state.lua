-- Where switchboard keeps its state when nobody says: $SWITCHBOARD_STATE_DIR, else
-- $XDG_STATE_HOME/switchboard, else ~/.local/state/switchboard, else /tmp/switchboard-<uid>.
local M = {}

function M.dir(getenv)
  getenv = getenv or os.getenv
  local explicit = getenv("SWITCHBOARD_STATE_DIR")
  if explicit and explicit ~= "" then return explicit end
  local xdg = getenv("XDG_STATE_HOME")
  if xdg and xdg ~= "" then return xdg .. "/switchboard" end
  local home = getenv("HOME")
  if home and home ~= "" then return home .. "/.local/state/switchboard" end
  return "/tmp/switchboard-" .. (getenv("USER") or "user")
end

function M.workspaces(getenv)
  return M.dir(getenv) .. "/workspaces"
end

return M
