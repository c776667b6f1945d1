-- The kinds a core.error may have (docs/engine.md "Errors"): one list, so a reader knows every
-- failure a caller may have to tell apart, and a new kind is a decision, not a typo.
-- tests/lua/layering_spec.lua fails on a kind written in the tree (lua/, policies/, src/) that
-- is not here, and on a kind here that nothing writes any more.
--
-- A fired abort signal is always "aborted" (the engine's own kind: core.sleep, core.http,
-- core.spawn's result), whoever gives up because of it; the words of a run that ends that way
-- ("stopped") are a run's end state, not an error kind.
return {
  -- the engine's (src/)
  aborted = "an abort signal fired: the caller gave up, nothing failed",
  timeout = "a deadline passed before an answer",
  transport = "the connection failed or the peer's bytes could not be read",
  refused_address = "an HTTP request to an address the caller may not reach was not sent",
  spawn = "a process could not be started",
  listen = "a server could not listen on its address",
  crypto = "a key, signature or cipher operation failed",
  nomem = "the engine ran out of memory for a buffer",
  store = "the thread's record (SQLite) failed",
  io = "a file or stream could not be read or written",
  escape = "a path that leaves its confined root",
  not_found = "no such file, route or object",
  not_a_file = "a path that is not a regular file",
  too_large = "past a size limit",
  invalid = "input that is not what the caller must send (bad JSON, a bad field)",
  -- the executors' (exec/errors.lua)
  infra = "the backend failed; the command may or may not have run",
  capacity = "the backend is full; ask again later",
  tool = "the tool's input cannot be acted on; the model's to read and fix",
  refused = "a command refused before it started (budget, fleet)",
  retry = "a step to try again in another way (a Kubernetes claim, a Vertex token)",
  closed = "the server or thread is shutting down or detached",
  workspace = "the thread's workspace or instance cannot be made or used",
  walls = "the host's walls cannot be set up",
  -- the agent's
  bad_event = "a model stream event that cannot be read",
  budget = "the run's time or token budget ran out",
  spend = "the spend limit was reached",
  too_long = "the conversation is past the model's context",
  fatal = "the model API refused in a way retrying cannot fix",
  exhausted = "the model API failed every retry",
  empty = "a model answer with no text where text was needed",
  no_key = "no credential for the model provider",
  input = "a tool's input the model must correct",
  mcp_server = "an MCP server failed or broke its protocol",
  git = "a git command failed",
  github = "the GitHub API refused or failed",
  credential = "no GitHub credential of the scope needed",
  protected = "a push to a protected branch",
  conflict = "a push the branch on GitHub has moved past",
  push_refused = "a push GitHub refused for another reason",
  internal = "a bug, caught at the run's one catch",
  malformed = "an ask the parser cannot read",
  -- fronts, commands, servers
  slack = "Slack's API refused or failed",
  rate_limited = "Slack's rate limit (Retry-After)",
  protocol = "a peer broke its protocol (Socket Mode)",
  config = "a configuration that cannot be used",
  usage = "a command line that cannot be used",
  unavailable = "a service the command needs cannot be reached",
  secrets = "the repository secrets file cannot be used",
  host_tool = "a host tool the resident needs is missing or failed",
  install = "a repository's install step failed",
}
