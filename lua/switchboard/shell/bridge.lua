-- Outbound network through a bridge (issue 43; docs/isolation.md "Outbound through a bridge"):
-- where sandboxd is root of the host's user namespace, its instances with network "host" get a
-- veth pair on one bridge of the server's, with nftables rules, instead of a pasta process each.
-- This decides whether (policies/isolation.lua outbound), the names, the addresses and the
-- rules; the walls helper (src/walls/bridge.c) speaks netlink, `nft` loads the rules.
--
--   local b, why = bridge.open{iso, root, helper, path, bounds, log}  -- at the server's start:
--                       b (the bridge made), or nil with why (pasta then: the caller decides)
--   b:port_spec(slot) → "BRIDGE,PORT,ADDR/PREFIX,GATEWAY" (the helper's --bridge-port)
--   b:close()           the bridge and the table removed (the next open also removes a kill -9's)
local core = require("switchboard.core")
local run = require("switchboard.shell.run")

local M = {}

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
  local br, lines = ('"%s"'):format(b.name), {}
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

-- Whether this process may make a bridge: root of the host's user namespace (in one of its own —
-- a pod with hostUsers: false — the host's network is not its to change), and nft installed.
local function able(path)
  local map = core.fs.read_file("/proc/self/uid_map") or ""
  if not map:match("^%s*0%s+0%s+4294967295%s*$") then
    return nil, refused("sandboxd is not root of the host's user namespace")
  end
  for dir in path:gmatch("[^:]+") do
    if core.fs.exists(dir .. "/nft") then return true end
  end
  return nil, refused("nft is not installed (apt-get install nftables)")
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
  local net, prefix = cidr(iso.bridge_subnet)
  if not net then return nil, refused("bridge_subnet " .. iso.bridge_subnet .. " is not an IPv4 subnet (/1 to /30)") end
  if (1 << (32 - prefix)) - 3 < opts.uid_count then
    return nil, refused(("bridge_subnet %s holds fewer addresses than uid_count (%d instances)"):format(iso.bridge_subnet, opts.uid_count))
  end
  local hex = core.crypto.hex(core.crypto.sha256(opts.root or "")):sub(1, 6)
  local b = setmetatable({ name = "sb" .. hex, table = "switchboard_" .. hex, net = net, prefix = prefix,
    subnet = ip_text(net) .. "/" .. prefix, gateway = ip_text(net + 1), helper = opts.helper,
    path = opts.path, deadline_ms = opts.deadline_ms }, Bridge)
  local up = run.tool{ argv = { opts.helper, "bridge-up", "--bridge", b.name, "--address", b.gateway .. "/" .. prefix },
    env = { PATH = opts.path }, deadline_ms = opts.deadline_ms }
  if not up or up.exit ~= 0 then return nil, refused("the bridge could not be made: " .. said(up)) end
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

-- Slot n (the instance's place in the server's uid block) → its port and address.
function Bridge:port_spec(slot)
  return ("%s,%s-%d,%s/%d,%s"):format(self.name, self.name, slot, ip_text(self.net + 2 + slot), self.prefix, self.gateway)
end

function Bridge:close()
  if self.closed then return end
  self.closed = true
  run.tool{ argv = { "nft", "delete", "table", "inet", self.table }, env = { PATH = self.path }, deadline_ms = self.deadline_ms }
  run.tool{ argv = { self.helper, "bridge-down", "--bridge", self.name }, env = { PATH = self.path }, deadline_ms = self.deadline_ms }
end

return M
