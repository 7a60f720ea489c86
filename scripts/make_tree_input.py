#!/usr/bin/env python3
"""Writes a deterministic English-like document for apps/tree_summary: the
annual report of a fictional regional water utility, in numbered sections
with headers and paragraphs of varied sentences built from templates and a
seeded RNG. The same arguments always give the same bytes.

  scripts/make_tree_input.py [--bytes N] [--seed S] [OUT]
  (defaults: 200000 bytes, seed 7, bench/inputs/tree_report.txt)

apps/tree_summary/input.txt (the app's small bundled sample) is
  scripts/make_tree_input.py --bytes 12000 --seed 3 apps/tree_summary/input.txt
"""
import argparse
import os
import random

ORG = "the Vale Water Cooperative"
ORG_CAP = "The Vale Water Cooperative"

TOWNS = ["Ashford", "Bramley", "Coldwater", "Dunmore", "Elmstead", "Fernhill", "Greyhaven",
         "Hollins", "Ivybridge", "Kestrel Point", "Larkfield", "Millbrook", "Northcote",
         "Oakham", "Pennington", "Redwater", "Stanmore", "Thornbury", "Upton Vale", "Westmere"]
PEOPLE = ["Ana Ruiz", "Tom Becker", "Priya Nair", "Jonas Lind", "Mei Chen", "Samuel Okafor",
          "Clara Moreau", "Ravi Shah", "Helen Park", "Marek Nowak", "Fatima Idris", "Luca Bianchi",
          "Grace Mensah", "Oskar Berg", "Yuki Tanaka", "Daniel Ortiz"]
