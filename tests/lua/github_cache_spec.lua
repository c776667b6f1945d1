-- Token reuse (docs/contract.md#credential-freshness): the margin covers the longest command plus
-- slack; inside it a token is re-minted, outside it reused; slots are separate; concurrent
-- requests for one slot share one mint.
local core = require("switchboard.core")
local P = require("support.policies")
local standin = require("support.github_standin")
local cache = require("switchboard.github.cache")

local MIN = 60 * 1000

local function append(text)
  return function(src) return src .. "\n" .. text .. "\n" end
end

describe("github token reuse margin", function()
  after_each(function() P.cleanup() end)

  it("covers the longest single command plus slack: margin = bash.max_ms + token.reuse_slack_ms >= 20 min + 5 min", function()
    local snap = P.shipped()
    local t = snap.timeouts
    assert.equal(20 * MIN, t.bash.max_ms)
    assert.equal(5 * MIN, t.token.reuse_slack_ms)
    assert.equal(t.bash.max_ms + t.token.reuse_slack_ms, t.token.reuse_margin_ms)
    assert.is_true(t.token.reuse_margin_ms >= t.bash.max_ms + 5 * MIN)
  end)

  it("follows the command ceiling: raising bash.max_ms raises the margin", function()
    local snap = assert(P.load(P.dir({ timeouts = append("bash.max_ms = 30 * minute") })))
    assert.equal(35 * MIN, snap.timeouts.token.reuse_margin_ms)
  end)

  it("can never reach the token's one-hour life (such a policy is refused)", function()
    local _, errs = P.load(P.dir({ timeouts = append("token.reuse_slack_ms = 40 * minute") }))
    assert.truthy(P.has(errs, "token.reuse_slack_ms", "reaches the token's 1 h lifetime"))
  end)
end)

describe("github token cache (minting through the stand-in)", function()
  local function world(opts)
    opts = opts or {}
    opts.policy = opts.policy or function() return P.shipped() end
    return standin.world(opts)
  end

  it("re-mints when the cached token has less than the reuse margin left", function()
    core.run(function()
      local w = world()
      local first = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      -- The token lives 60 min; after 35 min + 1 s it has 24 min 59 s < 25 min left.
      w.advance(35 * MIN + 1000)
      local second = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      assert.are_not.equal(first, second)
      assert.equal(2, w.gh:mints_for("read"))
      w.close()
    end)
  end)

  it("reuses the cached token while it still has at least the reuse margin left", function()
    core.run(function()
      local w = world()
      local first = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      w.advance(35 * MIN) -- exactly 25 min left: still reused
      local second = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      assert.equal(first, second)
      assert.equal(1, w.gh:mints_for("read"))
      w.close()
    end)
  end)

  it("never hands out a token a 20-minute command could outlive: a '5 minutes before expiry' token is re-minted", function()
    core.run(function()
      local w = world()
      assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      w.advance(54 * MIN) -- 6 min left: fine under a 5-min rule, fatal for a 20-min command
      local env = assert(w.identity:resolve_envs("write", { repo = "acme/api" }))
      local t = w.gh.tokens[env.GH_TOKEN]
      assert.is_true(t.expires_s * 1000 - w.clock.ms >= 20 * MIN + 5 * MIN)
      assert.equal(2, w.gh:mints_for("write"))
      w.close()
    end)
  end)

  it("measures the margin on our clock: with GitHub's clock 7 min ahead (its Date header), expires_at is read 7 min earlier", function()
    core.run(function()
      local w = world()
      w.gh.skew_ms = 7 * MIN -- still inside the JWT's tolerance (iat is 1 min back, exp 9 min ahead)
      local first = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      -- expires_at is GitHub's now + 60 min = our now + 67 min, yet the token lives 60 of our
      -- minutes. After 35 min + 1 s it has 24 min 59 s left for real: re-minted, although
      -- expires_at taken on our clock would say 31 min 59 s.
      w.advance(35 * MIN + 1000)
      local second = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      assert.are_not.equal(first, second)
      assert.equal(2, w.gh:mints_for("read"))
      w.close()
    end)
  end)

  it("reads the margin from the current policy at every request (a reload applies to the next one)", function()
    local snap = P.shipped()
    local wider = assert(P.load(P.dir({ timeouts = append("token.reuse_slack_ms = 30 * minute") })))
    local current = snap
    core.run(function()
      local w = world({ policy = function() return current end })
      local first = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      w.advance(20 * MIN) -- 40 min left: reused under 25 min, re-minted under 50 min
      assert.equal(first, assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN)
      current = wider
      assert.are_not.equal(first, assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN)
      w.close()
    end)
  end)

  it("keeps the read and write tokens in separate slots (one mint per scope)", function()
    core.run(function()
      local w = world()
      local r1 = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      local w1 = assert(w.identity:resolve_envs("write", { repo = "acme/api" })).GH_TOKEN
      local r2 = assert(w.identity:resolve_envs("read", { repo = "acme/api" })).GH_TOKEN
      local w2 = assert(w.identity:resolve_envs("write", { repo = "acme/api" })).GH_TOKEN
      assert.are_not.equal(r1, w1)
      assert.equal(r1, r2)
      assert.equal(w1, w2)
      assert.equal(1, w.gh:mints_for("read"))
      assert.equal(1, w.gh:mints_for("write"))
      assert.equal("read", w.gh.tokens[r1].scope)
      assert.equal("write", w.gh.tokens[w1].scope)
      w.close()
    end)
  end)

  it("concurrent requests for one scope share one mint", function()
    core.run(function()
      -- the mints are held until every other request waits on them (not for a time)
      local hold = core.signal()
      local w = world({ mint_hold = hold, env = { GITHUB_APP_INSTALLATION_ID = "678" } })
      local got, done = {}, 0
      local main = core.current()
      for i = 1, 8 do
        core.go(function()
          local scope = i % 2 == 0 and "write" or "read"
          got[i] = { scope = scope, token = assert(w.identity:resolve_envs(scope, {})).GH_TOKEN }
          done = done + 1
          if done == 8 then core.wake(main) end
        end)
      end
      local waits = w.identity.tokens.stats.waits
      local t0 = core.now_ms()
      while not (waits["read@678"] == 3 and waits["write@678"] == 3) and core.now_ms() - t0 < 30000 do
        core.sleep(20)
      end
      hold:abort("release the mints")
      if done < 8 then core.suspend() end
      assert.equal(1, w.gh:mints_for("read"))
      assert.equal(1, w.gh:mints_for("write"))
      for i = 3, 8 do assert.equal(got[i - 2].token, got[i].token) end
      assert.are_not.equal(got[1].token, got[2].token)
      assert.equal(3, w.identity.tokens.stats.waits["read@678"])
      w.close()
    end)
  end)
end)

describe("github cache slots (unit)", function()
  local function clock(start)
    local c = { ms = start }
    return c, function() return c.ms end
  end

  it("re-mints inside the margin and reuses outside it, per slot", function()
    core.run(function()
      local c, wall = clock(1000000)
      local n = 0
      local slots = cache.new{ wall_ms = wall, margin_ms = function() return 25 * MIN end }
      local function fill() n = n + 1; return { v = n, expires_ms = c.ms + 60 * MIN } end
      assert.equal(1, slots:get("a", fill).v)
      assert.equal(2, slots:get("b", fill).v)
      c.ms = c.ms + 35 * MIN
      local e, how = slots:get("a", fill)
      assert.equal(1, e.v)
      assert.equal("reused", how)
      c.ms = c.ms + 1
      e, how = slots:get("a", fill)
      assert.equal(3, e.v)
      assert.equal("filled", how)
    end)
  end)

  it("never reuses an entry whose expiry is unknown", function()
    core.run(function()
      local n = 0
      local slots = cache.new{ margin_ms = function() return 0 end }
      local function fill() n = n + 1; return { v = n } end
      slots:get("a", fill)
      slots:get("a", fill)
      assert.equal(2, n)
    end)
  end)

  it("a failed fill is shared by its waiters and cached for nobody: the next request tries again", function()
    core.run(function()
      local n = 0
      local slots = cache.new{ margin_ms = function() return 0 end }
      local function failing() n = n + 1; core.sleep(50); return nil, "GitHub is down" end
      local errs, main, done = {}, core.current(), 0
      for i = 1, 3 do
        core.go(function()
          local e, err = slots:get("a", failing)
          errs[i] = { e = e, err = err }
          done = done + 1
          if done == 3 then core.wake(main) end
        end)
      end
      core.suspend()
      assert.equal(1, n)
      for i = 1, 3 do
        assert.is_nil(errs[i].e)
        assert.equal("GitHub is down", errs[i].err)
      end
      local e = slots:get("a", function() n = n + 1; return { v = "ok", expires_ms = math.huge } end)
      assert.equal("ok", e.v)
      assert.equal(2, n)
    end)
  end)

  it("a fill that raises wakes its waiters with an error and raises in the filler (no task wedged)", function()
    core.run(function()
      local slots = cache.new{ margin_ms = function() return 0 end }
      local main, waiter_err = core.current(), nil
      local filling, waiting = core.signal(), core.signal()
      core.go(function()
        core.sleep(60000, filling) -- until the fill below runs
        waiting:abort("waiting") -- get() below suspends before anything else runs
        local _, err = slots:get("a", function() error("must not run") end)
        waiter_err = err
        core.wake(main)
      end)
      local ok, raised = pcall(slots.get, slots, "a", function()
        filling:abort("filling")
        core.sleep(60000, waiting)
        core.sleep(0) -- one turn: the waiter is in get()'s wait now
        error("bug in fill")
      end)
      assert.is_false(ok)
      assert.matches("bug in fill", raised)
      core.suspend()
      assert.matches("failed inside switchboard", tostring(waiter_err))
    end)
  end)
end)
