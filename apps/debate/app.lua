-- A debate between two agents, written round by round the way a first
-- program is: in each round both sides answer the transcript so far; the
-- program reads one reply, then the other (a get per reply), and appends
-- them to the transcript string the next round reads, so the rounds form one
-- strict chain. Each reply is also fact-checked, side work that nothing
-- reads until the result is built at the end; a judge then picks the winner
-- with `select`.
--   braid run apps/debate/app.lua [ROUNDS] ["TOPIC"]
--   (default: 3 rounds on "free public transport in cities")
-- The speeches are sampled (with a fixed seed, so a run repeats): greedy
-- decoding makes a small model repeat the previous speech word for word.
local argue = braid.fn { name = "argue", system = "You are a debater. You argue in one or two sentences.", prompt = [[
A debate on {{motion}}.
{{transcript}}
Give one new reason {{stance}} {{motion}} that nobody has given yet.{{gen reply max_tokens=40 stop="\n" temperature=0.8 seed=11}}]] }

local fact_check = braid.fn { name = "fact_check", system = "You are a careful fact checker.", prompt = [[
Check the facts in this statement: "{{claim}}"
Name the main factual claim and say if it is true.{{gen note max_tokens=32 stop="\n"}}
Is the statement factually sound? {{select rating choices=["yes", "no"]}}]] }

local judge = braid.fn { name = "judge", system = "You judge debates fairly.", prompt = [[
A debate on {{motion}}:
{{transcript}}

Which side made the stronger case? Winner: {{select winner choices=["pro", "con"]}}]] }

return function(rounds, motion)
  rounds = tonumber(rounds) or 3
  motion = motion or "free public transport in cities"
  local transcript = ""                                 -- "Pro: ...\nCon: ..." so far
  local spoken, checks = {}, {}
  for r = 1, rounds do
    -- Both sides answer the same transcript; the program reads one reply,
    -- then the other, and appends them.
    local so_far = r == 1 and "Nobody has spoken yet." or transcript
    local pro = argue{ motion = motion, stance = "for", transcript = so_far }.reply
    local con = argue{ motion = motion, stance = "against", transcript = so_far }.reply
    for _, side in ipairs({ { "pro", pro }, { "con", con } }) do
      local text = side[2]:get()
      checks[#checks + 1] = fact_check{ claim = text }  -- read only at the end
      spoken[#spoken + 1] = { round = r, side = side[1], text = text }
      if transcript ~= "" then transcript = transcript .. "\n" end
      transcript = transcript .. (side[1] == "pro" and "Pro: " or "Con: ") .. text
    end
  end
  local winner = judge{ motion = motion, transcript = transcript }.winner
  local result = { motion = motion, turns = spoken, fact_checks = {} }
  for i, c in ipairs(checks) do
    result.fact_checks[i] = { turn = i, note = c.note:get(), rating = c.rating:get() }
  end
  result.verdict = winner:get()
  return result
end
