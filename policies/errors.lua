-- Error classification: how a failure is recognized, and what the user and the model read.
--
-- rule{ names = {...}, codes = {...}, texts = {...}, patterns = {...},
--       matches = {...}, rejects = {...} }
--   names, codes   the thrown error's name / code, compared exactly (typed errors come first)
--   texts          plain substrings of the message, any case
--   patterns       Lua patterns over the message
--   matches        examples the rule MUST recognize; rejects: examples it must NOT.
--                  An example is a message string or {name=, code=, message=}.
-- A rule whose own examples fail is refused at load, and nothing changes.

-- A full sandbox fleet (capacity, not a dead sandbox): nothing ran, so re-sending is safe.
fleet_busy = rule {
  names = { "ContainerUnavailableError" },
  codes = { "CONTAINER_UNAVAILABLE" },
  texts = {
    "Failed to create session: 503",                -- SDK 0.3.x, the platform's bare 503
    "no container instance that can be provided",   -- the platform's own wording
    "CONTAINER_UNAVAILABLE",                        -- the newer SDKs' code, surfaced in a text
  },
  matches = {
    "Failed to create session: 503",
    "Error: Failed to create session: 503 Service Unavailable",
    "There is no container instance that can be provided to this Durable Object, try again later",
    { name = "ContainerUnavailableError", message = "anything at all" },
    { name = "ContainerUnavailableError" },
    { code = "CONTAINER_UNAVAILABLE", message = "unavailable" },
    "CONTAINER_UNAVAILABLE: no container instance available",
  },
  rejects = {
    "Session 'thread-1' not found",                 -- a stale session
    "Command execution failed",                     -- a wedged sandbox
    "Failed to read file: /workspace/notes.txt",    -- a file-op failure
    "Failed to create session: 500",                -- a 500
    "HTTP 500 Internal Server Error",
    "something else went wrong",
    { name = "SessionTerminatedError", message = "Session terminated" },
    { name = "OperationInterruptedError" },
  },
}

-- The container went away under the command. Typed errors (by NAME: the RPC boundary keeps the
-- name and drops the prototype) count at any elapsed time; the texts only past
-- timeouts recycle.threshold_ms into the attempt.
recycle = rule {
  names = { "SessionTerminatedError", "OperationInterruptedError" },
  texts = {
    "The sandbox container stopped while the operation was pending",   -- 0.12.x
    "The sandbox was destroyed while the operation was pending",       -- destroy() under a call
    "Command execution failed",                                        -- 0.3.x
    "Session terminated",                                              -- 0.3.x
  },
  patterns = {
    "Session '[^']*' shell exited %(exit code: %-?%d+%)",              -- 0.12.x
    "Session '[^']*' not found",                                       -- 0.3.x
  },
  matches = {
    "Session 'thread-1' shell exited (exit code: 137)",
    "The sandbox container stopped while the operation was pending.",
    "The sandbox was destroyed while the operation was pending.",
    "Command execution failed",
    "Session terminated",
    "Session 'abc123' not found",
    { name = "SessionTerminatedError", message = "whatever the text says" },
    { name = "OperationInterruptedError" },
  },
  rejects = {
    "Failed to create session: 503",
    "fetch failed",
    "Container is starting. Please retry in a moment.",
    "ENOENT: no such file or directory",
    "npm ERR! Test failed",
    { name = "ContainerUnavailableError", message = "no container instance that can be provided" },
    { name = "TypeError", message = "x is not a function" },
  },
}

-- A booting container: nothing ran; re-send once after timeouts container_starting.retry_after_ms.
container_starting = rule {
  texts = { "Container is starting" },
  matches = {
    "Container is starting. Please retry in a moment.",
    { name = "Error", message = "Error: Container is starting. Please retry in a moment." },
  },
  rejects = {
    "Failed to create session: 503",
    "Session terminated",
    "The sandbox container stopped while the operation was pending.",
    "Command execution failed",
    "container started",
    "",
  },
}

