-- Command-line parsing shared by every subcommand: `--name value`, `--name=value`, boolean
-- flags, and `--` ending the options. Unknown options are errors that name the option and
-- point at --help; nothing is guessed. Commands call it through launch/prologue.lua.
local core = require("switchboard.core")

local M = {}

local function usage(message) return core.error("usage", message) end

-- spec: { ["timeout-ms"] = "number", thread = "string", json = "flag", ... }
-- Returns options (keys with '-' turned into '_'), the remaining words, and the words after
-- `--` (or nil when there was no `--`); or nil, err (core.error kind "usage": the message names
-- the option and what to do).
function M.parse(argv, spec)
  local opts, words, rest = {}, {}, nil
  local i = 1
  while i <= #argv do
    local word = argv[i]
    if word == "--" then
      rest = table.move(argv, i + 1, #argv, 1, {})
      break
    elseif word == "-h" or word == "--help" then
      opts.help = true
    elseif word:sub(1, 2) == "--" then
      local name, inline = word:match("^%-%-([^=]+)=(.*)$")
      name = name or word:sub(3)
      local kind = spec[name]
      if kind == nil then
        return nil, usage(("unknown option --%s (see --help)"):format(name))
      end
      local key = name:gsub("%-", "_")
      if kind == "flag" then
        if inline then return nil, usage(("--%s takes no value"):format(name)) end
        opts[key] = true
      else
        local value = inline
        if value == nil then
          i = i + 1
          value = argv[i]
          if value == nil then return nil, usage(("--%s needs a value"):format(name)) end
        end
        if kind == "number" then
          local n = tonumber(value)
          if n == nil or n ~= n then
            return nil, usage(("--%s needs a number, got %q"):format(name, value))
          end
          value = n
        end
        opts[key] = value
      end
    elseif word:match("^%-[^%-%d]") then
      -- A short option nobody defines: named, never taken for a word.
      return nil, usage(("unknown option %s (see --help)"):format(word:sub(1, 2)))
    else
      words[#words + 1] = word
    end
    i = i + 1
  end
  return opts, words, rest
end

return M
