-- A ReAct-style tool loop. The model writes "Action: TOOL[INPUT]"; tools are
-- plain Lua functions (a calculator and a lookup table); each observation is
-- appended to the transcript for the next step, until the model answers or
-- the step budget runs out. Each step is a get, so the loop runs inside the
-- runtime with no client round trips.
--   braid run apps/react/app.lua [QUESTION]
local facts = {
  ["paris"] = "Paris has about 2.1 million inhabitants.",
  ["rome"] = "Rome has about 2.8 million inhabitants.",
  ["berlin"] = "Berlin has about 3.7 million inhabitants.",
}

local tools = {}
function tools.lookup(arg)
  local key = arg:lower():gsub("[^%a]", "")
  return facts[key] or ("no entry for " .. arg)
end
function tools.calculator(arg)
  if not arg:match("^[%d%s%.%+%-%*/%(%)]+$") then return "error: only numbers and + - * / ( )" end
  local f = load("return " .. arg, "calc", "t", {})   -- a text chunk with an empty environment
  local ok, v = pcall(f)
  return ok and tostring(v) or "error: " .. tostring(v)
end

local step = braid.fn { name = "step", system = [[
You solve questions with tools. Tools: lookup[city] returns facts about a city; calculator[expression] computes arithmetic.
Reply with exactly one line, either "Action: lookup[...]", "Action: calculator[...]" or "Answer: ...".
Example:
Question: What is the population of Paris times two?
Action: lookup[Paris]
Observation: Paris has about 2.1 million inhabitants.
Action: calculator[2.1 * 2]
Observation: 4.2
Answer: about 4.2 million]], prompt = [[
{{transcript}}
{{gen action max_tokens=32 stop="\n"}}]] }

return function(question)
  question = question or "How many more inhabitants does Berlin have than Rome, in millions?"
  local transcript = "Question: " .. question
  local trace = {}
  for i = 1, 3 do
    local line = step{ transcript = transcript }.action:get{ criteria = "latency" }
    local tool, arg = line:match("(%a+)%[(.-)%]")
    local entry = { output = line }
    if tools[tool] then
      entry.tool, entry.input = tool, arg
      entry.observation = tools[tool](arg)
      transcript = transcript .. "\n" .. line .. "\nObservation: " .. entry.observation
    else
      transcript = transcript .. "\n" .. line
    end
    trace[i] = entry
    if not entry.tool and line:lower():find("answer") then break end
  end
  local final = step{ transcript = transcript .. "\nNow give the final answer." }.action
  return { question = question, steps = trace, answer = final:get{ criteria = "latency" } }
end
