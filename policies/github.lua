-- GitHub credential scopes. An agent's token_scope (policies/agents.lua) names one of these.
-- Tokens are minted per scope and cached in separate slots.
scopes = {}

-- The read scope: exactly what a readonly agent needs to clone, read PRs, issues and CI, and
-- nothing it could write with. Every value must be "read". GitHub refuses a mint that asks for
-- a permission the App does not hold, so every name here must be in the App's grant.
-- Not requested on purpose: statuses (Actions reports through check-runs) and workflows.
scopes.read = {
  permissions = {
    contents = "read",
    pull_requests = "read",
    issues = "read",
    actions = "read",
    checks = "read",
    metadata = "read",
  },
}

-- The write scope: no permissions restriction — the installation's full grant.
scopes.write = {}

-- Every call to the GitHub API (installation lookup, mint) gives up after this long and the
-- command that needed the token fails naming the endpoint.
request_timeout_ms = 10 * second

-- Where an agent run clones a repository named in an ask ({repo} = OWNER/REPO). GitHub
-- Enterprise Server: "https://ghe.example.com/{repo}.git". The credential never goes in it:
-- git gets GH_TOKEN from the command's environment through a credential helper.
clone_url = "https://github.com/{repo}.git"
