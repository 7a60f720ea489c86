-- Self-consistency voting: several sampled answers to one question, each
-- reasoned freely and then committed to one of a fixed set of choices with
-- `select` (scored by the model, never free text); the majority wins.
--   braid run apps/voting/app.lua [N_SAMPLES]
local ask = braid.fn { name = "ask", system = "You answer multiple-choice questions.", prompt = [[
Question: Which of these animals is a mammal?
Choices: shark, dolphin, octopus, trout
Think briefly, then answer.
Reasoning: {{gen reasoning max_tokens=32 temperature=0.8 stop="\n"}}
Answer: {{select answer choices=["shark", "dolphin", "octopus", "trout"]}}]] }

return function(n)
  n = tonumber(n) or 3
  local samples = {}
  for i = 1, n do
    samples[i] = ask{}           -- no inputs: the same prompt sampled n times
  end
  local answers = {}
  for i, s in ipairs(samples) do answers[i] = s.answer end
  local votes = braid.get_all(answers, { criteria = "throughput" })  -- all wanted at once: one batch
  local counts = {}
  for _, a in ipairs(votes) do counts[a] = (counts[a] or 0) + 1 end
  local best, best_n = nil, 0
  for _, a in ipairs(votes) do
    if counts[a] > best_n then best, best_n = a, counts[a] end
  end
  return { choices = { "shark", "dolphin", "octopus", "trout" }, votes = votes, answer = best }
end
