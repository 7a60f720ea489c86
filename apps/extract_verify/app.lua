-- Extraction with verification in the "get per item" style of a first
-- program: the extraction of every review is asked for in one loop; a
-- second loop reads the items one after another (product, then rating) and
-- asks a verifier whether they match the review (`select` yes/no); a third
-- reads the verdicts one after another and counts them.
--   braid run apps/extract_verify/app.lua [N]   (default: all 12 reviews)
local reviews = {
  "I bought the Aeron desk lamp last month. Bright, sturdy and easy to adjust. Five stars from me.",
  "The Kettlo 2 electric kettle leaks from the lid after two weeks. One star, would not buy again.",
  "Solid little speaker. The Boomba Mini is loud enough for a kitchen, but the battery is weak. Three stars.",
  "My Trailrunner X shoes fell apart after a single hike. Terrible. 1/5.",
  "The Nimbus pillow is soft and keeps its shape. I sleep much better now. 5 out of 5.",
  "Decent blender. The VortexPro does smoothies well but it is very noisy. I give it 3 stars.",
  "The PageTurner e-reader has a sharp screen and the battery lasts weeks. Four stars.",
  "Cheap plastic. The handle of the ChefMate frying pan broke the first time I used it. One star.",
  "The Breeze 300 fan is quiet and cools the whole bedroom. Four out of five.",
  "Love this backpack! The Rover 25 has lots of pockets and survived a rainy week in Scotland. 5 stars.",
  "The ClickPad keyboard works, but two keys stick now and then. Two stars.",
  "Great value. The Lumo smart bulb was easy to set up and the app is simple. Four stars.",
}

-- Plain few-shot completion: a small model copies the pattern reliably.
local extract = braid.fn { name = "extract", prompt = [[
Extract the product name and the star rating from each review.

Review: The Zephyr toaster burns every slice on the lowest setting. Two stars.
Product: Zephyr toaster
Stars: 2

Review: Really happy with the Orbit 4 headphones, comfortable for hours. 4/5.
Product: Orbit 4 headphones
Stars: 4

Review: {{review}}
Product:{{gen product max_tokens=12 stop="\n"}}
Stars: {{select rating choices=["1", "2", "3", "4", "5"]}}]] }

local verify = braid.fn { name = "verify", system = "You check extracted facts against their source.", prompt = [[
Review: "{{review}}"
Does this review give the product "{{product}}" {{rating}} out of 5 stars? Answer yes or no.{{select ok choices=["yes", "no"]}}]] }

return function(n)
  n = math.min(tonumber(n) or #reviews, #reviews)
  local extracted = {}
  for i = 1, n do extracted[i] = extract{ review = reviews[i] } end
  local items = {}
  for i = 1, n do
    local e = extracted[i]
    local product = e.product:get():match("^%s*(.-)%s*$")   -- read one item at a time
    local rating = e.rating:get()
    local ok = verify{ review = reviews[i], product = product, rating = rating }.ok
    items[i] = { review = reviews[i], product = product, rating = tonumber(rating), verified = ok }
  end
  local verified = 0
  for _, it in ipairs(items) do                              -- and the verdicts one at a time
    it.verified = it.verified:get() == "yes"
    if it.verified then verified = verified + 1 end
  end
  return { items = items, verified = verified }
end
