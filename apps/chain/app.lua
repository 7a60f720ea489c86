-- Chain summarization: a rolling summary over the chunks of a document.
-- Each step depends on the previous one, so the whole chain is one path of
-- the DAG; the runtime runs it step after step with no client round trips.
--   braid run apps/chain/app.lua [FILE]   (default: input.txt beside this script)
local refine = braid.fn { name = "refine", system = "You keep a running summary of a story.", prompt = [[
Summary so far: {{so_far}}

Next part of the story:
{{chunk}}

Rewrite the summary in at most two sentences, adding what happens in this part.
]] .. [[{{gen summary max_tokens=40 stop="\n\n"}}]] }

return function(path)
  local text = braid.read(path or "input.txt")
  local summary = "(nothing yet)"
  local steps = {}
  for i, chunk in ipairs(braid.chunks(text, { tokens = 64 })) do
    summary = refine{ so_far = summary, chunk = chunk }.summary   -- a variable feeding the next call
    steps[i] = summary
  end
  return {
    steps = steps,                                  -- every intermediate summary, in order
    final = summary:get{ criteria = "latency" },
  }
end
