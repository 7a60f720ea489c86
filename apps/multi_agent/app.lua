-- Multi-agent coding: an architect plans, four coders write their parts
-- concurrently (braid.spawn), a reviewer judges each part every round
-- and commits to a verdict with `select` (scored, never free text).
-- Every agent shares one long system prompt (the project brief), so its
-- prefix is computed once and kept resident while the agents run.
--   braid run apps/multi_agent/app.lua [ROUNDS]
local brief = braid.read("brief.txt")

local architect = braid.fn { name = "architect", system = brief, prompt = [[
You are the architect. In one sentence, say how the four functions fit together.
Plan: {{gen plan max_tokens=40 stop="\n"}}]] }

local coder = braid.fn { name = "coder", system = brief, prompt = [[
You are a coder. Plan: {{plan}}
Your part: {{part}}
Previous review: {{review}}
Write only the Lua code for your part.
{{gen code max_tokens=48 stop="\n\n\n"}}]] }

local reviewer = braid.fn { name = "reviewer", system = brief, prompt = [[
You are the reviewer. Code for {{part}}:
{{code}}
Point out one problem or say it looks right: {{gen review max_tokens=32 stop="\n"}}
Verdict: {{select verdict choices=["approve", "revise"]}}]] }

local parts = {
  "function parse_csv_line(line)",
  "function sum_column(rows, index)",
  "function format_totals(totals)",
  "function read_rows(text)",
}

return function(rounds)
  rounds = tonumber(rounds) or 2
  local plan = architect{}.plan
  local reviews = {}
  for i = 1, #parts do reviews[i] = "none yet" end
  local history = {}
  for round = 1, rounds do
    local handles = {}
    for i, part in ipairs(parts) do
      handles[i] = braid.spawn(function()
        local code = coder{ plan = plan, part = part, review = reviews[i] }.code
        local r = reviewer{ part = part, code = code }
        return { part = part, code = code:get(), review = r.review:get(), verdict = r.verdict:get() }
      end)
    end
    local results, approved = {}, true
    for i, h in ipairs(handles) do
      results[i] = h:join()
      reviews[i] = results[i].review
      approved = approved and results[i].verdict == "approve"
    end
    history[round] = results
    if approved then break end
  end
  return { plan = plan, rounds = history }
end