ROLES = ["chief engineer", "head of customer service", "finance director", "board chair",
         "lead hydrologist", "safety officer", "operations manager", "head of procurement",
         "community liaison", "laboratory manager"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
SEASONS = ["spring", "summer", "autumn", "winter"]

# Each section: a title and its own nouns, so that the sections read differently.
TOPICS = [
    ("Water supply and demand", ["daily demand", "peak consumption", "reservoir storage",
     "the Holm reservoir", "groundwater abstraction", "the northern wellfield", "bulk supply",
     "summer demand", "per-capita use", "the drought reserve"]),
    ("Treatment and water quality", ["the Kiln Lane treatment works", "turbidity",
     "chlorine residuals", "the filter beds", "sampling points", "nitrate levels",
     "the ultraviolet stage", "lead service pipes", "taste complaints", "the laboratory"]),
    ("The network", ["mains renewal", "leakage", "burst mains", "pressure zones",
     "the trunk main to Oakham", "valve replacement", "district meters", "service connections",
     "the pumping stations", "cast-iron pipes"]),
    ("Customers and billing", ["new connections", "billing disputes", "the call centre",
     "smart meters", "payment plans", "the hardship fund", "online accounts",
     "response times", "written complaints", "the customer panel"]),
    ("Wastewater and the environment", ["storm overflows", "the river Tane", "sludge treatment",
     "the wetland project", "bathing water quality", "odour complaints", "biodiversity surveys",
     "phosphorus removal", "the outfall at Redwater", "tree planting along the banks"]),
    ("People and safety", ["apprentices", "staff turnover", "lost-time injuries",
     "the training centre", "confined-space work", "overtime", "the staff survey",
     "night shifts", "first-aid courses", "the graduate scheme"]),
    ("Finances", ["operating costs", "capital spending", "energy bills", "debt repayments",
     "tariff income", "the reserve fund", "chemical costs", "grant funding",
     "the pension scheme", "interest payments"]),
    ("Projects and capital works", ["the new clear-water tank", "the Stanmore booster station",
     "the solar array at the works", "the telemetry upgrade", "the reservoir dam survey",
     "the mains rehabilitation programme", "the new depot", "the fleet of electric vans",
     "the sludge dryer", "the flood defence wall"]),
    ("Community and partnerships", ["school visits", "the open day", "local farmers",
     "the river trust", "volunteer litter picks", "the university partnership",
     "the town councils", "water-saving kits", "the art competition", "the youth council"]),
    ("Risks and resilience", ["power cuts", "cyber security", "the backup generators",
     "extreme rainfall", "supply chain delays", "the emergency plan", "frozen pipes",
     "contamination risk", "ageing assets", "the mutual aid agreement"]),
]

VERBS_UP = ["rose", "grew", "increased", "climbed", "went up"]
VERBS_DOWN = ["fell", "dropped", "decreased", "declined", "went down"]
ADJ = ["steady", "patchy", "welcome", "modest", "sharp", "gradual", "surprising", "predicted"]
CAUSES = ["the dry summer", "a wet spring", "higher energy prices", "new housing in {town}",
          "the closure of the paper mill", "better monitoring", "the new contract",
          "staff shortages in the first half of the year", "a change in the regulations",
          "the work of the night crews", "an unusually cold winter", "customer feedback"]
OUTCOMES = ["the target for the year was met", "we missed the target by a small margin",
            "the board asked for a review", "costs stayed within the budget",
            "the regulator noted the improvement", "customers noticed the difference",
            "the programme will continue next year", "the trend needs watching",
            "the result was the best in five years", "we changed the plan in {month}"]


def pick(rng, xs):
    return xs[rng.randrange(len(xs))]


def fill(rng, s):
    return s.format(town=pick(rng, TOWNS), month=pick(rng, MONTHS))


def sentence(rng, nouns, year):
    n = pick(rng, nouns)
    n2 = pick(rng, [x for x in nouns if x != n])
    town = pick(rng, TOWNS)
    month = pick(rng, MONTHS)
    person = pick(rng, PEOPLE)
    role = pick(rng, ROLES)
    pct = rng.randint(2, 38)
    num = rng.randint(12, 4800)
    cause = fill(rng, pick(rng, CAUSES))
    outcome = fill(rng, pick(rng, OUTCOMES))
    up, down = pick(rng, VERBS_UP), pick(rng, VERBS_DOWN)
    adj = pick(rng, ADJ)
    season = pick(rng, SEASONS)
    templates = [
        f"In {month}, {n} {up} by {pct} percent, mostly because of {cause}.",
        f"Compared with last year, {n} {down} by {pct} percent, and {outcome}.",
        f"{person}, our {role}, said that {n} had been the main concern of the {season}.",
        f"The team in {town} recorded {num} cases related to {n} over the year.",
        f"We spent {num} thousand pounds on {n}, which is {pct} percent more than planned.",
        f"A {adj} change in {n} followed {cause}.",
        f"Work on {n} in {town} started in {month} and finished before the end of the {season}.",
        f"The board discussed {n} at four of its meetings; {outcome}.",
        f"Most of the progress on {n} came from the crews in {town} and {pick(rng, TOWNS)}.",
        f"Customers in {town} wrote to us {num} times about {n}, and we answered nearly all of them within ten days.",
        f"The link between {n} and {n2} is closer than we thought at the start of {year}.",
        f"{person} led a review of {n}; it found {pct} small problems and one larger one.",
        f"Because of {cause}, {n} took up more of the crews' time than in any year since {year - rng.randint(3, 15)}.",
        f"We now measure {n} every week instead of every month, as the regulator asked.",
        f"The {adj} results on {n} were not spread evenly: {town} did much better than {pick(rng, TOWNS)}.",
        f"By the end of {month} the backlog on {n} was down to {rng.randint(3, 90)} jobs.",
        f"The plan for {n} next year is to spend less on repairs and more on prevention.",
        f"{ORG_CAP} shared its figures on {n} with two neighbouring utilities, and the comparison was {adj}.",
        f"Not everything went well: {n} in {town} was delayed for {rng.randint(2, 11)} weeks by {cause}.",
        f"The {role} reported that {n} is now tracked on the same dashboard as {n2}.",
        f"Spending on {n} {up} to {num} thousand pounds, while spending on {n2} {down}.",
        f"A pilot in {town} tested a new approach to {n}; {outcome}.",
    ]
    return pick(rng, templates)


def paragraph(rng, nouns, year):
    return " ".join(sentence(rng, nouns, year) for _ in range(rng.randint(4, 8)))


def make(total_bytes, seed):
    rng = random.Random(seed)
    year = 2020 + rng.randint(0, 4)
    head = (f"Annual report of {ORG}, {year}\n\n"
            f"{ORG_CAP} supplies drinking water to {len(TOWNS)} towns and villages in the Vale "
            f"and treats their wastewater. This report covers the year {year}: what we did, what "
            f"it cost, what went wrong and what we plan next.\n")
    parts = [head]
    budget = max(1, (total_bytes - len(head)) // len(TOPICS))  # bytes per section
    for number, (title, nouns) in enumerate(TOPICS, 1):
        parts.append(f"\n{number}. {title}\n")
        towns = TOWNS[:]
        rng.shuffle(towns)
        size, sub = 0, 0
        while size < budget:
            sub += 1
            area = towns[(2 * sub - 2) % len(towns)] + " and " + towns[(2 * sub - 1) % len(towns)]
            block = [f"\n{number}.{sub} {title} in {area}\n"]
            for _ in range(min(rng.randint(3, 6), max(1, budget // 700))):  # small samples: fewer
                block.append("\n" + paragraph(rng, nouns, year) + "\n")
            block = "".join(block)
            parts.append(block)
            size += len(block)
    text = "".join(parts)
    # Cut at the last paragraph that fits (at least one section is kept).
    if len(text) > total_bytes:
        cut = text.rfind("\n\n", 0, total_bytes)
        if cut > len(head):
            text = text[:cut + 1]
        # No header without a paragraph under it at the end.
        lines = text.rstrip("\n").split("\n")
        while len(lines) > 1 and (not lines[-1] or lines[-1].split(" ")[0].rstrip(".").replace(".", "").isdigit()):
            lines.pop()
        text = "\n".join(lines) + "\n"
    return text


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=200000, help="about this many bytes (default 200000)")
    ap.add_argument("--seed", type=int, default=7, help="RNG seed (default 7)")
    ap.add_argument("out", nargs="?", default=os.path.join(root, "bench", "inputs", "tree_report.txt"))
    a = ap.parse_args()
    text = make(a.bytes, a.seed)
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {a.out}: {len(text.encode('utf-8'))} bytes, {text.count(chr(10) + chr(10))} paragraphs")


if __name__ == "__main__":
    main()