-- An in-body error that is PRESENT but empty is the Worker's failure shape with its text
-- missing: infra, never a command exit. (A success body has no error key at all.)
empty_error = rule {
  patterns = { "^%s*$" },
  matches = { "", "   ", "\n\t " },
  rejects = { "Command execution failed", "x", " fleet-busy " },
}

-- A resident's named "runtime replaced" answer (a deploy swapped the isolate under one
-- command): ordinary output the first time; infra once it repeats with no success between.
runtime_replaced = rule {
  codes = { "runtime-replaced", "RUNTIME_REPLACED" },
  patterns = { "runtime[ %-]replaced" },
  matches = {
    { code = "runtime-replaced", message = "the resident was redeployed under this command" },
    "resident runtime replaced under the command; run it again",
    "runtime-replaced: the isolate was swapped by a deploy",
  },
  rejects = {
    "Command execution failed",
    "Session terminated",
    "exit 1",
    { code = "CONTAINER_UNAVAILABLE" },
  },
}
runtime_replaced_infra_after = 2   -- this many in a row (no success between) is infra

-- Span error codes (tracing): what kind of failure ended an exec.* span.
span_codes = {
  timeout = "timeout",                      -- the request's deadline fired
  http = "http {status}",                   -- a non-200 answer, or a GitHub API failure
  inbody = "infra",                         -- an in-body exec error
  attach = "infra/attach",                  -- the worktree was still gone after a re-attach
  runtime_replaced = "infra/runtime-replaced", -- a repeated runtime replacement
}

-- What people and the model read. {name} placeholders are filled in; an unknown placeholder
-- is refused at load.
messages = {
  no_output = "(no output)",
  thrown_no_message = "sandbox exec failed with no message from the SDK ({detail}); the container may still be running a previous image while a Worker/image rollout is in progress — retry in a minute",
  thrown_no_name = "no error name",
  empty_error = "sandbox exec failed: the sandbox answered with an empty error (its failure text was lost); the sandbox may be restarting — retry in a minute",
  recycled_mid_command = "sandbox recycled mid-command after {seconds}s — the container was replaced and /workspace is empty; re-clone before continuing ({original})",
  fleet_busy_answer = "fleet-busy: no free per-thread sandbox — the fleet's max_instances is reached; nothing ran, so the same request can be sent again ({cause})",
  capacity = "sandbox fleet busy — no free per-thread sandbox after waiting {seconds}s (the fleet's max_instances is reached); try again in a few minutes",
  fleet_busy_tool = "⏳ Sandbox fleet busy — {message}. Retry the command in a minute or finish with what you have.",
  timeout = "command timed out in the {where} after {seconds}s (the command's limit, {limit_ms} ms); if it needs longer, pass a larger timeoutMs (up to {max_ms})",
  clipped = "[timeout clipped to {seconds}s: the run has {remaining_s}s left and keeps {reserve_s}s in reserve]",
  run_exhausted = "run budget exhausted: {remaining_s}s of the run left, inside its {reserve_s}s reserve — not starting a command that cannot finish; finish with what you have",
  no_answer = "{who} {route} gave no answer within {total_s}s (command budget {budget_s}s + {margin_s}s margin) — the sandbox may be gone; the command may still be running in it",
  stopped = "[stopped: {reason} — the command was killed]",
  truncated = "[output truncated: {stream} passed {limit} bytes; the rest was dropped]",
  server_failure = "sandbox exec failed: {detail}",
  server_stopped = "The sandbox container stopped while the operation was pending. (sandboxd was shut down and killed the command after its {drain_s}s drain; the workspace is gone)",
  transport_failed = "{who} {route} request failed ({detail}) — the sandbox may be gone; the command may still be running in it",
  not_connected = "{who} {route}: nothing ran — no connection could be made ({detail}), so the request was never sent; start the sandboxd there or correct the URL, then send it again",
  http_status = "{who} {route} answered HTTP {status}: {detail}",
  bad_answer = "{who} {route} answered with something other than the protocol's JSON document ({detail})",
  null_executor = "tool {tool} needs a workspace, but agent {agent} declares no repository — a wiring bug: give the agent resources.repository in policies/agents.lua or drop the tool",
}
