-- A debate: two or three debaters speak in each of R rounds, all seeing the
-- transcript of the rounds before (so their calls of one round share it as
-- a prefix and run together), each after looking up evidence (an optional
-- braid.sleep); the speeches are appended in order, and a judge reads the
-- whole transcript at the end. Each debater is a coroutine (braid.spawn),
-- so the look-ups of one round overlap.
--   braid run apps/agents/debate.lua "$(cat apps/agents/examples/debate.json)"
-- The argument is one JSON object (apps/agents/README.md):
--   {"motion": "...", "debaters": 2, "rounds": 3, "max_tokens": 32,
--    "tool_seconds": 0.3 (optional, per speech), "judge_max_tokens": 32 (optional)}
return function(spec_json)
  local spec = braid.json.decode(spec_json)
  local n = math.tointeger(spec.max_tokens) or 32
  local j = math.tointeger(spec.judge_max_tokens) or n
  local debaters = math.tointeger(spec.debaters) or 2
  local rounds = math.tointeger(spec.rounds) or 2
  assert(n >= 1 and j >= 1, "max_tokens and judge_max_tokens must be positive integers")
  assert(debaters >= 2 and debaters <= 3, "debaters must be 2 or 3")
  -- Exactly n (j) tokens per output (see react.lua).
  local speak = braid.fn { name = "debate.speak",
    prompt = "{{transcript}}\n{{speaker}}:{{gen speech max_tokens=" .. n .. " min_tokens=" .. n .. "}}" }
  local judge = braid.fn { name = "debate.judge",
    prompt = "{{transcript}}\nJudge: the stronger case was made by{{gen verdict max_tokens=" .. j .. " min_tokens=" .. j .. "}}" }

  local transcript = "A debate on the motion: " .. spec.motion .. ".\n" ..
    "Each debater gives one new argument per round and answers the others."
  for r = 1, rounds do
    local speeches = {}
    for d = 1, debaters do
      speeches[d] = braid.spawn(function(so_far)
        braid.sleep(spec.tool_seconds or 0)             -- look up evidence
        return speak{ transcript = so_far, speaker = "Debater " .. d }.speech:get()
      end, transcript)
    end
    for d = 1, debaters do
      transcript = transcript .. "\nDebater " .. d .. ":" .. speeches[d]:join()
    end
  end
  local verdict = judge{ transcript = transcript }.verdict:get()
  return { rounds = rounds, debaters = debaters, transcript_chars = #transcript, verdict_chars = #verdict }
end
