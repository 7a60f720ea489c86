-- N independent calls at once, for measuring speculative decoding at batch N:
--   braid run bench/spec/fanout.lua grounded N FILE
--   braid run bench/spec/fanout.lua open N
-- grounded: each call copies a passage of FILE (e.g.
-- bench/inputs/annual_report.txt) back with its spelling fixed, so its answer
-- repeats its input; open: each call writes a short story on its own topic.
-- Every output is greedy and 96 tokens at most.
local copy = braid.fn { name = "copy", prompt = [[
Copy the passage below exactly, fixing any spelling mistakes.

Passage: {{passage}}

Copy: {{gen text max_tokens=96 temperature=0}}]] }

local story = braid.fn { name = "story", prompt = [[
Write a short story about {{topic}}.

Story: {{gen text max_tokens=96 temperature=0}}]] }

local topics = { "a dragon afraid of the dark", "a lighthouse keeper", "a lost robot",
  "a baker who cannot taste", "a city under the sea", "the last tree on Mars",
  "a cat who runs a library", "a clock that runs backwards", "twin astronauts",
  "a river that talks", "a shy volcano", "a detective pigeon", "the moon's birthday",
  "a piano in the desert", "a snowman in summer", "a map with no roads" }

return function(kind, n, path)
  n = tonumber(n or "16")
  local outs = {}
  if kind == "grounded" then
    local chunks = braid.chunks(braid.read(assert(path, "grounded needs a FILE")), { tokens = 64 })
    for i = 1, n do outs[i] = copy{ passage = chunks[(i - 1) % #chunks + 1] }.text end
  elseif kind == "open" then
    for i = 1, n do outs[i] = story{ topic = topics[(i - 1) % #topics + 1] }.text end
  else
    error("KIND must be grounded or open, got " .. tostring(kind))
  end
  return { calls = n, outputs = outs }
end
