-- Black-box: network per agent (issue 10, docs/isolation.md "The local executor, and network per
-- agent") and instances' own network namespaces (issue 22 items 4 and 9). Two servers are what a
-- command tries to reach: one on the host's loopback (what sandboxd, the resident and the bot's
-- listener are) — no instance reaches it, whatever its network — and an "outside" one: sandboxd
-- runs in a network namespace this spec makes, whose dummy interface holds a non-loopback
-- address with the outside server on it; an instance made with "host" (outbound access, through
-- pasta) reaches it, one made with "none" does not (and says so in words). The network is the
-- agent's (policies/agents.lua) and reaches sandboxd on the wire through the executor; it is
-- fixed when the instance is made. The local executor walls its threads when
-- policies/isolation.lua local_walls is true.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local bin = require("support.bin")
local factory = require("switchboard.exec.factory")
local stack = require("switchboard.exec.stack")
local errors = require("switchboard.exec.errors")

local UID_BASE = require("support.walls").private_uid_base(64)
local UID_COUNT = 64

-- Two agents besides the shipped ones: offline (network "none") and online (network "host").
local AGENTS = [[
agents.offline = {
  description = "Works in a repository without any network.",
  resources = { repository = true }, readonly = false, max_run_minutes = 10,
  tools = { "bash", "read_file", "write_file" }, network = "none",
}
agents.online = {
  description = "Works in a repository with the host's network.",
  resources = { repository = true }, readonly = false, max_run_minutes = 10,
  tools = { "bash", "read_file", "write_file" }, network = "host",
}
]]

local function policy_dir(isolation_extra)
  return policies.dir{
    -- an instance stays awake for the whole test, however busy the machine
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\nsandbox.sleep_after = \"60s\"\n" end,
    agents = function(src) return src .. "\n" .. AGENTS end,
    isolation = function(src)
      -- small workspaces: each awake instance holds its whole image of the host's disk
      return src .. ("\nuid_base = %d\nuid_count = %d\nworkspace_max_bytes = 64 * MiB\n"):format(UID_BASE, UID_COUNT)
        .. (isolation_extra or "") .. "\n"
    end,
  }
end

-- A loopback HTTP server on the host, in this process: every GET answers its nonce.
local function host_server()
  local nonce = "pong-" .. core.crypto.hex(core.crypto.random_bytes(6))
  local hits = 0
  local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, handler = function(_, res)
    hits = hits + 1
    res:send(200, { ["content-type"] = "text/plain" }, nonce)
  end })
  return { srv = srv, nonce = nonce, hits = function() return hits end,
    curl = ("curl -sS --max-time 10 http://127.0.0.1:%d/"):format(srv.port) }
end

