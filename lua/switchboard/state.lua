-- Where switchboard keeps its state when nobody says: $SWITCHBOARD_STATE_DIR, else
-- $XDG_STATE_HOME/switchboard, else ~/.local/state/switchboard, else (no HOME: a service or a
-- bare environment) $TMPDIR/switchboard-<user>, /tmp's when TMPDIR is unset. Not
-- $XDG_RUNTIME_DIR: the state (the record, sealed secrets, workspaces) is no runtime file, and
-- the login session's end empties that directory; TMPDIR is where this environment was told
-- to put what it may lose, which is what a state without a HOME is.
local M = {}

function M.dir(getenv)
  getenv = getenv or os.getenv
  local explicit = getenv("SWITCHBOARD_STATE_DIR")
  if explicit and explicit ~= "" then return explicit end
  local xdg = getenv("XDG_STATE_HOME")
  if xdg and xdg ~= "" then return xdg .. "/switchboard" end
  local home = getenv("HOME")
  if home and home ~= "" then return home .. "/.local/state/switchboard" end
  local tmp = getenv("TMPDIR")
  if not tmp or tmp == "" then tmp = "/tmp" end
  return (tmp:gsub("(.)/+$", "%1")) .. "/switchboard-" .. (getenv("USER") or "user")
end

function M.workspaces(getenv)
  return M.dir(getenv) .. "/workspaces"
end

return M
