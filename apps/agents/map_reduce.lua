-- Map-reduce over document chunks: one summary per chunk, all at once
-- (eager calls), then one call that combines them. An optional tool call
-- first (fetching the documents: braid.sleep). The chunks come in the spec.
--   braid run apps/agents/map_reduce.lua "$(cat apps/agents/examples/map_reduce.json)"
-- The argument is one JSON object (apps/agents/README.md):
--   {"chunks": ["...", ...], "max_tokens": 32, "reduce_max_tokens": 64 (optional),
--    "tool_seconds": 0.5 (optional)}
return function(spec_json)
  local spec = braid.json.decode(spec_json)
  local n = math.tointeger(spec.max_tokens) or 32
  local m = math.tointeger(spec.reduce_max_tokens) or 2 * n
  assert(n >= 1 and m >= 1, "max_tokens and reduce_max_tokens must be positive integers")
  -- Exactly n (m) tokens per output (see react.lua).
  local summarize = braid.fn { name = "map_reduce.map", prompt = [[
Summarize the passage below in one sentence, keeping names and numbers.

Passage:
{{chunk}}

Summary:{{gen summary max_tokens=]] .. n .. " min_tokens=" .. n .. "}}" }
  local combine = braid.fn { name = "map_reduce.reduce", prompt = [[
Summaries of the parts of one document:
{{parts}}

One paragraph about the whole document:{{gen abstract max_tokens=]] .. m .. " min_tokens=" .. m .. "}}" }

  braid.sleep(spec.tool_seconds or 0)                   -- fetch the documents
  local summaries = {}
  for i, chunk in ipairs(spec.chunks) do
    summaries[i] = summarize{ chunk = chunk }.summary
  end
  local abstract = combine{ parts = braid.join(summaries, "\n") }.abstract:get()
  return { chunks = #spec.chunks, abstract_chars = #abstract }
end
