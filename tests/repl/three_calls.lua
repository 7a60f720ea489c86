-- Three calls, two facts then a comparison of them, sampled with fixed
-- seeds: tests/repl/repl_remote_test.py builds the same DAG input by input
-- in `braid repl --server` and expects these values.
local fact = braid.fn { name = "fact", prompt = [[One fact about {{x}}:{{gen out max_tokens=16 temperature=0.9 seed=7}}]] }
local pair = braid.fn { name = "pair", prompt = [[A: {{a}}
B: {{b}}
The more surprising of the two is{{gen out max_tokens=16 temperature=0.9 seed=11}}]] }

return function()
  local a = fact { x = "owls" }.out
  local b = fact { x = "whales" }.out
  local c = pair { a = a, b = b }.out
  return { a = a, b = b, c = c:get() }
end
