-- The model's Markdown as Slack's mrkdwn (fronts/slack/mrkdwn.lua), and its split into sections.
local mrkdwn = require("switchboard.fronts.slack.mrkdwn")

describe("mrkdwn.convert", function()
  it("turns headings, bold, italic, strike, links and lists into mrkdwn", function()
    assert.equal("*Plan*", mrkdwn.convert("## Plan"))
    assert.equal("a *b* c", mrkdwn.convert("a **b** c"))
    assert.equal("a *b* c", mrkdwn.convert("a __b__ c"))
    assert.equal("an _aside_ here", mrkdwn.convert("an *aside* here"))
    assert.equal("~gone~", mrkdwn.convert("~~gone~~"))
    assert.equal("see <https://x.io/a?b=1&c=2|the docs>", mrkdwn.convert("see [the docs](https://x.io/a?b=1&c=2)"))
    assert.equal("• one\n  • nested\n1. first", mrkdwn.convert("- one\n  * nested\n1. first"))
    assert.equal("> quoted *text*", mrkdwn.convert("> quoted **text**"))
    assert.equal("───", mrkdwn.convert("---"))
  end)

  it("escapes &, < and > outside markup, and leaves code alone but for that", function()
    assert.equal("a &lt; b &amp;&amp; c &gt; d", mrkdwn.convert("a < b && c > d"))
    assert.equal("use `a **b** &lt;c&gt;` here", mrkdwn.convert("use `a **b** <c>` here"))
    assert.equal("```\nx = *p &amp;&amp; **q**\n```", mrkdwn.convert("```c\nx = *p && **q**\n```"))
    assert.equal("```\nunclosed", mrkdwn.convert("```\nunclosed"):sub(1, 12))
    assert.matches("```$", mrkdwn.convert("```\nunclosed"))
  end)

  it("puts a table in a code block (mrkdwn has no tables), its rule line dropped", function()
    assert.equal("```\n| a | b |\n| 1 | 2 |\n```\nafter", mrkdwn.convert("| a | b |\n|---|---|\n| 1 | 2 |\nafter"))
  end)
end)

describe("mrkdwn.split", function()
  it("keeps a short text whole and cuts a long one at blank lines within the limit", function()
    assert.same({ "short" }, mrkdwn.split("short", 100))
    local para = ("word "):rep(15) -- 75 bytes
    local parts = mrkdwn.split(para .. "\n\n" .. para .. "\n\n" .. para, 170)
    assert.equal(2, #parts)
    for _, p in ipairs(parts) do assert.is_true(#p <= 170) end
  end)

  it("closes a code block at a cut and reopens it in the next part", function()
    local code = "```\n" .. ("line of code\n"):rep(20) .. "```"
    local parts = mrkdwn.split(code, 120)
    assert.is_true(#parts > 1)
    for _, p in ipairs(parts) do
      assert.is_true(#p <= 120, #p)
      local _, n = p:gsub("```", "")
      assert.equal(0, n % 2, p)
    end
  end)

  it("cuts a long line without a break on a UTF-8 boundary", function()
    local parts = mrkdwn.split(("é"):rep(100), 51)
    for _, p in ipairs(parts) do assert.is_truthy(utf8.len(p)) end
    assert.equal(("é"):rep(100), table.concat(parts))
  end)
end)
