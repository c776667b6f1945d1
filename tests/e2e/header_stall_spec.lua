-- Black-box: an unauthenticated header cannot stall the loop (issue 22 item 5). Anyone who can
-- reach sandboxd or the resident can send `Authorization: Bearer x` + 16,000 spaces + `y`; the
-- bearer was read with `^[Bb]earer +(.-) *$`, quadratic in the spaces: seconds of the loop per
-- request, so that an authenticated request waited behind them. Here attackers keep such
-- requests in flight while an authenticated canary is timed.
--
-- The bound is what the old parse would cost: the spec times that pattern on a quarter of the
-- header (4,000 spaces) in its own Lua 5.4, in the same run, and scales it by 16 (quadratic):
-- the loop time ONE attacking request took before the fix. The canary must come back faster
-- than that, with several attacks in flight all along (before: about their sum).
local core = require("switchboard.core")
local S = require("support.sandbox")
local R = require("support.resident")

local ATTACKERS = 4
local OLD = "^[Bb][Ee][Aa][Rr][Ee][Rr] +(.-) *$"
local HEADER = "Bearer x" .. (" "):rep(16000) .. "y"

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- The old parse's cost for one attacking header, measured here (see the top).
local function old_parse_ms()
  local quarter = "Bearer x" .. (" "):rep(4000) .. "y"
  local t0 = core.now_ms()
  assert(quarter:match(OLD))
  return (core.now_ms() - t0) * 16
end

local function timed(fn)
  local t0 = core.now_ms()
  fn()
  return core.now_ms() - t0
end

-- Keeps ATTACKERS unauthenticated requests in flight against url..path while canary() runs
-- `rounds` times; returns the slowest canary and how many attacks were answered 401.
local function under_attack(url, path, canary, rounds)
  local stop, refused, others, running = false, 0, {}, ATTACKERS
  for _ = 1, ATTACKERS do
    core.go(function()
      while not stop do
        local status = core.http.request{ method = "POST", url = url .. path, deadline_ms = 120000,
          headers = { authorization = HEADER, ["x-thread-key"] = "attacker", ["content-type"] = "application/json" },
          body = '{"command":"true"}' }
        if status == 401 then refused = refused + 1 else others[#others + 1] = tostring(status) end
      end
      running = running - 1
    end)
  end
  -- every attacker has had one answer before the canary starts: the attack is under way
  assert(S.wait_for(function() return refused + #others >= ATTACKERS end, 120000), "the attacks were never answered")
  local worst = 0
  for _ = 1, rounds do worst = math.max(worst, timed(canary)) end
  stop = true
  assert(S.wait_for(function() return running == 0 end, 120000), "the attackers did not finish")
  assert.same({}, others)
  return worst, refused
end

describe("an unauthenticated header with a run of spaces", function()
  it("does not delay sandboxd's authenticated requests", function()
    core.run(function()
      -- --no-walls: the header is read before any instance exists; walls change nothing here
      local h = S.start_sandboxd{ policies = S.policy_dir(), args = { "--no-walls" } }
      local function canary()
        local status, _, raw = S.call(h.url, "/exec", { thread = "canary", body = { command = "echo alive" }, deadline_ms = 120000 })
        assert.equal(200, status, raw)
        assert.truthy(raw:find("alive", 1, true), raw)
      end
      local reference = timed(canary)
      local bound = old_parse_ms()
      local worst, refused = under_attack(h.url, "/exec", canary, 3)
      print(("[header-stall] sandboxd: canary %.1f ms under attack (alone %.1f ms); bound %.0f ms = the old parse of one header; %d attacks refused")
        :format(worst, reference, bound, refused))
      assert.is_true(worst < bound, ("canary took %.0f ms, one attack's old cost is %.0f ms"):format(worst, bound))
      h:stop(); h:wait()
    end)
  end)

  it("does not delay the resident's authenticated requests", function()
    core.run(function()
      local h = R.start(R.make_base(), { policies = R.policy_dir() })
      local function canary()
        local status = core.http.request{ method = "GET", url = h.url .. "/status?repo=acme/api", deadline_ms = 120000,
          headers = { authorization = "Bearer " .. R.TOKEN } }
        assert.is_true(status == 200 or status == 404, tostring(status))
      end
      local reference = timed(canary)
      local bound = old_parse_ms()
      local worst, refused = under_attack(h.url, "/exec", canary, 3)
      print(("[header-stall] resident: canary %.1f ms under attack (alone %.1f ms); bound %.0f ms = the old parse of one header; %d attacks refused")
        :format(worst, reference, bound, refused))
      assert.is_true(worst < bound, ("canary took %.0f ms, one attack's old cost is %.0f ms"):format(worst, bound))
      h.stop(); h.wait()
    end)
  end)
end)