-- Two network namespaces of this spec's own: "the host" (where sandboxd runs: opts.wrap) with
-- loopback and a veth pair d0–d1 whose d0 has 198.51.100.1/24 (what pasta copies into an
-- instance) and a default route to d1's 198.51.100.254, and "the outside" holding d1 and an
-- HTTP server on 203.0.113.5 (another address of d1), reached from an instance through pasta's
-- gateway or the bridge's forwarding (policies/isolation.lua outbound). This spec reaches
-- sandboxd through a relay on the host's loopback (tests/support/netns_relay.py). Nothing of the
-- host's network changes.
local OUTSIDE_ADDR, OUTSIDE_PORT = "203.0.113.5", 8080
-- opts.v6_and_bridge: d0 also has IPv6 (2001:db8::1/64, a default route: pasta gives an
-- instance IPv6 where the host has both) and a second interface, d2 with 10.99.0.1, stands in
-- for a container bridge of the host's.
local function outside_world(opts)
  local files = S.tmpdir()
  local nonce = "outside-" .. core.crypto.hex(core.crypto.random_bytes(6))
  local f = assert(io.open(files .. "/nonce", "w")); f:write(nonce); f:close()
  local more = opts and opts.v6_and_bridge and table.concat({
    "ip addr add 2001:db8::1/64 dev d0 nodad", "ip -6 route add default via 2001:db8::fffe dev d0",
    "ip link add d2 type veth peer name d3", "ip addr add 10.99.0.1/24 dev d2",
    "ip link set d2 up", "ip link set d3 up" }, " && ") .. " && " or ""
  local outside = table.concat({
    "ip link set lo up", "echo $$ > " .. files .. "/outside.pid",
    "while [ ! -e " .. files .. "/go ]; do sleep 0.05; done",
    "ip addr add 198.51.100.254/24 dev d1", "ip addr add " .. OUTSIDE_ADDR .. "/32 dev d1", "ip link set d1 up",
    ("exec python3 -u -m http.server --bind %s --directory %s %d >%s/log 2>&1"):format(OUTSIDE_ADDR, files, OUTSIDE_PORT, files),
  }, " && ")
  local setup = table.concat({
    "ip link set lo up", "{ unshare --net -- sh -c '" .. outside .. "' & }",
    "while [ ! -s " .. files .. "/outside.pid ]; do sleep 0.05; done",
    "ip link add d0 type veth peer name d1 netns $(cat " .. files .. "/outside.pid)",
    "ip addr add 198.51.100.1/24 dev d0", "ip link set d0 up",
    more .. "ip route add default via 198.51.100.254 dev d0", "touch " .. files .. "/go", "echo up", "wait",
  }, " && ")
  local out = ""
  local proc = assert(core.spawn{ argv = { "unshare", "--net", "--", "sh", "-c", setup },
    env = { PATH = os.getenv("PATH") }, on_output = function(_, c) out = out .. c end })
  local w = { proc = proc, files = files, nonce = nonce,
    curl = ("curl -sS --max-time 10 http://%s:%d/nonce"):format(OUTSIDE_ADDR, OUTSIDE_PORT),
    netns = "/proc/" .. proc.pid .. "/ns/net" }
  assert(S.wait_for(function() return out:find("up", 1, true) or proc.result end, 30000), out)
  assert(S.wait_for(function() return (S.read(files .. "/log") or ""):find("Serving HTTP", 1, true) end, 30000),
    "the outside server did not start: " .. out .. (S.read(files .. "/log") or ""))
  function w.hits()
    local n = 0
    for _ in (S.read(files .. "/log") or ""):gmatch('"GET /nonce') do n = n + 1 end
    return n
  end
  -- sandboxd inside the namespace, reached through a relay on the host's loopback
  function w.sandboxd(opts)
    opts.wrap = { "nsenter", "--net=" .. w.netns, "--" }
    for _, a in ipairs(opts.inner_wrap or {}) do opts.wrap[#opts.wrap + 1] = a end
    local h = S.start_sandboxd(opts)
    local line = ""
    local relay = assert(core.spawn{ argv = { "python3", "tests/support/netns_relay.py", w.netns, tostring(h.port) },
      env = { PATH = os.getenv("PATH") }, on_output = function(_, c) line = line .. c end })
    local port = S.wait_for(function() return line:match("^(%d+)\n") end, 30000)
    assert(port, "the relay did not start: " .. line)
    h.inner_port, h.url, h.relay = h.port, "http://127.0.0.1:" .. port, relay
    return h
  end
  function w.close(h)
    if h and h.relay then h.relay:kill("KILL"); h.relay:wait() end
    local outside_pid = tonumber(S.read(files .. "/outside.pid") or "")
    if outside_pid then os.execute("kill -KILL " .. outside_pid) end -- the outside server this spec started
    proc:kill("KILL"); proc:wait()
    S.rm(files)
  end
  return w
end

local function exec(h, thread, command, extra)
  local body = { command = command }
  for k, v in pairs(extra or {}) do body[k] = v end
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, body = body, deadline_ms = 120000 })
  return status, cjson.decode(raw)
end

-- Issue 35 item 4: the host's services listening on [::] (and ::1, and 0.0.0.0). pasta maps the
-- host's interface into the instance, its own MAC the host's: the gateway's link-local address
-- (fe80::fc:ff:fe00:1 here, the EUI-64 of that MAC) was the host's own, and pasta connects a
-- link-local destination on the host's interface — so a command reached every service the host
-- had on [::]. The probe learns every gateway address an instance can (its routes, its
-- neighbours once it sent traffic, the link-locals their MACs make, pasta's well-known
-- addresses), adds the host's own addresses (this spec reads them), and connects to each
-- listener's port at each, link-locals scoped to the instance's interface. A control inside
-- shows a scoped link-local connect works where something listens.
local PROBE = [=[
ports="%s"; host_addrs="%s"
ifc=$(ip -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }')
for i in $(seq 150); do [ -z "$(ip -6 addr show tentative 2>/dev/null)" ] && break; sleep 0.1; done
eui64() { IFS=: read -r a b c d e f <<< "$1"
  printf 'fe80::%%x:%%x:%%x:%%x\n' $(( (0x$a ^ 2) << 8 | 0x$b )) $(( 0x$c << 8 | 0xff )) \
    $(( 0xfe << 8 | 0x$d )) $(( 0x$e << 8 | 0x$f )); }
gateways() { { ip -4 route; ip -6 route; } | awk '{ for (i = 1; i < NF; i++) if ($i == "via") print $(i + 1) }'; }
neighbours() { { ip -4 neigh; ip -6 neigh; } | while read -r addr _ _ l mac _; do
  echo "$addr"; [ "$l" = lladdr ] && eui64 "$mac"; done; }
probe() {
  for a in $(printf '%%s\n' "$@" | sort -u); do
    case $a in fe80:*) a="$a%%25$ifc";; esac
    case $a in *:*) target="[$a]";; *) target=$a;; esac
    for p in $ports; do
      ( out=$(curl -sS -g --connect-timeout 5 --max-time 8 "http://$target:$p/" 2>&1); echo "probe $a:$p exit=$? $out" ) &
    done
  done
  wait
}
probe 127.0.0.1 ::1 169.254.169.254 fe80::1 fe80::fc:ff:fe00:1 $host_addrs $(gateways)
echo "learned: $(gateways | tr '\n' ' ')/ $(neighbours | tr '\n' ' ')"
probe $(neighbours)
own=$(ip -6 -o addr show dev "$ifc" scope link | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
python3 -m http.server --bind :: 8765 >/dev/null 2>&1 &
for i in $(seq 300); do curl -s -o /dev/null "http://[::1]:8765/" && break; sleep 0.1; done
curl -sS -g --max-time 8 -o /dev/null -w "control %%{http_code}\n" "http://[$own%%25$ifc]:8765/"
kill %%1
]=]

