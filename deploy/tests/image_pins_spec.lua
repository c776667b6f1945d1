-- The sandbox image's pins (issue 14 item 3): a version or the base tag that floats fails the
-- suite. Reads deploy/sandbox/Containerfile as text; the build itself asserts the same pins
-- against what it installed (its "Every pin, asserted" step), this spec keeps them exact.
local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local SRC = read("deploy/sandbox/Containerfile")
-- The Containerfile with its continuation lines joined, comments dropped.
local function instructions(src)
  local out = {}
  for line in (src:gsub("\\\n", " ")):gmatch("[^\n]+") do
    if not line:match("^%s*#") then out[#out + 1] = line end
  end
  return out
end

local function args(src)
  local a = {}
  for _, line in ipairs(instructions(src)) do
    local name, value = line:match("^ARG%s+([%w_]+)=(%S*)")
    if name then a[name] = value end
  end
  return a
end

local function check_pins(src)
  local problems = {}
  local function bad(why) problems[#problems + 1] = why end
  local ins = instructions(src)
  local from = {}
  for _, line in ipairs(ins) do
    local image = line:match("^FROM%s+(%S+)")
    if image then from[#from + 1] = image end
  end
  if #from ~= 1 then bad("want exactly one FROM, got " .. #from) end
  local base = from[1] or ""
  if not (base == "debian:bookworm-slim" or base:match("^debian:bookworm%-slim@sha256:%x+$")) then
    bad("the base floats or is not Debian 12 slim: FROM " .. base)
  end
  local a = args(src)
  local versions = 0
  for name, value in pairs(a) do
    if name:match("_VERSION$") then
      versions = versions + 1
      if value == "" or value:find("[%*%?%[%]%$]") or value:lower():match("latest") or value:lower():match("lts") then
        bad(name .. " is not an exact version: " .. value)
      end
    end
  end
  for _, npm in ipairs({ "NODE", "NPM", "PNPM" }) do
    local v = a[npm .. "_VERSION"]
    if not (v and v:match("^%d+%.%d+%.%d+$")) then bad(npm .. "_VERSION must be an exact x.y.z: " .. tostring(v)) end
    local integrity = a[npm .. "_INTEGRITY"]
    if not (integrity and integrity:match("^sha512%-[%w+/]+=*$") and #integrity == 95) then
      bad(npm .. "_INTEGRITY must be the registry's sha512 integrity")
    end
  end
  local node_major = tonumber((a.NODE_VERSION or ""):match("^(%d+)%."))
  if not node_major or node_major < 22 then bad("Node must be 22 or newer: " .. tostring(a.NODE_VERSION)) end
  -- every apt package on the install line names its pin, and the assertion step checks it
  local joined = src:gsub("\\\n", " ")
  local install = joined:match("apt%-get install %-y %-%-no%-install%-recommends%s+([^&]+)&&")
  if not install then bad("no apt-get install --no-install-recommends line") ; return problems end
  local asserted = joined:match("for p in ([^;]+); do") or ""
  for word in install:gmatch("%S+") do
    local pkg, pin = word:match('^([%w%.%-+]+)="%$([%w_]+)"$')
    if not pkg then
      bad("apt package without an exact pin: " .. word)
    elseif not a[pin] then
      bad(pkg .. " names " .. pin .. ", which no ARG sets")
    elseif not asserted:find(pkg .. ":$" .. pin, 1, true) then
      bad(pkg .. " is pinned but not asserted after the install")
    end
  end
  for _, tool in ipairs({ 'want node "v$NODE_VERSION"', 'want npm "$NPM_VERSION"', 'want pnpm "$PNPM_VERSION"' }) do
    if not joined:find(tool, 1, true) then bad("the build does not assert: " .. tool) end
  end
  if versions < 8 then bad("fewer pins than the toolchains need: " .. versions) end
  return problems
end

describe("the sandbox image's pins", function()
  it("are exact, asserted at build time, on a Debian 12 slim base", function()
    assert.same({}, check_pins(SRC))
  end)

  it("fail on a floating base tag, a loose version, an unpinned package or an unasserted pin", function()
    local cases = {
      { "FROM debian:bookworm-slim", "FROM debian:stable-slim", "base floats" },
      { "FROM debian:bookworm-slim", "FROM debian:latest", "base floats" },
      { "ARG GIT_VERSION=1:2.39.5-0+deb12u3", "ARG GIT_VERSION=1:2.39.*", "GIT_VERSION is not an exact" },
      { "ARG NODE_VERSION=22.23.5", "ARG NODE_VERSION=22", "NODE_VERSION must be an exact" },
      { "ARG NODE_VERSION=22.23.5", "ARG NODE_VERSION=20.19.0", "Node must be 22" },
      { 'gh="$GH_VERSION"', "gh", "without an exact pin: gh" },
      { "docker.io:$DOCKER_IO_VERSION", "docker.io:x", "docker.io is pinned but not asserted" },
      { 'want pnpm "$PNPM_VERSION"', "true", "does not assert: want pnpm" },
    }
    for _, c in ipairs(cases) do
      local from, to, expect = c[1], c[2], c[3]
      local start = assert(SRC:find(from, 1, true), "the Containerfile no longer has: " .. from)
      local mutated = SRC:sub(1, start - 1) .. to .. SRC:sub(start + #from)
      local problems = table.concat(check_pins(mutated), "\n")
      assert.truthy(problems:find(expect, 1, true), ("%s → %s: want %q in:\n%s"):format(from, to, expect, problems))
    end
  end)

  it("installs the Docker engine and iptables without recommends, drops the lists in that layer, and the wrapper as docker", function()
    local joined = SRC:gsub("\\\n", " ")
    local apt = joined:match("RUN apt%-get update[^\n]*docker%.io[^\n]*")
    assert.truthy(apt, "no apt layer with docker.io")
    assert.truthy(apt:find("--no-install-recommends", 1, true))
    assert.truthy(apt:find('iptables="', 1, true))
    assert.truthy(apt:find("rm -rf /var/lib/apt/lists/*", 1, true))
    assert.truthy(SRC:find("COPY docker-wrapper.sh /usr/local/bin/docker", 1, true))
    assert.truthy(SRC:find('[ "$(command -v docker)" = /usr/local/bin/docker ]', 1, true))
  end)

  it("runs switchboard sandboxd from the package as the entrypoint, with a HEALTHCHECK and no secret baked in", function()
    assert.truthy(SRC:find("apt-get install -y --no-install-recommends /tmp/switchboard.deb", 1, true))
    local entry = SRC:gsub("\\\n", " "):match("ENTRYPOINT%s+(%b[])")
    assert.truthy(entry and entry:find('"sandboxd"', 1, true), entry)
    assert.truthy(SRC:find("\nHEALTHCHECK ", 1, true))
    assert.falsy(SRC:find("SANDBOX_TOKEN=", 1, true))
  end)
end)
