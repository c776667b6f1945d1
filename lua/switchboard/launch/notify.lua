-- What a long-running command tells its service manager (systemd's Type=notify, sd_notify(3);
-- the units are deploy/systemd/). Commands reach it through the prologue (p:ready,
-- p:stopping, and p:reload_on_hup around each reload). The engine's core.notify moves the bytes; this module says
-- what and when. Every call is a no-op (false) when $NOTIFY_SOCKET is unset, so the commands
-- call it unconditionally. A failed send is logged once and never stops the service: the
-- manager's own start timeout is what names a service that never said READY.
--
--   ready(status)  after the service answers (listening, connected)   READY=1
--   reloading()    when SIGHUP's reload starts; ready() again after it  RELOADING=1 + MONOTONIC_USEC
--   stopping()     when a stop signal arrives, before draining          STOPPING=1
--   status(text)   a one-line state `systemctl status` shows           STATUS=…
local core = require("switchboard.core")

local M = {}

local warned = false

-- A STATUS= line is one line: a newline would start another assignment.
local function one_line(text)
  return (tostring(text):gsub("[\r\n]+", " "))
end

local function send(text)
  local ok, err = core.notify.send(text)
  if ok == nil and not warned then
    warned = true
    core.log("warn", "notify.failed", { error = err and err.message or "unknown" })
  end
  return ok == true
end

function M.ready(status)
  if status then return send("READY=1\nSTATUS=" .. one_line(status)) end
  return send("READY=1")
end

function M.reloading()
  return send(("RELOADING=1\nMONOTONIC_USEC=%d"):format(core.notify.monotonic_usec()))
end

function M.stopping()
  return send("STOPPING=1")
end

function M.status(text)
  return send("STATUS=" .. one_line(text))
end

return M