-- The host's own addresses, without their prefix lengths (link-locals bare: the probe scopes
-- them); with netns, a namespace's (the spec's own "outside").
local function host_addresses(netns)
  local out = ""
  local argv = { "ip", "-o", "addr", "show" }
  if netns then argv = { "nsenter", "--net=" .. netns, "--", table.unpack(argv) } end
  local proc = assert(core.spawn{ argv = argv, env = { PATH = os.getenv("PATH") },
    on_output = function(_, c) out = out .. c end })
  proc:wait()
  local addrs = {}
  for a in out:gmatch("inet6? ([%x%.:]+)/") do addrs[#addrs + 1] = a end
  return table.concat(addrs, " ")
end

-- Listeners on [::] (both families), ::1 and 0.0.0.0 in a namespace (the spec's "outside"), on
-- ports the kernel picks: each connection answers `nonce` and is counted in LOG.
local NS_LISTENERS = [=[
import socket, sys, threading
log, nonce, socks = open(sys.argv[1], "a", buffering=1), sys.argv[2].encode(), []
for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET6, "::1"), (socket.AF_INET, "0.0.0.0")):
    s = socket.socket(family, socket.SOCK_STREAM)
    if addr == "::": s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((addr, 0)); s.listen(64); socks.append(s)
def serve(s):
    while True:
        c, peer = s.accept(); log.write("accepted %s\n" % (peer,))
        c.sendall(b"HTTP/1.0 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(nonce), nonce)); c.close()
for s in socks: threading.Thread(target=serve, args=(s,), daemon=True).start()
print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
threading.Event().wait()
]=]

-- Whether this kernel gives the walls (support/walls.lua): one real sandboxd start answers it.
local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

describe("network on the wire: checked before anything runs", function()
  local dir = policy_dir()

  it("an unknown network is 400 in words on every route; none on a sandboxd without walls is 409, never ignored", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir, args = { "--no-walls" } }
      local status, doc = exec(h, "N1", "echo ran", { network = "bridge" })
      assert.equal(400, status)
      assert.equal('the request\'s network must be "host" or "none" (policies/agents.lua network), got "bridge"', doc.error)
      assert.equal(127, doc.exitCode) -- /exec's dual failure shape
      status, doc = exec(h, "N1", "echo ran", { network = 5 })
      assert.equal(400, status)
      assert.truthy(doc.error:find("got a JSON number", 1, true), doc.error)
      local st, _, raw = S.call(h.url, "/read", { thread = "N1", body = { path = "x", network = cjson.null } })
      assert.equal(400, st)
      assert.truthy(raw:find("got a JSON null", 1, true), raw)
      st, _, raw = S.call(h.url, "/write", { thread = "N1", body = { path = "x", content = "y", network = "NONE" } })
      assert.equal(400, st, raw)
      -- unwalled, an instance shares the host's network: "none" is refused, nothing runs
      status, doc = exec(h, "N1", "echo ran > ran.txt", { network = "none" })
      assert.equal(409, status)
      assert.equal("network-unavailable", doc.reason)
      assert.truthy(doc.error:find("runs without walls (--no-walls) and cannot take an instance off the network", 1, true), doc.error)
      status, doc = exec(h, "N1", "cat ran.txt 2>&1; echo ok", { network = "host" })
      assert.equal(200, status)
      assert.equal(0, doc.exitCode)
      assert.truthy(doc.stdout:find("No such file", 1, true), doc.stdout)
      h:stop(); h:wait()
    end)
  end)
end)

