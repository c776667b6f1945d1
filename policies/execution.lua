-- Where agents' commands run. Only agents that declare resources.repository get a backend;
-- the others get the null executor whatever is set here.
--   "local"     a per-thread workspace on this host (development)
--   "sandbox"   a per-thread instance of `switchboard sandboxd` (url and token below)
--   "resident"  a warm resident environment when the repository is onboarded and warm,
--               else the per-thread sandbox with a note saying why
--   "e2b"       an E2B micro-VM
backend = { default = "local" }
-- backend.review = "sandbox"      -- per agent

-- Each backend's configuration comes from the bot's environment; these name the variables.
sandbox = { url_env = "SANDBOX_URL", token_env = "SANDBOX_TOKEN" }
-- Not provided by this build: an agent the policy sends to "resident" runs on a fresh
-- sandbox with a note (exec/factory.lua). Kept so a policy naming it still loads.
resident = { url_env = "RESIDENT_URL", token_env = "RESIDENT_TOKEN" }
-- e2b: the API key's variable; the sandbox template; the directory commands run in and file
-- paths are relative to (E2B_API_URL, E2B_DOMAIN, E2B_SANDBOX_URL, E2B_DEBUG: docs/e2b.md).
e2b = { api_key_env = "E2B_API_KEY", template = "base", workdir = "/home/user" }

-- A backend chosen but not configured is refused with this text (never a silent fallback to
-- this host). {agent}, {backend}, {setting} are filled in.
missing = "agent {agent} runs on the {backend} backend, but {setting} is not set — set it in the bot's environment, or choose another backend in policies/execution.lua"

-- The environment every command starts from. pass: copied from the bot's environment when set;
-- set: fixed values. The bot's own credentials (tokens, keys, secrets) are never passed — the
-- loader refuses such names; GitHub credentials are resolved per command instead.
child_env = {
  pass = { "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM" },
  set = {},
}

-- Which backend an agent's commands run on. ctx = {agent = "coding", repo = "owner/name"?};
-- policy = this file's settings. Must return "local", "sandbox", "resident" or "e2b". Runs under
-- an instruction budget; a failure falls back to the shipped version of this function.
function choose_backend(ctx, policy)
  return policy.backend[ctx.agent] or policy.backend.default
end
