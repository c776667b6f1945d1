-- A walled sandboxd killed with SIGKILL leaves what its stop would have removed: its bridge(s)
-- (sb<hex>b<k>), the host ends of its instances' veth pairs (sb<hex>-<slot>) and its nftables
-- table (inet switchboard_<hex>), <hex> from its --root (shell/bridge.lua names). The next start
-- of a sandboxd on that root removes them whatever policies/isolation.lua outbound now says
-- (shell/bridge.lua sweep; docs/isolation.md "Outbound through a bridge") — here a restart with
-- outbound "pasta", which makes no bridge of its own — and never a name of another root's.
-- Everything happens in a network namespace this spec makes (sandboxd runs in it through
-- nsenter); the host's own links and tables are never looked at but to check none is ours.
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")
local bridge = require("switchboard.shell.bridge")

local UID_BASE = require("support.walls").private_uid_base(64)
local UID_COUNT = 64

local function policy_dir(outbound)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      -- small workspaces: the spare instance holds its whole image of the host's disk
      return src .. ("\nuid_base = %d\nuid_count = %d\nworkspace_max_bytes = 64 * MiB\noutbound = %q\n"):format(
        UID_BASE, UID_COUNT, outbound)
    end,
  }
end

-- Whether this kernel gives the walls (support/walls.lua): one real sandboxd start answers it.
local describe_walls = require("support.walls").probe(policy_dir("pasta"),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- A network namespace of the spec's own, held by a sleeping process: its links and tables go
-- with it when that process is killed. A veth pair (d0 with an address and a default route)
-- is the "host's" outside (pasta copies it into an instance; nothing is reached through it here).
local function namespace()
  local out = ""
  local proc = assert(core.spawn{ argv = { "unshare", "--net", "--", "sh", "-c", table.concat({
    "ip link set lo up", "ip link add d0 type veth peer name d1", "ip addr add 198.51.100.1/24 dev d0",
    "ip link set d0 up", "ip link set d1 up",
    "ip route add default via 198.51.100.254 dev d0", "echo up", "exec sleep 100000" }, " && ") },
    env = { PATH = os.getenv("PATH") }, on_output = function(_, c) out = out .. c end })
  assert(S.wait_for(function() return out:find("up", 1, true) or proc.result end, 30000), out)
  local ns = { proc = proc, path = "/proc/" .. proc.pid .. "/ns/net" }
  function ns.run(cmd)
    local text = ""
    local p = assert(core.spawn{ argv = { "nsenter", "--net=" .. ns.path, "--", "sh", "-c", cmd },
      env = { PATH = os.getenv("PATH") }, on_output = function(_, c) text = text .. c end })
    local r = p:wait()
    return text, r.exit
  end
  -- the names of its links (without the @peer suffix of a veth)
  function ns.links()
    local names = {}
    for name in ns.run("ip -o link show"):gmatch("\n?%d+: ([^:@%s]+)") do names[#names + 1] = name end
    return names
  end
  function ns.tables() return ns.run("nft list tables") end
  function ns.close() if not proc.result then proc:kill("KILL"); proc:wait() end end
  return ns
end

-- The links of `links` that are the server's `name` (sb<hex>): its bridges and its ports.
local function servers(links, name)
  local out = {}
  for _, l in ipairs(links) do
    if l:match("^" .. name .. "b%d+$") or l:match("^" .. name .. "%-%d+$") then out[#out + 1] = l end
  end
  table.sort(out)
  return out
end

describe_walls("a walled sandboxd killed with SIGKILL", function()
  it("leaves its bridge, ports and table; the next start on its root removes them even with outbound pasta, and not another root's", function()
    core.run(function()
      local ns = namespace()
      finally(function() os.execute(("kill -KILL %d 2>/dev/null"):format(ns.proc.pid)) end) -- the holder this spec started
      local root = core.fs.realpath(S.tmpdir())
      local name, tbl = bridge.names(root)
      local other, other_tbl = bridge.names(root .. "-another")
      -- another server's (another root's) bridge and table in the same namespace
      local _, made = ns.run(("ip link add %sb0 type bridge && nft add table inet %s"):format(other, other_tbl))
      assert.equal(0, made)

      local h = S.start_sandboxd{ policies = policy_dir("bridge"), root = root,
        wrap = { "nsenter", "--net=" .. ns.path, "--" } }
      -- its bridge at start; the spare instance (built ahead) has its port on it
      assert(S.wait_for(function() return #servers(ns.links(), name) >= 2 end, 120000),
        "no bridge and spare's port: " .. table.concat(ns.links(), " ") .. "\n" .. h.log())
      assert.truthy(ns.tables():find("table inet " .. tbl .. "\n", 1, true))

      h:stop("KILL"); h:wait()
      -- what it made stays behind (its stop never ran): the bridge, and the spare's port until the
      -- kernel tears the spare's namespace down (its processes died with the server's cgroups)
      local left = servers(ns.links(), name)
      assert.truthy(table.concat(left, " "):find(name .. "b0", 1, true), table.concat(left, " "))
      assert.truthy(ns.tables():find("table inet " .. tbl .. "\n", 1, true))
      -- a bridge of a larger uid_count than the next start's (its 6th /22): the sweep lists, not counts
      assert.equal(0, select(2, ns.run(("ip link add %sb5 type bridge"):format(name))))

      local again = S.start_sandboxd{ policies = policy_dir("pasta"), root = root,
        wrap = { "nsenter", "--net=" .. ns.path, "--" } }
      assert.same({}, servers(ns.links(), name))
      assert.is_nil(ns.tables():find("table inet " .. tbl .. "\n", 1, true))
      local swept = again.log():match("walls%.bridge_swept[^\n]*")
      assert.truthy(swept and swept:find(name .. "b0", 1, true) and swept:find(name .. "b5", 1, true)
        and swept:find("inet " .. tbl, 1, true), again.log())
      -- another root's are not its to remove
      assert.same({ other .. "b0" }, servers(ns.links(), other))
      assert.truthy(ns.tables():find("table inet " .. other_tbl .. "\n", 1, true))
      again:stop(); again:wait()

      ns.close()
      -- nothing of either root reached the host's own namespace
      local host_links = ""
      local p = assert(core.spawn{ argv = { "ip", "-o", "link", "show" }, env = { PATH = os.getenv("PATH") },
        on_output = function(_, c) host_links = host_links .. c end })
      p:wait()
      assert.is_nil(host_links:find(name, 1, true))
      assert.is_nil(host_links:find(other, 1, true))
    end)
  end)
end)