describe_walls("network per agent, walled (sandboxd)", function()
  local dir = policy_dir()
  local snap = assert(policies.load(dir))

  it("no instance reaches the host's loopback services; host (outbound, through pasta) reaches the outside, none does not, in words", function()
    core.run(function()
      local web = host_server()
      local h = S.start_sandboxd{ policies = dir }
      -- the host's loopback: neither network reaches it, nor sandboxd's own port
      for _, net in ipairs({ "host", "none" }) do
        local status, doc = exec(h, "W-lo-" .. net, web.curl .. "; echo; curl -sS --max-time 10 http://127.0.0.1:"
          .. h.port .. "/healthz", { network = net })
        assert.equal(200, status)
        assert.equal(7, doc.exitCode, doc.stderr) -- curl: could not connect
        assert.truthy(doc.stderr:find("Failed to connect to 127.0.0.1 port " .. web.srv.port, 1, true), doc.stderr)
        assert.truthy(doc.stderr:find("Failed to connect to 127.0.0.1 port " .. h.port, 1, true), doc.stderr)
      end
      assert.equal(0, web.hits())
      h:stop(); h:wait()
      web.srv:close()
    end)
  end)

  it("no instance reaches the host's [::], ::1 or 0.0.0.0 listeners by any gateway address it can learn (link-local included)", function()
    core.run(function()
      local nonce = "host-" .. core.crypto.hex(core.crypto.random_bytes(6))
      local hits, servers, ports = 0, {}, {}
      for _, host in ipairs({ "::", "::1", "0.0.0.0" }) do
        local srv = assert(core.http.serve{ host = host, port = 0, handler = function(_, res)
          hits = hits + 1
          res:send(200, { ["content-type"] = "text/plain" }, nonce)
        end })
        servers[#servers + 1], ports[#ports + 1] = srv, tostring(srv.port)
      end
      local h = S.start_sandboxd{ policies = dir }
      local status, doc = exec(h, "W-gw", PROBE:format(table.concat(ports, " "), host_addresses()), { network = "host" })
      assert.equal(200, status)
      local report = doc.stdout .. doc.stderr
      local probes = select(2, report:gsub("\nprobe ", "\n"))
      assert.truthy(probes >= 3 * 8, report) -- every listener at the fixed addresses, the host's and the learned ones
      assert.is_nil(report:find(nonce, 1, true), report)
      assert.is_nil(report:find("exit=0 ", 1, true), report)
      assert.truthy(report:find("\ncontrol 200\n", 1, true), report) -- a scoped link-local connect works where something listens
      assert.equal(0, hits, report)
      h:stop(); h:wait()
      for _, srv in ipairs(servers) do srv:close() end
    end)
  end)

  -- policies/isolation.lua outbound: the same walls through pasta and through the bridge (made
  -- in the spec's own namespace: sandboxd runs there as root of the host's user namespace)
  for _, mode in ipairs({ "pasta", "bridge" }) do
    local mode_dir = policy_dir(('outbound = "%s"'):format(mode))
    it(mode .. ": in a namespace this spec made, with IPv6 and a second interface: no instance reaches its [::], ::1 or 0.0.0.0 listeners either", function()
      core.run(function()
        local world = outside_world{ v6_and_bridge = true }
        local nonce = "ns-" .. core.crypto.hex(core.crypto.random_bytes(6))
        local log, line = world.files .. "/accepted", ""
        local listeners = assert(core.spawn{ argv = { "nsenter", "--net=" .. world.netns, "--", "python3", "-u", "-c",
          NS_LISTENERS, log, nonce }, env = { PATH = os.getenv("PATH") }, on_output = function(_, c) line = line .. c end })
        local ports = S.wait_for(function() return line:match("^(%d+ %d+ %d+)\n") end, 30000)
        assert(ports, "the namespace's listeners did not start: " .. line)
        -- d0's link-local (the EUI-64 of its MAC: pasta's gateway link-local in an instance) ends its DAD
        local addrs = S.wait_for(function()
          local a = host_addresses(world.netns)
          return a:find("fe80:") and a:find("2001:db8::1", 1, true) and a
        end, 30000)
        assert(addrs, "d0 got no link-local address")
        -- 203.0.113.5 is "the outside" here (the internet an instance reaches by design), not one
        -- of the host's addresses; through pasta a host's own second address on its default
        -- route's interface is not refused (docs/isolation.md), through the bridge it is
        addrs = addrs:gsub("%f[%d]" .. OUTSIDE_ADDR:gsub("%.", "%%.") .. "%f[^%d.]", "")
        local h = world.sandboxd{ policies = mode_dir }
        if mode == "bridge" then -- a second address on the default route's interface
          assert(os.execute("nsenter --net=" .. world.netns .. " ip addr add 198.51.100.7/24 dev d0"))
          addrs = addrs .. " 198.51.100.7"
        end
        local status, doc = exec(h, "W-ns-gw", PROBE:format(ports, addrs), { network = "host" })
        assert.equal(200, status)
        local report = doc.stdout .. doc.stderr
        assert.truthy(select(2, report:gsub("\nprobe ", "\n")) >= 3 * 8, report)
        assert.is_nil(report:find(nonce, 1, true), report)
        if mode == "pasta" then
          assert.truthy(report:find("\ncontrol 200\n", 1, true), report) -- a scoped link-local connect works
        else -- no IPv6 at all on the bridge's eth0, not even a link-local address
          local _, v6 = exec(h, "W-ns-gw", "cat /proc/net/if_inet6; ip -o link show eth0", { network = "host" })
          assert.is_nil(v6.stdout:find("eth0%s*\n.*eth0"), v6.stdout)
          assert.is_nil(v6.stdout:find("fe80", 1, true), v6.stdout)
        end
        assert.equal("", S.read(log) or "", report)
        -- and outbound access is kept: the outside server answers
        local _, on = exec(h, "W-ns-gw", world.curl, { network = "host" })
        assert.equal(world.nonce, on.stdout, on.stderr)
        listeners:kill("KILL"); listeners:wait()
        h:stop(); h:wait()
        world.close(h)
      end)
    end)

    it(mode .. ": in a namespace this spec made: host reaches the outside server (not sandboxd's loopback), none does not", function()
      core.run(function()
        local world = outside_world()
        local h = world.sandboxd{ policies = mode_dir }
        assert.equal(mode, h.log():match("walls%.outbound[^\n]*mode=(%a+)"), h.log())
        local status, off = exec(h, "W-off", world.curl, { network = "none" })
        assert.equal(200, status)
        assert.equal(7, off.exitCode, off.stderr) -- curl: could not connect (no route)
        assert.equal(0, world.hits())
        -- the instance has a network of its own: loopback only
        local _, lo = exec(h, "W-off", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", { network = "none" })
        assert.equal("lo\n", lo.stdout, lo.stderr)
        local on
        status, on = exec(h, "W-on", world.curl, { network = "host" })
        assert.equal(200, status)
        assert.equal(0, on.exitCode, on.stderr)
        assert.equal(world.nonce, on.stdout)
        assert.equal(1, world.hits())
        -- its own namespace too (pasta's interface besides lo), where sandboxd's port is closed
        local _, ns = exec(h, "W-on", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; "
          .. "curl -sS --max-time 10 http://127.0.0.1:" .. h.inner_port .. "/healthz", { network = "host" })
        assert.equal(mode == "pasta" and "d0 lo " or "eth0 lo ", ns.stdout, ns.stderr)
        assert.equal(7, ns.exitCode, ns.stderr)
        -- no field: the server's policies/isolation.lua network (host, shipped)
        local _, def = exec(h, "W-default", world.curl)
        assert.equal(world.nonce, def.stdout, def.stderr)
        h:stop(); h:wait()
        world.close(h)
      end)
    end)
  end

  -- The bridge's own life and walls (docs/isolation.md "Outbound through a bridge"): made once in
  -- sandboxd's namespace at its start, removed at its stop, a kill -9's leftover removed by the
  -- next start; no process per instance; instances do not reach each other, nor a private range
  -- the host routes to (pasta's sockets would: they connect from the host), nor the host.
  it("bridge: made at start and gone at stop (a kill -9's leftover removed by the next start); no pasta; no instance reaches another or a private range", function()
    core.run(function()
      local procs = require("support.procs")
      local files = require("support.files")
      local dir = policy_dir('outbound = "bridge"')
      local world = outside_world()
      local function in_host(cmd)
        local out = ""
        local p = assert(core.spawn{ argv = { "nsenter", "--net=" .. world.netns, "--", "sh", "-c", cmd },
          env = { PATH = os.getenv("PATH") }, on_output = function(_, c) out = out .. c end })
        p:wait()
        return out
      end
      local function bridges() return select(2, in_host("ip -o link show type bridge"):gsub("\n", "\n")) end
      local function tables() return select(2, in_host("nft list tables"):gsub("inet switchboard_", "")) end
      -- a private address the host routes to, in the outside namespace, with a server on it
      local outside = "/proc/" .. S.read(world.files .. "/outside.pid"):match("%d+") .. "/ns/net"
      local private_log = world.files .. "/private.log"
      local private = assert(core.spawn{ argv = { "nsenter", "--net=" .. outside, "--", "sh", "-c",
        "ip addr add 10.77.0.1/32 dev d1 && exec python3 -u -m http.server --bind 10.77.0.1 8080 >" .. private_log .. " 2>&1" },
        env = { PATH = os.getenv("PATH") } })
      in_host("ip route add 10.77.0.0/24 via 198.51.100.254 dev d0")
      assert(S.wait_for(function() return (S.read(private_log) or ""):find("Serving HTTP", 1, true) end, 30000))
      assert.equal(0, bridges())
      local h = world.sandboxd{ policies = dir }
      assert.equal(1, bridges())
      assert.equal(1, tables())
      -- one instance serves on its address; another cannot reach it, itself can
      local _, one = exec(h, "B-1", "setsid python3 -m http.server --bind 0.0.0.0 8090 >/dev/null 2>&1 & "
        .. "for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8090/ && break; sleep 0.1; done; "
        .. "ip -4 -o addr show eth0 | awk '{ sub(/\\/.*/, \"\", $4); print $4 }'", { network = "host" })
      local addr = one.stdout:match("^([%d.]+)\n")
      assert(addr, one.stdout .. one.stderr)
      local probe = "curl -sS -o /dev/null -w '%{http_code}' --connect-timeout 5 http://" .. addr .. ":8090/"
      local _, self_hit = exec(h, "B-1", probe, { network = "host" })
      assert.equal("200", self_hit.stdout, self_hit.stderr)
      local _, other = exec(h, "B-2", probe .. "; echo; curl -sS --connect-timeout 5 http://10.77.0.1:8080/; echo; "
        .. "curl -sS --connect-timeout 5 http://198.51.100.1:" .. h.inner_port .. "/healthz; echo; " .. world.curl, { network = "host" })
      assert.truthy(other.stdout:find("^000\n"), other.stdout .. other.stderr) -- no connection to the other instance
      assert.is_nil((S.read(private_log) or ""):find("GET /", 1, true), other.stdout .. other.stderr)
      assert.truthy(other.stdout:find(world.nonce, 1, true), other.stdout .. other.stderr) -- the outside still answers
      assert.is_nil(other.stdout:find('"ok"', 1, true), other.stdout) -- nor sandboxd through the host's address
      -- no process of the instances' uids is pasta
      for _, pid in ipairs(procs.pids()) do
        local status = files.read("/proc/" .. pid .. "/status") or ""
        local uid = tonumber(status:match("\nUid:%s+%d+%s+(%d+)"))
        if uid and uid >= UID_BASE and uid < UID_BASE + UID_COUNT then
          assert.is_not.equal("pasta", status:match("^Name:%s+(%S+)"))
        end
      end
      -- kill -9: the bridge and its table stay behind; the next start on that root replaces them
      h:stop("KILL"); h:wait()
      h.relay:kill("KILL"); h.relay:wait()
      assert.equal(1, bridges())
      local again = world.sandboxd{ policies = dir, root = h.root }
      assert.equal(1, bridges())
      assert.equal(1, tables())
      local _, on = exec(again, "B-3", world.curl, { network = "host" })
      assert.equal(world.nonce, on.stdout, on.stderr)
      again:stop(); again:wait()
      assert.equal(0, bridges())
      assert.equal(0, tables())
      private:kill("KILL"); private:wait()
      world.close(again)
    end)
  end)

  -- A Kubernetes pod with hostUsers: false (deploy/kubernetes/sandboxd.yaml): sandboxd is root
  -- of a user namespace of its own, where the kernel makes no device node, so the walls helper
  -- cannot give pasta a tun node of the instance's uid and binds the pod's /dev/net/tun (0666)
  -- instead (tests/support/own_userns.py). Such a pod cannot mount an ext4 image either, so its
  -- policy measures the workspace instead, as the manifest's ConfigMap says (workspace_size).
  it("sandboxd as root of its own user namespace (a pod with hostUsers: false): host still reaches the outside through pasta", function()
    core.run(function()
      local world = outside_world()
      -- outbound "auto": not root of the host's user namespace, so pasta, and the log says why
      local h = world.sandboxd{ policies = policy_dir('workspace_size = "measured"\noutbound = "auto"'),
        inner_wrap = { "python3", "tests/support/own_userns.py", tostring(UID_BASE), tostring(UID_COUNT), "--" } }
      assert.equal("pasta", h.log():match("walls%.outbound[^\n]*mode=(%a+)"), h.log())
      assert.truthy(h.log():find("not root of the host's user namespace", 1, true), h.log())
      local status, on = exec(h, "W-userns", world.curl, { network = "host" })
      assert.equal(200, status)
      assert.equal(0, on.exitCode, on.stderr .. h.log())
      assert.equal(world.nonce, on.stdout)
      assert.equal(1, world.hits())
      -- really inside a user namespace that is not the host's: its map is not the identity
      local f = assert(io.open("/proc/" .. h.pid .. "/uid_map"))
      local map = f:read("a")
      f:close()
      assert.truthy(map:find("^%s*0%s+0%s+1\n"), map)
      assert.truthy(map:find(("%d%%s+%d%%s+%d"):format(UID_BASE, UID_BASE, UID_COUNT)), map)
      h:stop(); h:wait()
      world.close(h)
    end)
  end)

  it("the network is fixed when the instance is made: another one for the awake instance is refused 409 in words, on every route", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = dir }
      local status, doc = exec(h, "W-fixed", "echo kept > kept.txt", { network = "none" })
      assert.equal(200, status)
      assert.equal(0, doc.exitCode)
      status, doc = exec(h, "W-fixed", "echo ran > ran.txt", { network = "host" })
      assert.equal(409, status)
      assert.equal("network-mismatch", doc.reason)
      assert.truthy(doc.error:find('this thread\'s sandbox instance is awake with network "none"; this request asks for "host"', 1, true), doc.error)
      assert.truthy(doc.error:find("slept (after 60s idle, timeouts sandbox.sleep_after)", 1, true), doc.error)
      -- the request that omits the field asks for the default (host): refused too
      status = exec(h, "W-fixed", "true")
      assert.equal(409, status)
      local st, _, raw = S.call(h.url, "/write", { thread = "W-fixed", body = { path = "w.txt", content = "w", network = "host" } })
      assert.equal(409, st)
      assert.equal("network-mismatch", cjson.decode(raw).reason)
      st, _, raw = S.call(h.url, "/read", { thread = "W-fixed", body = { path = "kept.txt", network = "none" } })
      assert.equal(200, st, raw)
      assert.equal("kept\n", core.crypto.base64_decode(cjson.decode(raw).content))
      -- nothing the refused requests asked for ran
      status, doc = exec(h, "W-fixed", "ls", { network = "none" })
      assert.equal("kept.txt\n", doc.stdout)
      h:stop(); h:wait()
    end)
  end)

  it("the agent's network reaches the wire through the executor: offline cannot reach the outside server, online can; a mismatch is a tool error", function()
    core.run(function()
      local web = outside_world()
      local h = web.sandboxd{ policies = dir }
      local opts = { policy = function() return snap end, sandbox_url = h.url, force_backend = "sandbox",
        getenv = function(name) if name == snap.execution.sandbox.token_env then return S.TOKEN end end }
      local function executor(agent, thread)
        local built = assert(stack.build(opts, { thread_key = thread, agent = agent, snap = snap }))
        assert.equal("sandbox", built.backend)
        assert.same({}, built.notes) -- no walls line: sandboxd always walls
        return built.executor
      end
      local off = assert(executor("offline", "E-1"):exec(web.curl, { snap = snap }))
      assert.equal(7, off.exit_code, off.text)
      assert.truthy(off.text:find("Failed to connect", 1, true), off.text)
      local on = assert(executor("online", "E-2"):exec(web.curl, { snap = snap }))
      assert.equal(0, on.exit_code, on.text)
      assert.equal(web.nonce, on.text)
      -- an agent without network of its own gets policies/isolation.lua network (host)
      assert.equal("host", factory.network_of(snap, snap.agents.agents.coding))
      -- online in offline's thread: refused in words, a tool error (not infrastructure)
      local r, err = executor("online", "E-1"):exec("echo never", { snap = snap })
      assert.is_nil(r)
      assert.truthy(errors.is_tool(err), tostring(err))
      assert.truthy(tostring(err):find('awake with network "none"; this request asks for "host"', 1, true), tostring(err))
      local _, ferr = executor("online", "E-1"):write_file("f.txt", "x", { snap = snap })
      assert.truthy(errors.is_tool(ferr), tostring(ferr))
      assert.equal(1, web.hits())
      h:stop(); h:wait()
      web.close(h)
    end)
  end)
end)

describe_walls("the local executor behind walls (policies/isolation.lua local_walls = true)", function()
  it("switchboard exec runs walled, says so, keeps the agent's network; unwalled it says that and refuses network none", function()
    core.run(function()
      local web = host_server()
      local root = S.tmpdir()
      local walled_dir = policy_dir("local_walls = true")
      local function run(pol, agent, command, thread)
        return bin.run({ "--policies", pol, "exec", "--workspace-root", root, "--thread", thread or "L1",
          "--agent", agent, "--", command })
      end
      -- walled: uid 1000 of its own namespace in /workspace, the host's root hidden
      local r = run(walled_dir, "online", "id -u; pwd; echo mine > own.txt; ls " .. root .. " 2>&1 | head -1; " .. web.curl)
      assert.equal(7, r.exit, r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("local executor: walled, network host (policies/isolation.lua local_walls)", 1, true), r.stderr)
      local lines = {}
      for line in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = line end
      assert.equal("exit 7: 1000", lines[1]) -- the curl below failed
      assert.equal("/workspace", lines[2])
      assert.truthy(lines[3]:find("No such file", 1, true) or lines[3] == "", r.stdout)
      -- network host is outbound access, never the host's loopback
      assert.truthy(lines[4]:find("Failed to connect to 127.0.0.1 port " .. web.srv.port, 1, true), r.stdout)
      -- a follow-up in the thread: a new instance (a new process) with another host uid (another
      -- uid range); the workspace's files are handed to it
      local moved_dir = policy_dir(("local_walls = true\nuid_base = %d\nuid_count = 32"):format(UID_BASE + 32))
      r = run(moved_dir, "online", "cat own.txt && echo more >> own.txt && echo ok")
      assert.equal(0, r.exit, r.stdout .. r.stderr)
      assert.equal("mine\nok\n", r.stdout)
      -- the agent's network none holds in the local executor's walls too
      r = run(walled_dir, "offline", web.curl, "L2")
      assert.equal(7, r.exit, r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("local executor: walled, network none", 1, true), r.stderr)
      assert.equal(0, web.hits())
      -- unwalled (the shipped default): the note says so, and network none is refused in words
      local plain = policy_dir()
      r = run(plain, "online", "echo hi", "L3")
      assert.equal(0, r.exit, r.stderr)
      assert.truthy(r.stderr:find("local executor: unwalled — commands run as this host's user", 1, true), r.stderr)
      r = run(plain, "offline", "echo never", "L3")
      assert.equal(78, r.exit) -- provisioning refused (switchboard exec's configuration status)
      assert.truthy((r.stdout .. r.stderr):find('agent offline asks for network "none", but the local executor runs unwalled', 1, true), r.stdout .. r.stderr)
      web.srv:close()
      S.rm(root)
    end)
  end)
end)

describe_walls("the local executor behind walls, in one process (the console's case)", function()
  local instance = require("switchboard.shell.instance")
  local procs = require("support.procs")
  local files = require("support.files")

  -- processes on this host whose uid is in this run's range, zombies excluded
  local function instance_procs()
    local out = {}
    for _, pid in ipairs(procs.pids()) do
      local status = files.read("/proc/" .. pid .. "/status") or ""
      local uid = tonumber(status:match("\nUid:%s+%d+%s+(%d+)"))
      if uid and uid >= UID_BASE and uid < UID_BASE + UID_COUNT and status:match("\nState:%s+(%S)") ~= "Z" then
        out[#out + 1] = pid
      end
    end
    return out
  end

  it("agents of a thread share its instance and the network rule; files go through the handle; a hard stop ends the instance", function()
    core.run(function()
      local dir = policy_dir("local_walls = true")
      local snap = assert(policies.load(dir))
      local root = S.tmpdir()
      local bin_dir = S.BIN:match("^(.*)/[^/]+$")
      local host
      local opts = { policy = function() return snap end, workspace_root = root, force_backend = "local",
        walls_host = function(s, r)
          local why
          host, why = instance.host{ snap = s, policy = function() return snap end, scratch = r,
            helper = bin_dir .. "/switchboard-walls" }
          return host, why
        end }
      local function executor(agent)
        local built = assert(stack.build(opts, { thread_key = "console:walled", agent = agent, snap = snap }))
        return built.executor, built
      end
      local coding, built = executor("coding")
      assert.same({ "local executor: walled, network host (policies/isolation.lua local_walls)" }, built.notes)
      assert(coding:write_file("note.txt", "from write_file\n", { snap = snap }))
      local r = assert(coding:exec("cat note.txt; id -u; setsid sleep 1000 >/dev/null 2>&1 & echo started", { snap = snap }))
      assert.equal("from write_file\n1000\nstarted", r.text)
      assert.equal("from write_file\n", assert(coding:read_file("note.txt", { snap = snap })))
      assert.truthy(#instance_procs() >= 1)
      -- another agent of the thread, another network: refused in words while the instance is awake
      local offline = executor("offline")
      local none, err = offline:exec("echo never", { snap = snap })
      assert.is_nil(none)
      assert.truthy(errors.is_tool(err), tostring(err))
      assert.truthy(err.message:find('awake with network "host"; agent work asking for "none"', 1, true), err.message)
      -- a hard stop ends the thread's instance, the daemon its command left included
      coding:release("always")
      assert.truthy(S.wait_for(function() return #instance_procs() == 0 end, 30000), "an instance process outlived the release")
      -- the thread's next instance is offline's, off the network, on the same workspace
      r = assert(offline:exec("cat note.txt; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", { snap = snap }))
      assert.equal("from write_file\nlo", r.text)
      offline:release("always")
      host:close()
      S.rm(root)
    end)
  end)
end)
