-- A ReAct-style tool loop, the shape of agent serving: each turn the model
-- writes an action after the whole transcript so far, a tool runs
-- (braid.sleep stands for its time) and its observation is appended; after
-- the last turn the model gives a final answer. The observations come with
-- the spec (a server's programs read no files), so the workload is the same
-- on every run. Each turn's prompt is the previous turn's prompt, its output
-- and the new observation: a strict extension, which a prefix cache reuses.
--   braid run apps/agents/react.lua "$(cat apps/agents/examples/react.json)"
-- The argument is one JSON object (apps/agents/README.md):
--   {"question": "...", "max_tokens": 32, "system": "..." (optional),
--    "turns": [{"tool_seconds": 0.8, "observation": "..."}, ...]}
local SYSTEM = [[You answer questions by thinking step by step and using tools.
Tools: search[query] finds documents; read[document] returns a document's text; calculator[expression] computes arithmetic.
After each action you get an observation. When you know the answer, write it.]]

return function(spec_json)
  local spec = braid.json.decode(spec_json)
  local n = math.tointeger(spec.max_tokens) or 32
  assert(n >= 1, "max_tokens must be a positive integer")
  -- Exactly n tokens per output (min_tokens: no stop, no early end), so
  -- that every serving policy generates the same amount of text.
  local gen = "max_tokens=" .. n .. " min_tokens=" .. n
  local act = braid.fn { name = "react.act", prompt = "{{transcript}}\nAction:{{gen action " .. gen .. "}}" }
  local answer = braid.fn { name = "react.answer", prompt = "{{transcript}}\nFinal answer:{{gen answer " .. gen .. "}}" }

  local transcript = (spec.system or SYSTEM) .. "\n\nQuestion: " .. spec.question
  for _, turn in ipairs(spec.turns) do
    local action = act{ transcript = transcript }.action:get()
    braid.sleep(turn.tool_seconds or 0)                 -- the tool runs
    transcript = transcript .. "\nAction:" .. action .. "\nObservation: " .. turn.observation
  end
  local final = answer{ transcript = transcript }.answer:get()
  return { turns = #spec.turns, transcript_chars = #transcript, answer_chars = #final }
end
