-- Outbound network through a bridge (issue 43; docs/isolation.md "Outbound through a bridge"):
-- where sandboxd is root of the host's user namespace, its instances with network "host" get a
-- veth pair on one bridge of the server's, with nftables rules, instead of a pasta process each.
-- This decides whether (policies/isolation.lua outbound), the names, the addresses and the
-- rules; the walls helper (src/walls/bridge.c) speaks netlink, `nft` loads the rules.
--
--   local b, why = bridge.open{iso, root, helper, path, bounds, log}  -- at the server's start:
--                       b (the bridge made), or nil with why (pasta then: the caller decides)
--   b:port_spec(slot) → "BRIDGE,PORT,ADDR/PREFIX,GATEWAY" (the helper's --bridge-port)
--
-- A Linux bridge holds at most 1,024 ports (BR_MAX_PORTS; the 1,025th is refused "Exchange
-- full"), so the instances are spread over bridges of PER_BRIDGE each: bridge k is the k-th /22
-- of bridge_subnet (.1 its address, instance j of it .2 + j), made at start for k = 0 and by the
-- first instance that needs it for the others (src/walls/bridge.c bridge_ensure).
--   b:close()           the bridge and the table removed (the next open also removes a kill -9's)
--   bridge.sweep{root, helper, path, deadline_ms} → names removed | nil, why   at a server's
--                       start, whatever its outbound: what a killed server of the same root left
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

local CHUNK = 1024     -- addresses per bridge: a /22
local PER_BRIDGE = 1021 -- its instances: .2 to .1022 (.1 the bridge's, .1023 the broadcast)
M.PER_BRIDGE = PER_BRIDGE

local Bridge = {}
Bridge.__index = Bridge

-- Why no bridge (the caller falls back to pasta, or refuses to start when policy says "bridge").
local function refused(message) return core.error("walls", message) end

local function ip_int(text)
  local a, b, c, d = text:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
  if not (a and a < 256 and b < 256 and c < 256 and d < 256) then return nil end
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function ip_text(n)
  return ("%d.%d.%d.%d"):format(n >> 24 & 255, n >> 16 & 255, n >> 8 & 255, n & 255)
end

-- "A.B.C.D/P" → network (as an integer, host bits cleared), prefix; nil when it is not one.
local function cidr(text)
  local addr, prefix = text:match("^([%d.]+)/(%d+)$")
  local n, p = addr and ip_int(addr), tonumber(prefix)
  if not n or not p or p < 1 or p > 30 then return nil end
  local mask = (0xffffffff << (32 - p)) & 0xffffffff
  return n & mask, p
end
M.cidr = cidr

-- The IPv4 name servers an instance's /etc/resolv.conf names (the rootfs's): the one place an
-- instance may reach inside the refused ranges, on port 53 only (a cloud's resolver is private
-- or link-local). A loopback resolver (systemd-resolved's 127.0.0.53) is the instance's own
-- loopback inside: no DNS there, as with pasta.
function M.resolvers(rootfs)
  local text = core.fs.read_file((rootfs == "/" and "" or rootfs) .. "/etc/resolv.conf") or ""
  local out = {}
  for addr in text:gmatch("\n?%s*nameserver%s+([%d.]+)") do
    if ip_int(addr) and not addr:match("^127%.") then out[#out + 1] = addr end
  end
  return out
end

-- The nftables table: nothing from the bridge reaches the host itself (any of its addresses, on
-- any interface — input), nor another instance, nor IPv6, nor a refused range but the name
-- servers on port 53; the rest is forwarded and masqueraded. A host that did not forward
-- before keeps not forwarding anything else. "add; delete; table" replaces a kill -9's
-- leftover in the same transaction.
function M.rules(b, refused, resolvers, forwarding_was_off)
  local br, lines = ('"%s*"'):format(b.name), {} -- every bridge of the server (and its ports)
  local function add(s) lines[#lines + 1] = s end
  add(("add table inet %s\ndelete table inet %s\ntable inet %s {"):format(b.table, b.table, b.table))
  add("  chain input {\n    type filter hook input priority filter - 10; policy accept;")
  add("    iifname " .. br .. " drop\n  }")
  add("  chain forward {\n    type filter hook forward priority filter - 10; policy accept;")
  add("    iifname " .. br .. " oifname " .. br .. " drop")
  add("    iifname " .. br .. " meta nfproto ipv6 drop")
  add("    iifname " .. br .. " ip saddr != " .. b.subnet .. " drop")
  for _, r in ipairs(resolvers) do
    add(("    iifname %s ip daddr %s udp dport 53 accept"):format(br, r))
    add(("    iifname %s ip daddr %s tcp dport 53 accept"):format(br, r))
  end
  if #refused > 0 then
    add(("    iifname %s ip daddr { %s } drop"):format(br, table.concat(refused, ", ")))
  end
  add("    iifname " .. br .. " accept")
  add("    oifname " .. br .. " ct state established,related accept")
  add("    oifname " .. br .. " drop")
  if forwarding_was_off then add("    drop") end
  add("  }")
  add("  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;")
  add(("    ip saddr %s oifname != %s masquerade\n  }\n}"):format(b.subnet, br))
  return table.concat(lines, "\n") .. "\n"
end

-- Whether this process is root of the host's user namespace (in one of its own — a pod with
-- hostUsers: false — the host's network is not its to change).
local function host_root()
  local map = core.fs.read_file("/proc/self/uid_map") or ""
  return map:match("^%s*0%s+0%s+4294967295%s*$") ~= nil
end

local function has_nft(path)
  for dir in path:gmatch("[^:]+") do
    if core.fs.exists(dir .. "/nft") then return true end
  end
  return false
end

-- Whether this process may make a bridge: root of the host's user namespace, and nft installed.
local function able(path)
  if not host_root() then return nil, refused("sandboxd is not root of the host's user namespace") end
  if not has_nft(path) then return nil, refused("nft is not installed (apt-get install nftables)") end
  return true
end

-- A server's names, from its --root: its bridges sb<hex>b<k>, its ports sb<hex>-<slot>, its
-- nftables table switchboard_<hex> (six hex digits of the root's hash: another root, others).
function M.names(root)
  local hex = core.crypto.hex(core.crypto.sha256(root or "")):sub(1, 6)
  return "sb" .. hex, "switchboard_" .. hex
end

local function said(r)
  return ((r and (r.stderr or "") or ""):gsub("^%s+", ""):gsub("%s+$", ""))
end

-- opts: iso (the snapshot's isolation), root (the server's --root: names the bridge, so the
-- next start finds a kill -9's), helper, path, deadline_ms, scratch (a 0700 directory for the
-- rules file), uid_count (addresses needed).
function M.open(opts)
  local iso = opts.iso
  if iso.outbound == "pasta" then return nil, refused("policies/isolation.lua outbound is \"pasta\"") end
  local ok, why = able(opts.path)
  if not ok then return nil, why end
  local b, why = M.plan(iso, opts.root, opts.uid_count)
  if not b then return nil, why end
  b.helper, b.path, b.deadline_ms = opts.helper, opts.path, opts.deadline_ms
  local down = b:down()
  local up = down and down.exit == 0 and run.tool{ argv = { opts.helper, "bridge-up", "--bridge", b.name .. "b0",
    "--address", ip_text(b.net + 1) .. "/22" }, env = { PATH = opts.path }, deadline_ms = opts.deadline_ms }
  if not up or up.exit ~= 0 then return nil, refused("the bridge could not be made: " .. said(up or down)) end
  local rules = opts.scratch .. "/bridge.nft"
  local wrote = core.fs.write_file(rules, M.rules(b, iso.bridge_refused, M.resolvers(iso.rootfs),
    (up.stdout or ""):find("was-off", 1, true) ~= nil), tonumber("600", 8))
  local nft = wrote and run.tool{ argv = { "nft", "-f", rules }, env = { PATH = opts.path }, deadline_ms = opts.deadline_ms }
  if not nft or nft.exit ~= 0 then
    b:close()
    return nil, refused("the bridge's nftables rules could not be loaded: " .. (nft and said(nft) or "cannot write " .. rules))
  end
  return b
end

-- The bridges' names and addresses for a server (its --root names them), without making any:
-- nil and why when bridge_subnet cannot hold uid_count instances.
function M.plan(iso, root, uid_count)
  local net, prefix = cidr(iso.bridge_subnet)
  if not net or prefix > 22 then
    return nil, refused("bridge_subnet " .. iso.bridge_subnet .. " is not an IPv4 subnet of /22 or wider")
  end
  local bridges = -(-uid_count // PER_BRIDGE)
  if (1 << (32 - prefix)) // CHUNK < bridges then
    return nil, refused(("bridge_subnet %s holds fewer addresses than uid_count needs (%d instances: %d bridges "
      .. "of a /22 each)"):format(iso.bridge_subnet, uid_count, bridges))
  end
  local name, tbl = M.names(root)
  return setmetatable({ name = name, table = tbl, net = net, prefix = prefix,
    subnet = ip_text(net) .. "/" .. prefix, bridges = bridges }, Bridge)
end

-- What a server of this root that was killed (kill -9, a crash, the host's OOM killer) left in
-- this network namespace: every bridge and instance port of its names, however many bridges it
-- had (another uid_count), and its nftables table. Run at every start of a walled sandboxd,
-- whatever policies/isolation.lua outbound now says (a restart with "pasta" would otherwise keep
-- them until a start with a bridge), before its own bridge is made. Only where it could have made
-- them: root of the host's user namespace (nft: where installed). Another root's names are never
-- touched. opts: root, helper, path, deadline_ms. Returns the names removed (the table's as
-- "inet switchboard_<hex>"), or nil and why.
function M.sweep(opts)
  if not host_root() then return {} end
  local name, tbl = M.names(opts.root)
  local env = { PATH = opts.path }
  local r = run.tool{ argv = { opts.helper, "bridge-sweep", "--bridge", name }, env = env, deadline_ms = opts.deadline_ms }
  if not r or r.exit ~= 0 then return nil, refused("a killed server's bridges could not be removed: " .. said(r)) end
  local removed = {}
  for link in (r.stdout or ""):gmatch("removed (%S+)") do removed[#removed + 1] = link end
  if has_nft(opts.path) then
    local list = run.tool{ argv = { "nft", "list", "tables" }, env = env, deadline_ms = opts.deadline_ms }
    if list and list.exit == 0 and (list.stdout or ""):find("table inet " .. tbl .. "\n", 1, true) then
      local del = run.tool{ argv = { "nft", "delete", "table", "inet", tbl }, env = env, deadline_ms = opts.deadline_ms }
      if not del or del.exit ~= 0 then
        return nil, refused("a killed server's nftables table " .. tbl .. " could not be removed: " .. said(del))
      end
      removed[#removed + 1] = "inet " .. tbl
    end
  end
  return removed
end

-- Slot n (the instance's place in the server's uid block) → its bridge, port and address.
function Bridge:port_spec(slot)
  local k, j = slot // PER_BRIDGE, slot % PER_BRIDGE
  local base = self.net + k * CHUNK
  return ("%sb%d,%s-%d,%s/22,%s"):format(self.name, k, self.name, slot, ip_text(base + 2 + j), ip_text(base + 1))
end

-- Every bridge of the server removed (gone already is fine): the helper's result.
function Bridge:down()
  return run.tool{ argv = { self.helper, "bridge-down", "--bridge", self.name .. "b", "--count", tostring(self.bridges) },
    env = { PATH = self.path }, deadline_ms = self.deadline_ms }
end

function Bridge:close()
  if self.closed then return end
  self.closed = true
  run.tool{ argv = { "nft", "delete", "table", "inet", self.table }, env = { PATH = self.path }, deadline_ms = self.deadline_ms }
  self:down()
end

return M
