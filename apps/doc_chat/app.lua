-- Questions over one long shared document. Every call starts with the same
-- system prompt holding the document, so its KV cache is computed once and
-- shared; the questions are independent and run as one batch.
--   braid run apps/doc_chat/app.lua [DOC [QUESTIONS]]
--   (defaults: handbook.txt and questions.txt beside this script, one question per line)
return function(doc_path, questions_path)
  local doc = braid.read(doc_path or "handbook.txt")
  local answer = braid.fn { name = "answer",
    system = "Answer questions using only this handbook.\n\n" .. doc, prompt = [[
Question: {{question}}
Answer in one short sentence. {{gen answer max_tokens=40 stop="\n"}}]] }

  local questions = {}
  for line in braid.read(questions_path or "questions.txt"):gmatch("[^\n]+") do
    questions[#questions + 1] = line
  end
  local answers = {}
  for i, q in ipairs(questions) do
    answers[i] = { question = q, answer = answer{ question = q }.answer }
  end
  return { answers = answers }   -- each answer variable is resolved (a throughput-style get)
end
