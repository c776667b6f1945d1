-- `switchboard version`: the build stamp (docs/contract.md#build-stamp), taken from the tree at build time.
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")

local M = {
  name = "version",
  summary = "print the build stamp (commit, build time)",
  help = [[
Usage: switchboard version [--json]

Prints the commit the binary was built from ("-dirty" when the tree had uncommitted
changes) and when it was built. A build made outside a git checkout says "unknown" and
carries no build time.

Options:
  --json    one JSON document: {"commit": "...", "builtAt": "..."}

Examples:
  switchboard version
  switchboard version --json | jq -r .commit
]],
}

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = { json = "flag" }, usage = function(p)
    if #p.words > 0 then return ("unexpected %q (see --help)"):format(p.words[1]) end
  end })
  if not p then return status end
  local opts = p.opts
  local build = core.build
  if opts.json then
    io.stdout:write(core.json.encode({ commit = build.commit, builtAt = build.built_at }), "\n")
  else
    io.stdout:write("switchboard ", build.commit,
      build.built_at and (" built " .. build.built_at) or "", "\n")
  end
  return 0
end

return M
