-- Map-reduce summarization: one summary per chunk (in parallel, a task
-- group), then one abstract over all of them.
--   braid run apps/map_reduce/app.lua [FILE]   (default: input.txt beside this script)
local summarize = braid.fn { name = "summarize", system = "You summarize text accurately and briefly.", prompt = [[
Summarize this passage in one sentence.

{{chunk}}

Summary: {{gen summary max_tokens=48 stop="\n"}}]] }

local combine = braid.fn { name = "combine", system = "You write crisp abstracts.", prompt = [[
Summaries of the parts of one document:
{{parts}}

Write one short paragraph about the whole document: {{gen abstract max_tokens=64 stop="\n\n"}}]] }

return function(path)
  local doc = braid.read(path or "input.txt")          -- a file given on the command line, or the sample
  local chunks = braid.chunks(doc, { tokens = 96 })
  local parts = {}
  for i, chunk in ipairs(chunks) do
    parts[i] = summarize{ chunk = chunk }.summary     -- a semantic variable; nothing runs yet
  end
  local abstract = combine{ parts = braid.join(parts, "\n") }.abstract
  return {
    chunks = #chunks,
    summaries = parts,                                 -- variables are resolved in the result
    abstract = abstract:get{ criteria = "latency" },  -- the DAG is handed over with its goal
  }
end
