"""Long multi-session conversations with questions and evidence ids, generated from a seed, in the style of the
LoCoMo long-conversation benchmark (two people chatting over months of dated sessions).

Each conversation has two speakers and many sessions, each on its own date. Facts are stated once, in one turn,
often with a time relative to the session's date ("yesterday", "last week", "two days ago"); the other speaker's
turn before it may hold the topic (a question), as in real chat. Filler turns by both speakers reuse the facts'
vocabulary, so the words of a question are not enough on their own: who said it, and when, matter. Questions
use other inflections and other words than the statement ("adopted a rescue puppy" -> "When did Ana adopt a
dog?"), and name the person they ask about. Evidence ids are `D<session>:<turn>` as in LoCoMo (both 1-based).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

NAMES = ["Caroline", "Melanie", "Jon", "Gina", "Andrew", "Audrey", "Joanna", "Nate", "Tim", "John", "Maria",
         "Evan", "Sam", "Deborah", "Jolene", "James", "Calvin", "Dave", "Priya", "Tomas"]

# A fact: what the speaker says (in the past tense, `{when}` a time relative to the session's date), what the other
# speaker may have asked just before (the topic), and questions in other words: (kind, text). `{S}` is the speaker.
# Kinds: "what" (the thing), "when" (the date: the evidence holds a time expression).
FACTS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("We finally adopted a rescue puppy {when}, a little beagle we named Biscuit!", "Any news at home?",
     [("what", "What is the name of {S}'s dog?"), ("when", "When did {S} adopt a dog?")]),
    ("I ran my first half marathon {when} in the rain, and finished in just under two hours.",
     "How is the training going?",
     [("what", "How long did {S} take to run the half marathon?"), ("when", "When did {S} run a half marathon?")]),
    ("I signed up for pottery classes {when}; the teacher says my bowls are getting better.", "Tried anything new?",
     [("what", "What kind of classes is {S} taking?"), ("when", "When did {S} sign up for a pottery class?")]),
    ("My sister moved to Lisbon {when} for a job at a design studio.", "How is your family?",
     [("what", "Where did {S}'s sister move to?"), ("when", "When did {S}'s sister move?")]),
    ("I painted a sunrise over the lake {when}, it's hanging in the hallway now.", "Done any painting?",
     [("what", "What did {S} paint?"), ("when", "When did {S} paint the lake sunrise?")]),
    ("We went camping in the mountains {when} and saw the Perseid meteor shower.", "How was the weekend?",
     [("what", "What did {S} see while camping?"), ("when", "When did {S} go camping in the mountains?")]),
    ("I started volunteering at the animal shelter {when}, walking the older dogs.", "What keeps you busy?",
     [("what", "Where does {S} volunteer?"), ("when", "When did {S} start volunteering?")]),
    ("I got promoted to team lead {when}! Still can't quite believe it.", "How's work?",
     [("what", "What position was {S} promoted to?"), ("when", "When was {S} promoted?")]),
    ("I bought a secondhand cello {when} and I'm learning Bach's first suite.", "Still playing music?",
     [("what", "Which instrument is {S} learning?"), ("when", "When did {S} buy a cello?")]),
    ("My grandmother turned ninety {when}; the whole family cooked her favourite stew.", "Any celebrations?",
     [("what", "How old did {S}'s grandmother turn?"), ("when", "When was {S}'s grandmother's birthday?")]),
    ("I went to a support group for new parents {when}, it felt really powerful.", "How are you holding up?",
     [("what", "What kind of group did {S} attend?"), ("when", "When did {S} go to the support group?")]),
    ("We visited Kyoto {when} and the temples were unbelievable.", "Been travelling?",
     [("what", "Which city did {S} visit?"), ("when", "When did {S} travel to Kyoto?")]),
    ("I finished reading 'The Left Hand of Darkness' {when}, what a book.", "Reading anything good?",
     [("what", "What book did {S} read?"), ("when", "When did {S} finish the novel?")]),
    ("I sprained my ankle playing basketball {when}, so no running for a while.", "How's the ankle?",
     [("what", "How did {S} hurt the ankle?"), ("when", "When did {S} get injured?")]),
    ("We planted tomatoes and basil in the community garden {when}.", "What's new in the garden?",
     [("what", "What did {S} plant?"), ("when", "When did {S} plant the vegetables?")]),
    ("I gave a talk about solar panels at the library {when}, about forty people came.", "How did the talk go?",
     [("what", "What was {S}'s talk about?"), ("when", "When did {S} give a presentation?")]),
    ("My son lost his first tooth {when} and we left a coin under the pillow.", "How are the kids?",
     [("what", "What happened to {S}'s son?"), ("when", "When did {S}'s son lose a tooth?")]),
    ("I joined a climbing gym {when} and I'm hooked on bouldering.", "Found a new hobby?",
     [("what", "What sport did {S} take up?"), ("when", "When did {S} join the gym?")]),
    ("We baked a three-layer lemon cake for the neighbours {when}.", "Cooking anything?",
     [("what", "What kind of cake did {S} bake?"), ("when", "When did {S} bake a cake?")]),
    ("I adopted two kittens from the shelter {when}, Pepper and Salt.", "Any pets?",
     [("what", "What are the names of {S}'s cats?"), ("when", "When did {S} get the kittens?")]),
    ("I passed my driving test {when} on the second try.", "Any exams lately?",
     [("what", "Which test did {S} pass?"), ("when", "When did {S} pass the driving exam?")]),
    ("My band played a gig at the Blue Door cafe {when}, we covered Fleetwood Mac.", "Still gigging?",
     [("what", "Where did {S}'s band play?"), ("when", "When did {S} perform at the cafe?")]),
    ("I quit sugar {when} and honestly I sleep better.", "How's your health?",
     [("what", "What did {S} give up?"), ("when", "When did {S} stop eating sugar?")]),
    ("We repainted the kitchen a deep green {when}.", "Any home projects?",
     [("what", "What colour is {S}'s kitchen?"), ("when", "When did {S} repaint the kitchen?")]),
]

WHEN = [("yesterday", 1), ("last week", 7), ("last weekend", 2), ("two days ago", 2), ("last month", 30),
        ("a few days ago", 3), ("last Saturday", 4), ("two weeks ago", 14), ("last Friday", 5)]

# Filler: small talk on the facts' topics, so their words are common.
TOPICS = ["dog", "puppy", "marathon", "running", "pottery", "class", "sister", "painting", "lake", "camping",
          "mountains", "shelter", "volunteering", "work", "team", "cello", "music", "family", "birthday",
          "support group", "Kyoto", "travel", "book", "reading", "ankle", "basketball", "garden", "tomatoes",
          "talk", "library", "kids", "tooth", "climbing", "gym", "cake", "baking", "kittens", "driving", "band",
          "cafe", "sugar", "sleep", "kitchen", "paint"]
FILLER = [
    "That sounds great, I love hearing about your {t}.", "Honestly {t} has been on my mind all week.",
    "Ha, I know what you mean about {t}!", "Did I tell you my cousin is into {t} now?",
    "I should really make more time for {t}.", "We talked about {t} at dinner with friends.",
    "How do you find the energy for {t} and {u}?", "I'm not sure {t} is for me, but {u} maybe.",
    "Thanks for asking! Things have been busy, mostly {t} and {u}.", "That reminds me of the {t} story you told me.",
    "Wow, that's amazing. Keep me posted about the {t}!", "I've been thinking about trying {t} sometime.",
    "My week was quiet, a bit of {t}, a bit of {u}.", "You always have the best {t} stories.",
    "Good luck with the {t}, you deserve it.", "I read an article about {t} and thought of you.",
]


@dataclass
class Question:
    text: str
    evidence: list[str]  # "D3:7": session 3, turn 7
    kind: str


@dataclass
class Conversation:
    speakers: tuple[str, str]
    sessions: list[tuple[datetime, list[tuple[str, str]]]] = field(default_factory=list)  # (date, [(speaker, text)])
    questions: list[Question] = field(default_factory=list)


def generate(seed: int, conversations: int = 6, sessions: int = 15, turns: int = 18) -> list[Conversation]:
    rng = random.Random(seed)
    out = []
    for _ in range(conversations):
        a, b = rng.sample(NAMES, 2)
        conversation = Conversation((a, b))
        date = datetime(2023, 1, 1, 10, 0) + timedelta(days=rng.randint(0, 120), minutes=rng.randint(0, 600))
        facts = rng.sample(FACTS, k=min(len(FACTS), sessions * 2))
        statements = set()
        # each fact is told by one speaker; the same template never by both, so the speaker decides
        plan: list[list[tuple[str, tuple[str, str, list[tuple[str, str]]]]]] = [[] for _ in range(sessions)]
        for number, fact in enumerate(facts):
            plan[number % sessions].append((rng.choice((a, b)), fact))
        for number in range(sessions):
            date += timedelta(days=rng.randint(4, 25), hours=rng.randint(-3, 3))
            lines: list[tuple[str, str]] = []
            speaker = rng.choice((a, b))
            positions = sorted(rng.sample(range(2, turns - 1), len(plan[number])))
            told = dict(zip(positions, plan[number], strict=True))
            month = date.strftime("%B")
            for turn in range(turns):
                if turn in told:
                    teller, (statement, prompt, questions) = told[turn]
                    other = b if teller == a else a
                    if lines and rng.random() < 0.6:
                        lines[-1] = (other, f"{prompt} " + filler(rng))  # the topic comes in the turn before
                    if lines[-1][0] == teller:
                        lines[-1] = (other, lines[-1][1])
                    when, days = rng.choice(WHEN)
                    lines.append((teller, statement.format(when=when)))
                    statements.add(lines[-1][1])
                    evidence = f"D{number + 1}:{turn + 1}"
                    for kind, question in questions:
                        conversation.questions.append(Question(question.format(S=teller), [evidence], kind))
                    topic = next((t for t in TOPICS if t in statement.lower()), None)
                    if topic and number == sessions - 1:  # the bench searches two days after the last session
                        conversation.questions.append(
                            Question(f"What did {teller} say about the {topic} this week?", [evidence], "recent"))
                    elif topic and rng.random() < 0.5:  # a month narrows it: the topic comes up in many sessions
                        conversation.questions.append(
                            Question(f"What did {teller} say about the {topic} in {month}?", [evidence], "month"))
                    speaker = other
                    continue
                lines.append((speaker, filler(rng)))
                speaker = b if speaker == a else a
            conversation.sessions.append((date, lines))
        # later sessions refer back to facts in other words: a mention, not evidence
        for _, lines in conversation.sessions[3:]:
            index = rng.randrange(len(lines))
            if lines[index][1] in statements:
                continue
            topic = rng.choice(TOPICS)
            lines[index] = (lines[index][0], f"Remember what you said about the {topic}? I keep thinking about it.")
        out.append(conversation)
    return out


def filler(rng: random.Random) -> str:
    t, u = rng.sample(TOPICS, 2)
    return rng.choice(FILLER).format(t=t, u=u)
