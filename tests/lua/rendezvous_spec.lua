-- Thread affinity over several sandboxd URLs (lua/switchboard/exec/rendezvous.lua): the
-- Kubernetes StatefulSet's pods, docs/deploy.md "Kubernetes".
local rendezvous = require("switchboard.exec.rendezvous")
local factory = require("switchboard.exec.factory")
local policies = require("support.policies")

local function pods(n)
  local urls = {}
  for i = 0, n - 1 do urls[#urls + 1] = ("http://sandboxd-%d.sandboxd:8080"):format(i) end
  return urls
end

describe("rendezvous hashing of thread keys over sandboxd URLs", function()
  it("gives a single URL back as it is, and splits a list on commas, trimming spaces", function()
    assert.equal("http://one:8080", rendezvous.pick("http://one:8080", "T1"))
    assert.same({ "http://a", "http://b" }, rendezvous.split(" http://a , http://b ,"))
  end)

  it("sends a thread to the same pod every time, whatever the order of the list", function()
    local urls = pods(5)
    local reversed = {}
    for i = #urls, 1, -1 do reversed[#reversed + 1] = urls[i] end
    for i = 1, 200 do
      local key = "C123:" .. i
      local a = rendezvous.pick(table.concat(urls, ","), key)
      assert.equal(a, rendezvous.pick(table.concat(urls, ","), key))
      assert.equal(a, rendezvous.pick(table.concat(reversed, ","), key))
    end
  end)

  it("spreads threads over every pod", function()
    local urls = pods(5)
    local hits = {}
    for i = 1, 2000 do
      local url = rendezvous.pick(table.concat(urls, ","), "thread-" .. i)
      hits[url] = (hits[url] or 0) + 1
    end
    for _, url in ipairs(urls) do
      -- 400 expected each; a generous band that only a broken hash leaves
      assert.truthy((hits[url] or 0) > 250 and hits[url] < 550, url .. ": " .. tostring(hits[url]))
    end
  end)

  it("moves only the threads of a pod that is removed, and only to the others", function()
    local five, four = pods(5), pods(4) -- sandboxd-4 goes away (a scale-down)
    local moved, stayed = 0, 0
    for i = 1, 1000 do
      local key = "T" .. i
      local before = rendezvous.pick(table.concat(five, ","), key)
      local after = rendezvous.pick(table.concat(four, ","), key)
      if before == five[5] then
        moved = moved + 1
        assert.are_not.equal(five[5], after)
      else
        assert.equal(before, after)
        stayed = stayed + 1
      end
    end
    assert.truthy(moved > 0 and stayed > moved)
  end)

  it("is what the factory's sandbox executor is built with", function()
    local snap = assert(policies.load(policies.dir{}))
    local list = table.concat(pods(3), ",")
    local env = { SANDBOX_URL = list, SANDBOX_TOKEN = "t" }
    local sel = assert(factory.make_executor({
      policy = function() return snap end, force_backend = "sandbox",
      getenv = function(k) return env[k] end,
    }, { thread_key = "C9:1.0", agent = "coding", repo = "acme/api" }))
    assert.equal("sandbox", sel.backend)
    assert.equal(rendezvous.pick(list, "C9:1.0"), sel.executor.url)
    assert.truthy(sel.executor.url:match("^http://sandboxd%-%d%.sandboxd:8080$"))
  end)
end)
