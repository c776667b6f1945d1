-- Failure classification (docs/contract.md#failure): thrown text, a container starting
-- (#failure-container-starting), recycle (#failure-recycle), fleet busy (#capacity), and the
-- in-body classification the executors apply.
local P = require("support.policies")
local classify = require("switchboard.shell.classify")

local S, MIN = 1000, 60 * 1000

describe("classify", function()
  local snap
  setup(function() snap = P.shipped() end)

  describe("thrownShape (item 14)", function()
    it("reads an error object, a plain table and a string the same way", function()
      local err = setmetatable({ name = "SandboxError", message = "boom", code = "E1" }, { __tostring = function() return "x" end })
      assert.same({ name = "SandboxError", message = "boom", code = "E1" }, classify.shape(err))
      assert.same({ name = "SandboxError", message = "boom", code = "E1" }, classify.shape({ name = "SandboxError", message = "boom", code = "E1" }))
      assert.same({ message = "boom" }, classify.shape("boom"))
      assert.same({ message = "boom" }, classify.shape({ error = "boom" }))
      assert.same({ code = "503" }, classify.shape({ code = 503 }))
      assert.same({}, classify.shape(nil))
      assert.same({ message = "42" }, classify.shape(42))
    end)
  end)

  describe("thrownText (item 3)", function()
    it("returns the SDK's message verbatim (trimmed) when it has one", function()
      assert.equal("Session 'a' not found", classify.thrown_text(snap, { name = "SandboxError", message = "  Session 'a' not found \n" }))
      assert.equal("plain string", classify.thrown_text(snap, "plain string"))
    end)

    it("a message-less error names the error name and code and says a rollout may be in progress", function()
      local text = classify.thrown_text(snap, { name = "SandboxError", code = "EXEC_FAILED", message = "" })
      assert.equal("sandbox exec failed with no message from the SDK (SandboxError, code EXEC_FAILED); the container may still be running a previous image while a Worker/image rollout is in progress — retry in a minute", text)
      assert.truthy(classify.thrown_text(snap, { name = "SandboxError" }):find("(SandboxError)", 1, true))
    end)

    it("a whitespace-only message counts as empty", function()
      local text = classify.thrown_text(snap, { name = "SandboxError", message = " \n\t " })
      assert.truthy(text:find("no message from the SDK (SandboxError)", 1, true))
    end)

    it("no name at all still yields a non-empty text that says so", function()
      for _, err in ipairs({ {}, { message = "" }, "", "   ", nil, { name = "  " } }) do
        local text = classify.thrown_text(snap, err)
        assert.truthy(text:find("no message from the SDK (no error name)", 1, true), tostring(text))
      end
      assert.truthy(classify.thrown_text(snap, { code = "X1" }):find("(no error name, code X1)", 1, true))
    end)
  end)

  describe("isContainerStarting (item 4)", function()
    it("recognizes the 0.12.x boot-time answer and nothing else", function()
      assert.is_true(classify.is_container_starting(snap, "Container is starting. Please retry in a moment."))
      assert.is_true(classify.is_container_starting(snap, { name = "Error", message = "Container is starting. Please retry in a moment." }))
      for _, other in ipairs({
        "Failed to create session: 503", "Session terminated", "Command execution failed",
        "The sandbox container stopped while the operation was pending.", "container started", "", {},
        { name = "ContainerUnavailableError" },
      }) do
        assert.is_false(classify.is_container_starting(snap, other))
      end
    end)
  end)

  describe("isRecycleError (item 9)", function()
    it("takes the 0.12.x typed errors by NAME (the RPC boundary drops the prototype)", function()
      assert.is_true(classify.is_recycle_error(snap, { name = "SessionTerminatedError", message = "anything" }))
      assert.is_true(classify.is_recycle_error(snap, { name = "OperationInterruptedError" }))
    end)

    it("falls back to the recycle-shaped texts, and rejects everything else", function()
      for _, text in ipairs({
        "Session 'abc' shell exited (exit code: 137)",
        "The sandbox container stopped while the operation was pending.",
        "The sandbox was destroyed while the operation was pending.",
        "Command execution failed", "Session terminated", "Session 'thread-9' not found",
      }) do
        assert.is_true(classify.is_recycle_error(snap, text), text)
        assert.is_true(classify.is_recycle_error(snap, { name = "Error", message = text }), text)
      end
      for _, text in ipairs({
        "fetch failed", "Failed to create session: 503", "Container is starting. Please retry in a moment.",
        "npm ERR! Test failed", "exit 1", "", "Session 'abc' is busy",
      }) do
        assert.is_false(classify.is_recycle_error(snap, text), text)
      end
      assert.is_false(classify.is_recycle_error(snap, { name = "ContainerUnavailableError", message = "x" }))
    end)
  end)

  describe("recycledMidCommandMessage (item 9)", function()
    local function reword(elapsed, err) return classify.recycled_mid_command_message(snap, elapsed, err) end

    it("leaves an early failure with any message alone", function()
      assert.equal("fetch failed", reword(5 * S, "fetch failed"))
      assert.equal("boom", reword(0, { name = "Error", message = "boom" }))
    end)

    it("leaves a recycle-shaped failure alone inside the first minute — a real startup failure", function()
      assert.equal("Command execution failed", reword(30 * S, "Command execution failed"))
      assert.equal("Command execution failed", reword(60 * S, "Command execution failed"))
    end)

    it("names the recycle when a recycle-shaped failure arrives after more than a minute", function()
      assert.equal(
        "sandbox recycled mid-command after 61s — the container was replaced and /workspace is empty; re-clone before continuing (Command execution failed)",
        reword(61 * S, "Command execution failed"))
      assert.matches("^sandbox recycled mid%-command after 330s", reword(330 * S, "Session terminated"))
    end)

    it("never rewords an unrelated failure on timing alone", function()
      assert.equal("fetch failed", reword(10 * MIN, "fetch failed"))
      assert.equal("Failed to create session: 503", reword(10 * MIN, "Failed to create session: 503"))
    end)

    it("recognizes the 0.12.x recycle texts — a terminated session shell and a container stopped under a pending call", function()
      assert.matches("^sandbox recycled mid%-command after 90s .*%(Session 'x' shell exited %(exit code: 143%)%)$",
        reword(90 * S, "Session 'x' shell exited (exit code: 143)"))
      assert.matches("^sandbox recycled", reword(90 * S, "The sandbox container stopped while the operation was pending."))
    end)

    it("recognizes the destroy-time disconnect text: reworded after a minute, kept inside it", function()
      local text = "The sandbox was destroyed while the operation was pending."
      assert.matches("^sandbox recycled mid%-command after 75s", reword(75 * S, text))
      assert.equal(text, reword(20 * S, text))
    end)

    it("a typed recycle error (certain) is named at any elapsed time", function()
      assert.matches("^sandbox recycled mid%-command after 2s .*%(Session terminated by the SDK%)$",
        reword(2 * S, { name = "SessionTerminatedError", message = "Session terminated by the SDK" }))
      assert.matches("^sandbox recycled", reword(0, { name = "OperationInterruptedError", message = "" }))
    end)

    it("a message that is already reworded is not reworded again", function()
      local once = reword(61 * S, "Command execution failed")
      assert.equal(once, reword(200 * S, once))
    end)

    it("follows the policy's threshold", function()
      local fast = assert(P.load(P.dir({ timeouts = function(src) return src .. "\nrecycle.threshold_ms = 10 * second\n" end })))
      assert.matches("^sandbox recycled", classify.recycled_mid_command_message(fast, 11 * S, "Session terminated"))
      P.cleanup()
    end)
  end)

  describe("fleet busy (item 14)", function()
    it("isFleetBusy recognizes the 0.3.x 503, the platform's no-instance wording and CONTAINER_UNAVAILABLE", function()
      assert.is_true(classify.is_fleet_busy(snap, "Failed to create session: 503"))
      assert.is_true(classify.is_fleet_busy(snap, "Error: Failed to create session: 503 Service Unavailable"))
      assert.is_true(classify.is_fleet_busy(snap, "There is no container instance that can be provided to this Durable Object, try again later"))
      assert.is_true(classify.is_fleet_busy(snap, "CONTAINER_UNAVAILABLE"))
    end)

    it("isFleetBusy is NOT a stale session, a wedged sandbox, a file-op failure, a 500, or arbitrary text", function()
      for _, text in ipairs({
        "Session 'abc' not found", "Command execution failed", "Failed to read file: /workspace/a",
        "Failed to write file: /workspace/a", "HTTP 500 Internal Server Error", "Failed to create session: 500",
        "hello", "",
      }) do
        assert.is_false(classify.is_fleet_busy(snap, text), text)
      end
      assert.is_false(classify.is_fleet_busy(snap, nil))
    end)

    it("isFleetBusyError takes the 0.12.x typed error by name, whatever its text", function()
      assert.is_true(classify.is_fleet_busy_error(snap, { name = "ContainerUnavailableError", message = "totally different words" }))
      assert.is_true(classify.is_fleet_busy_error(snap, { name = "ContainerUnavailableError" }))
    end)

    it("isFleetBusyError takes the code when a client surfaces it, and falls back to the texts", function()
      assert.is_true(classify.is_fleet_busy_error(snap, { name = "Error", code = "CONTAINER_UNAVAILABLE", message = "x" }))
      assert.is_true(classify.is_fleet_busy_error(snap, { name = "Error", message = "Failed to create session: 503" }))
      assert.is_true(classify.is_fleet_busy_error(snap, "Failed to create session: 503"))
    end)

    it("isFleetBusyError is NOT a recycle, a stale session, or an unrelated failure", function()
      assert.is_false(classify.is_fleet_busy_error(snap, { name = "SessionTerminatedError", message = "Session terminated" }))
      assert.is_false(classify.is_fleet_busy_error(snap, { name = "Error", message = "Session 'a' not found" }))
      assert.is_false(classify.is_fleet_busy_error(snap, { name = "TypeError", message = "x is undefined" }))
      assert.is_false(classify.is_fleet_busy_error(snap, { code = "ENOENT" }))
    end)

    it("the server's answers name the reason and the explanation and keep the SDK's message as the cause", function()
      local status, body = classify.fleet_busy_http_answer(snap, { name = "ContainerUnavailableError", message = "no container instance that can be provided" })
      assert.equal(503, status)
      assert.equal("fleet-busy", body.reason)
      assert.matches("^fleet%-busy: ", body.error)
      assert.truthy(body.error:find("max_instances", 1, true))
      assert.truthy(body.error:find("(no container instance that can be provided)", 1, true))
    end)

    it("the /exec answer carries the dual in-body failure form (error + exit 127 + stderr)", function()
      local body = classify.fleet_busy_exec_answer(snap, "Failed to create session: 503")
      assert.equal("fleet-busy", body.reason)
      assert.equal(127, body.exitCode)
      assert.equal("", body.stdout)
      assert.equal(body.error, body.stderr)
      assert.truthy(body.error:find("(Failed to create session: 503)", 1, true))
    end)

    it("the executor matches the machine token only", function()
      assert.is_true(classify.is_fleet_busy_answer({ error = "x", reason = "fleet-busy" }))
      assert.is_false(classify.is_fleet_busy_answer({ error = "Failed to create session: 503" }))
      assert.is_false(classify.is_fleet_busy_answer(nil))
    end)

    it("ExecCapacityError's text names the seconds waited", function()
      assert.equal("sandbox fleet busy — no free per-thread sandbox after waiting 300s (the fleet's max_instances is reached); try again in a few minutes",
        classify.capacity_message(snap, 300 * S))
    end)

    it("the model reads the ⏳ text", function()
      assert.equal("⏳ Sandbox fleet busy — busy. Retry the command in a minute or finish with what you have.",
        classify.fleet_busy_tool_text(snap, "busy"))
    end)
  end)

  describe("an /exec answer body (items 3, 9, 14)", function()
    it("no error key, exit 127 and no output is an ordinary result", function()
      assert.equal("result", classify.exec_answer(snap, { stdout = "", stderr = "", exitCode = 127 }).verdict)
    end)

    it("a PRESENT-but-empty error is infra with a non-empty text", function()
      for _, e in ipairs({ "", "   " }) do
        local c = classify.exec_answer(snap, { error = e, stdout = "", stderr = "", exitCode = 127 })
        assert.equal("infra", c.verdict)
        assert.equal("infra", c.code)
        assert.truthy(#c.message > 0)
        assert.truthy(c.message:find("empty error", 1, true))
      end
    end)

    it("reason fleet-busy waits; an OLD Worker's bare 503 without a reason stays infra", function()
      assert.equal("fleet_busy", classify.exec_answer(snap, classify.fleet_busy_exec_answer(snap, "x")).verdict)
      local c = classify.exec_answer(snap, { error = "Failed to create session: 503", stdout = "", stderr = "Failed to create session: 503", exitCode = 127 })
      assert.equal("infra", c.verdict)
      assert.equal("Failed to create session: 503", c.message)
    end)

    it("a booting container is re-sent; a late recycle is reworded; anything else is infra", function()
      assert.equal("container_starting", classify.exec_answer(snap, { error = "Container is starting. Please retry in a moment." }).verdict)
      local c = classify.exec_answer(snap, { error = "Command execution failed", exitCode = 127 }, 90 * S)
      assert.equal("infra", c.verdict)
      assert.matches("^sandbox recycled mid%-command after 90s", c.message)
      c = classify.exec_answer(snap, { error = "Command execution failed", exitCode = 127 }, 5 * S)
      assert.equal("Command execution failed", c.message)
    end)
  end)

  describe("runtime replaced (item 9)", function()
    it("the first is ordinary output; the second in a row is infra", function()
      local answer = { code = "runtime-replaced", message = "the resident was redeployed under this command" }
      assert.is_true(classify.is_runtime_replaced(snap, answer))
      assert.is_false(classify.runtime_replaced_is_infra(snap, 1))
      assert.is_true(classify.runtime_replaced_is_infra(snap, 2))
      assert.is_false(classify.is_runtime_replaced(snap, "Command execution failed"))
    end)
  end)

  describe("span codes (item 9)", function()
    it("timeout, http <status>, infra, infra/attach, infra/runtime-replaced", function()
      assert.equal("timeout", classify.span_code(snap, "timeout"))
      assert.equal("http 502", classify.span_code(snap, "http", 502))
      assert.equal("infra", classify.span_code(snap, "inbody"))
      assert.equal("infra/attach", classify.span_code(snap, "attach"))
      assert.equal("infra/runtime-replaced", classify.span_code(snap, "runtime_replaced"))
      assert.has_error(function() classify.span_code(snap, "nope") end)
    end)
  end)

  it("matching reads at most the first 8 KiB of a text", function()
    local long = string.rep("x", 9000) .. "Failed to create session: 503"
    assert.is_false(classify.is_fleet_busy(snap, long))
    assert.is_true(classify.is_fleet_busy(snap, string.rep("x", 100) .. "Failed to create session: 503"))
  end)
end)
