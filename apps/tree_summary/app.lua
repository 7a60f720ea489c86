-- Tree summarization of a long document: one summary per chunk, then the
-- summaries are combined in groups of four, level by level, until one
-- remains. Then a second pass over the chunks: given the summary of the
-- whole, is each part central to it (`select`)? The second pass reads every
-- chunk again behind the same prefix (system prompt, then the chunk), so a
-- KV cache large enough to keep the chunks answers it from the cache.
--   braid run apps/tree_summary/app.lua [FILE]   (default: input.txt beside this script)
--   (bench/inputs/tree_report.txt, ~200 KB, is made by scripts/make_tree_input.py)
local reader = "You read parts of a long report accurately and answer briefly."
local summarize = braid.fn { name = "summarize", system = reader, prompt = [[
Part of the report:
{{chunk}}

Summarize this part in one sentence: {{gen summary max_tokens=48 stop="\n"}}]] }

local central = braid.fn { name = "central", system = reader, prompt = [[
Part of the report:
{{chunk}}

Summary of the whole report: {{overall}}
Is this part central to that summary? {{select central choices=["yes", "no"]}}]] }

local combine = braid.fn { name = "combine", system = "You merge summaries into one.", prompt = [[
Summaries of consecutive parts of a report:
{{parts}}

Merge them into one summary of at most two sentences: {{gen summary max_tokens=64 stop="\n\n"}}]] }

local GROUP = 4

return function(path)
  local doc = braid.read(path or "input.txt")
  local chunks = braid.chunks(doc, { tokens = 512 })
  local level = {}
  for i, chunk in ipairs(chunks) do
    level[i] = summarize{ chunk = chunk }.summary
  end
  local sizes = { #level }
  while #level > 1 do
    local up = {}
    for first = 1, #level, GROUP do
      local group = {}
      for j = first, math.min(first + GROUP - 1, #level) do group[#group + 1] = level[j] end
      if #group == 1 then
        up[#up + 1] = group[1]                          -- a lone summary goes up as it is
      else
        up[#up + 1] = combine{ parts = braid.join(group, "\n") }.summary
      end
    end
    level = up
    sizes[#sizes + 1] = #level
  end
  local overall = level[1]:get{ criteria = "latency" }
  local marks = {}
  for i, chunk in ipairs(chunks) do marks[i] = central{ chunk = chunk, overall = overall }.central end
  local central_parts = {}
  for i, m in ipairs(marks) do
    if m:get() == "yes" then central_parts[#central_parts + 1] = i end
  end
  return {
    bytes = #doc,
    chunks = #chunks,
    levels = sizes,                                     -- nodes per level, leaves first
    summary = overall,
    central_parts = central_parts,                      -- chunk numbers judged central
  }
end
