-- shell/bridge.lua's decisions (docs/isolation.md "Outbound through a bridge"): the addresses a
-- slot gets, the nftables table, the resolvers excepted, and the refusals that keep pasta. The
-- rules' effect is black-box in tests/e2e/walls_net_spec.lua (the bridge cases).
local core = require("switchboard.core")
local bridge = require("switchboard.shell.bridge")

describe("shell/bridge", function()
  it("reads a subnet; refuses what is not one", function()
    local net, prefix = bridge.cidr("10.213.7.9/16")
    assert.equal(((10 * 256 + 213) * 256) * 256, net)
    assert.equal(16, prefix)
    assert.is_nil(bridge.cidr("10.213.0.0/31"))
    assert.is_nil(bridge.cidr("300.1.1.1/8"))
    assert.is_nil(bridge.cidr("10.0.0.0"))
  end)

  it("writes a table that drops the host, other instances, IPv6 and the refused ranges, resolvers on 53 excepted", function()
    local b = { name = "sbabc123", table = "switchboard_abc123", subnet = "10.213.0.0/16" }
    local text = bridge.rules(b, { "10.0.0.0/8", "169.254.0.0/16" }, { "10.255.255.53" }, false)
    assert.truthy(text:find("add table inet switchboard_abc123\ndelete table inet switchboard_abc123\n", 1, true), text)
    assert.truthy(text:find('hook input priority filter - 10; policy accept;\n    iifname "sbabc123*" drop', 1, true), text)
    assert.truthy(text:find('iifname "sbabc123*" oifname "sbabc123*" drop', 1, true), text)
    assert.truthy(text:find('iifname "sbabc123*" meta nfproto ipv6 drop', 1, true), text)
    local dns = text:find('ip daddr 10.255.255.53 udp dport 53 accept', 1, true)
    local drop = text:find('ip daddr { 10.0.0.0/8, 169.254.0.0/16 } drop', 1, true)
    assert.truthy(dns and drop and dns < drop, text)
    assert.truthy(text:find('ip saddr 10.213.0.0/16 oifname != "sbabc123*" masquerade', 1, true), text)
    assert.is_nil(text:find("\n    drop\n", 1, true), text) -- forwarding was on: the host's own is left alone
    assert.truthy(bridge.rules(b, {}, {}, true):find("\n    drop\n", 1, true)) -- was off: stays off for the rest
  end)

  it("spreads instances over bridges of 1,021 (a Linux bridge holds 1,024 ports), each a /22 of the subnet", function()
    local b = assert(bridge.plan({ bridge_subnet = "10.212.0.0/15" }, "/var/lib/sandboxd", 65536))
    assert.equal(65, b.bridges)
    local name = b.name
    assert.truthy(name:match("^sb%x%x%x%x%x%x$"), name)
    assert.equal(name .. "b0," .. name .. "-0,10.212.0.2/22,10.212.0.1", b:port_spec(0))
    assert.equal(name .. "b0," .. name .. "-1020,10.212.3.254/22,10.212.0.1", b:port_spec(1020))
    assert.equal(name .. "b1," .. name .. "-1021,10.212.4.2/22,10.212.4.1", b:port_spec(1021))
    assert.equal(name .. "b64," .. name .. "-65535,10.213.0.193/22,10.213.0.1", b:port_spec(65535))
    assert.truthy(#(name .. "-65535") <= 15 and #(name .. "b64") <= 15) -- IFNAMSIZ
    -- the same root, the same names (the next start finds a kill -9's leftovers)
    assert.equal(name, bridge.plan({ bridge_subnet = "10.212.0.0/15" }, "/var/lib/sandboxd", 65536).name)
    local none, why = bridge.plan({ bridge_subnet = "10.213.0.0/16" }, "/r", 65536)
    assert.is_nil(none)
    assert.truthy(why.message:find("holds fewer addresses than uid_count needs (65536 instances: 65 bridges", 1, true), why.message)
    assert.is_nil((bridge.plan({ bridge_subnet = "10.0.0.0/24" }, "/r", 10)))
  end)

  it("names the resolvers of resolv.conf, not a loopback one", function()
    local dir = require("support.tmp").name("resolv")
    assert(core.fs.mkdir_p(dir .. "/etc", tonumber("755", 8)))
    assert(core.fs.write_file(dir .. "/etc/resolv.conf", "# c\nnameserver 127.0.0.53\nnameserver 10.1.2.3\nnameserver ::1\nsearch x\n nameserver 8.8.8.8\n"))
    assert.same({ "10.1.2.3", "8.8.8.8" }, bridge.resolvers(dir))
    core.fs.remove_tree(dir)
  end)

  it("outbound pasta opens no bridge and says why", function()
    local b, why = bridge.open{ iso = { outbound = "pasta" } }
    assert.is_nil(b)
    assert.truthy(core.is_error(why))
    assert.equal('policies/isolation.lua outbound is "pasta"', why.message)
  end)
end)
