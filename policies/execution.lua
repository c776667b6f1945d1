-- Where agents' commands run. Only agents that declare resources.repository get a backend;
-- the others get the null executor whatever is set here.
--   "local"     a per-thread workspace on this host (development)
--   "sandbox"   a per-thread instance of `switchboard sandboxd` (url and token below)
--   "resident"  a warm resident environment when the repository is onboarded and warm,
--               else the per-thread sandbox with a note saying why
--   "e2b"       an E2B micro-VM
--   "kubernetes" a pod of its own per thread, claimed from an agent-sandbox warm pool
-- backend.default "local" is this host — unless a sandbox is configured (SANDBOX_URL and
-- SANDBOX_TOKEN set, as the package's bot.env does): then agents not named below run in the
-- sandbox; or, without SANDBOX_URL, in a cluster with agent-sandbox (SANDBOX_TOKEN and a service
-- account or KUBECONFIG): then they run in pods (choose_backend at the end of this file). The local executor is walled for every
-- front that serves other people (policies/isolation.lua local_walls).
backend = { default = "local" }
-- backend.review = "sandbox"      -- per agent: always this backend

-- Each backend's configuration comes from the bot's environment; these name the variables.
sandbox = { url_env = "SANDBOX_URL", token_env = "SANDBOX_TOKEN" }
-- resident: base_url (or the variable url_env names) and the bearer in token_env. A repository
-- agent whose resident is not warm falls back to `fallback` (the per-thread backend) with a
-- note. install: the first row whose file the checkout has gives the command run once at
-- onboarding (and after a fetch that changes the file); deps are copied into each thread's
-- repository (copy-on-write where the file system can).
resident = {
  url_env = "RESIDENT_URL", token_env = "RESIDENT_TOKEN",
  -- base_url = "http://127.0.0.1:8090",
  fallback = "sandbox",
  install = {
    { file = "pnpm-lock.yaml", command = "pnpm install --frozen-lockfile", deps = { "node_modules" } },
    { file = "package-lock.json", command = "npm ci", deps = { "node_modules" } },
    { file = "yarn.lock", command = "yarn install --frozen-lockfile", deps = { "node_modules" } },
    { file = "requirements.txt", command = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt", deps = { ".venv" } },
  },
}
-- e2b: the API key's variable; the sandbox template; the directory commands run in and file
-- paths are relative to (E2B_API_URL, E2B_DOMAIN, E2B_SANDBOX_URL, E2B_DEBUG: docs/e2b.md).
e2b = { api_key_env = "E2B_API_KEY", template = "base", workdir = "/home/user" }
-- kubernetes: a pod per thread, claimed from an agent-sandbox warm pool (docs/deploy.md
-- "Kubernetes with agent-sandbox"). The API server and credentials: the pod's service account,
-- else the kubeconfig (JSON) the variable kubeconfig_env names; namespace: this one, else the
-- service account's or the kubeconfig's. sandboxd in the pods listens on port and takes the
-- bearer in token_env.
-- workspace_size: the thread's workspace is kept on a volume of this size across the pod's
-- sleep (a PersistentVolumeClaim per thread, of storage_class or the cluster's default; deleted
-- record.retention_ms after the thread's last pod slept); remove it to keep none — the card
-- then says so.
kubernetes = { token_env = "SANDBOX_TOKEN", kubeconfig_env = "KUBECONFIG", warm_pool = "switchboard", port = 8080,
  workspace_size = "5Gi" }

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

-- Which backend an agent's commands run on. ctx = {agent = "coding", repo = "owner/name"?,
-- front = "slack" | "console" | "exec"?, configured = {sandbox = true, resident = false, e2b =
-- false, ["local"] = true}? (whose variables are set in this process)}; policy = this file's
-- settings. Must return "local", "sandbox", "resident", "e2b" or "kubernetes". Runs under an instruction
-- budget; a failure falls back to the shipped version of this function.
function choose_backend(ctx, policy)
  local named = policy.backend[ctx.agent]
  if named then return named end
  if policy.backend.default == "local" and ctx.configured and ctx.configured.sandbox then
    return "sandbox"
  end
  -- in a cluster with agent-sandbox (a service account or kubeconfig, and sandboxd's bearer)
  if policy.backend.default == "local" and ctx.configured and ctx.configured.kubernetes then
    return "kubernetes"
  end
  return policy.backend.default
end
