-- The repository speaks for itself: code, tests and docs cite docs/contract.md by anchors that
-- exist, and nothing points at files outside the repository.
local files = require("support.files")

local function tracked(patterns)
  local out = {}
  local p = io.popen("git ls-files -- " .. patterns .. " 2>/dev/null")
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

-- Every tracked text a reader meets (cmake/ and deploy/ included), matched case-blind: "Seed
-- item 5" is as much a citation of a file outside the repository as "seed item 5".
local SOURCES = "lua src tests docs policies bench scripts cmake deploy .ci README.md ARCHITECTURE.md CMakeLists.txt"

describe("docs/contract.md", function()
  local contract = assert(files.read("docs/contract.md"))
  local anchors = {}
  for id in contract:gmatch('<a id="([%w%-]+)"></a>') do anchors[id] = true end

  it("has the stable sections the code cites", function()
    for _, id in ipairs({ "workspaces", "timeouts", "timeout-clamp", "timeout-exit-124", "timeout-run-clip",
                          "timeout-send-deadline", "hard-stop", "wire-protocol", "failure", "failure-shape",
                          "failure-infra", "failure-recycle", "capacity", "credentials", "credential-transport",
                          "credential-freshness", "provisioning", "rollout", "build-stamp", "tracing" }) do
      assert(anchors[id], "docs/contract.md has no anchor " .. id)
    end
  end)

  it("every docs/contract.md#anchor cited in the tree exists", function()
    local list = tracked(SOURCES)
    if #list == 0 then pending("not a git checkout") return end
    local missing = {}
    for _, path in ipairs(list) do
      local text = path == "tests/lua/docs_spec.lua" and "" or files.read(path) or ""
      for id in text:gmatch("contract%.md#([%w%-]+)") do
        if not anchors[id] then missing[#missing + 1] = path .. ": #" .. id end
      end
    end
    assert(#missing == 0, "cited anchors that do not exist:\n" .. table.concat(missing, "\n"))
  end)

  it("nothing cites a file that is not in the repository", function()
    local list = tracked(SOURCES)
    if #list == 0 then pending("not a git checkout") return end
    local found = {}
    for _, path in ipairs(list) do
      if path ~= "tests/lua/docs_spec.lua" then
        local text = files.read(path) or ""
        local lower = text:lower()
        for _, pat in ipairs({ "seed items?%s+%d", "design%.md", "%.%./shared/", "reference%.md" }) do
          local at = lower:find(pat)
          if at then found[#found + 1] = ("%s: %q"):format(path, text:sub(at, at + 30)) end
        end
      end
    end
    assert(#found == 0, "citations of files outside the repository:\n" .. table.concat(found, "\n"))
  end)
end)
