-- A coding agent: a long system prompt (the same text for every program of
-- a group, as one product's agents share theirs), the files it works on,
-- then turns of an edit proposal followed by a test run (braid.sleep stands
-- for it) whose output is appended, and a summary of the change at the end.
-- Like react.lua each prompt extends the previous prompt and output, and
-- programs of one group share the system prompt as a prefix.
--   braid run apps/agents/coding.lua "$(cat apps/agents/examples/coding.json)"
-- The argument is one JSON object (apps/agents/README.md):
--   {"system": "...", "task": "...", "max_tokens": 32,
--    "files": [{"path": "src/a.py", "content": "..."}, ...],
--    "turns": [{"tool_seconds": 2.5, "observation": "test output"}, ...]}
return function(spec_json)
  local spec = braid.json.decode(spec_json)
  local n = math.tointeger(spec.max_tokens) or 32
  assert(n >= 1, "max_tokens must be a positive integer")
  local gen = "max_tokens=" .. n .. " min_tokens=" .. n   -- exactly n tokens (see react.lua)
  local edit = braid.fn { name = "coding.edit", prompt = "{{context}}\nProposed edit:{{gen edit " .. gen .. "}}" }
  local summary = braid.fn { name = "coding.summary", prompt = "{{context}}\nSummary of the change:{{gen summary " .. gen .. "}}" }

  local parts = { spec.system, "" }
  for _, file in ipairs(spec.files or {}) do
    parts[#parts + 1] = "### " .. file.path .. "\n" .. file.content .. "\n"
  end
  parts[#parts + 1] = "Task: " .. spec.task
  local context = table.concat(parts, "\n")
  for _, turn in ipairs(spec.turns) do
    local proposal = edit{ context = context }.edit:get()
    braid.sleep(turn.tool_seconds or 0)                 -- apply the edit and run the tests
    context = context .. "\nProposed edit:" .. proposal .. "\nTest output:\n" .. turn.observation
  end
  local done = summary{ context = context }.summary:get()
  return { turns = #spec.turns, context_chars = #context, summary_chars = #done }
end
