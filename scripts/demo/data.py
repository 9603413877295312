"""Training text for the demo model: Python's documentation (Debian `python3.11-doc`, PSF License) and
seeded, generated chat conversations rendered with the real Qwen3.5 chat template.

    data.py OUT_DIR            # writes OUT_DIR/{tokenizer files, train.npy, heldout_docs.npy, heldout_chat.npy, ...}

Everything is deterministic given the doc package version and SEED.
"""
import json
import random
import re
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DOC_ROOT = Path("/usr/share/doc/python3.11/html/_sources")  # apt-get install python3-doc (Debian 12: 3.11.2)
DOC_DIRS = ["tutorial", "library", "howto", "faq", "reference", "glossary.rst.txt", "using", "extending"]
SEED = 1234

# ---------------------------------------------------------------------------------------------------------
# reST -> plain text
# ---------------------------------------------------------------------------------------------------------
ROLE = re.compile(r":[a-zA-Z:]+:`([^`]*)`")
SIG_DIRECTIVES = ("function", "method", "class", "data", "attribute", "exception", "decorator", "classmethod",
                  "staticmethod", "coroutinefunction", "coroutinemethod", "abstractmethod", "opcode", "describe")


def _role(m):
    s = m.group(1).lstrip("~!")
    lt = s.rfind("<")
    if lt > 0 and s.endswith(">"):
        s = s[:lt].strip()
    return "`" + s + "`"


def clean_inline(s):
    s = ROLE.sub(_role, s)
    s = s.replace("``", "`")
    s = re.sub(r"\|(\w+)\|", r"\1", s)
    s = re.sub(r"`([^`<]+) <[^>]+>`_+", r"\1", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\1", s)
    return s


def rst_to_text(src):
    out = []
    lines = src.splitlines()
    skip_indent = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if stripped == "" or indent > skip_indent:
                continue
            skip_indent = None
        if re.fullmatch(r"[=\-~^*#+\"'`.:_]{3,}", stripped):  # section rules
            continue
        m = re.match(r"\.\. ([\w:-]+)::\s*(.*)", stripped)
        if m:
            kind = m.group(1).split(":")[-1]
            if kind in SIG_DIRECTIVES and m.group(2):
                out.append(" " * indent + clean_inline(m.group(2)))
            elif kind in ("note", "warning", "seealso", "versionadded", "versionchanged", "deprecated",
                          "impl-detail", "tip", "important", "attention", "caution", "hint"):
                label = {"versionadded": "New in version", "versionchanged": "Changed in version",
                         "deprecated": "Deprecated since version", "seealso": "See also:"}.get(kind, kind.capitalize() + ":")
                out.append(" " * indent + (label + " " + clean_inline(m.group(2))).strip())
            elif kind in ("code-block", "sourcecode", "doctest", "testcode", "productionlist", "literalinclude",
                          "highlight", "toctree", "index", "module", "moduleauthor", "sectionauthor", "currentmodule",
                          "include", "only", "image", "figure", "raw", "csv-table", "list-table", "tabularcolumns",
                          "testsetup", "testcleanup", "testoutput", "audit-event", "availability", "c:function",
                          "opcode", "program", "option", "cmdoption", "envvar", "glossary", "rubric", "table",
                          "centered", "hlist", "pdbcommand", "2to3fixer", "limited-api-list", "miscnews", "grammar-snippet"):
                if kind in ("toctree", "index", "module", "moduleauthor", "sectionauthor", "currentmodule",
                            "highlight", "include", "literalinclude", "image", "raw", "tabularcolumns",
                            "testsetup", "testcleanup", "limited-api-list", "miscnews", "only", "csv-table"):
                    skip_indent = indent
                elif kind in ("rubric", "glossary", "availability", "program", "option", "cmdoption", "envvar"):
                    if m.group(2):
                        out.append(" " * indent + clean_inline(m.group(2)))
            else:
                skip_indent = indent
            continue
        if stripped.startswith(".. ") or stripped == "..":  # comments, targets
            skip_indent = indent
            continue
        if re.match(r"\s+:[\w-]+:( |$)", line) and out and out[-1].strip() == "":
            continue
        out.append(clean_inline(line.rstrip()))
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def doc_files():
    files = []
    for d in DOC_DIRS:
        p = DOC_ROOT / d
        files += [p] if p.is_file() else sorted(p.rglob("*.rst.txt"))
    return files


def heldout_file(path):
    return zlib.crc32(str(path.relative_to(DOC_ROOT)).encode()) % 20 == 0


def doc_chunks(text, max_chars=1600):
    paras = re.split(r"\n\s*\n", text)
    cur, out = "", []
    for p in paras:
        if cur and len(cur) + len(p) > max_chars:
            out.append(cur)
            cur = ""
        cur = (cur + "\n\n" + p) if cur else p
    if cur:
        out.append(cur)
    return out


# ---------------------------------------------------------------------------------------------------------
# API entries (for documentation Q&A chats): `.. function:: name(sig)` + first paragraph of its body
# ---------------------------------------------------------------------------------------------------------
def api_entries():
    entries = []
    for f in sorted((DOC_ROOT / "library").glob("*.rst.txt")):
        lines = f.read_text(errors="replace").splitlines()
        module = None
        for i, line in enumerate(lines):
            m = re.match(r"\.\. (?:py:)?(?:module|currentmodule):: ([\w.]+)", line.strip())
            if m:
                module = m.group(1)
                continue
            m = re.match(r"(\s*)\.\. (?:py:)?(function|method|class|exception):: ([\w.]+)(\(.*\))?\s*$", line)
            if not m or module is None:
                continue
            ind = len(m.group(1))
            body, j = [], i + 1
            while j < len(lines) and (lines[j].strip() == "" or len(lines[j]) - len(lines[j].lstrip()) > ind):
                if lines[j].strip() == "" and body:
                    break
                s = lines[j].strip()
                if s and not s.startswith("..") and not re.match(r"^(\w[\w.]*)\(.*\)$", s) and not s.startswith(":"):
                    body.append(s)
                j += 1
            if not body:
                continue
            text = clean_inline(" ".join(body))
            if len(text) < 30 or len(text) > 420:
                continue
            name = m.group(3)
            full = name if name.startswith(module + ".") or m.group(2) == "method" else f"{module}.{name}"
            sig = clean_inline(m.group(4) or "")
            entries.append(dict(kind=m.group(2), name=full, short=name.split(".")[-1], sig=sig, text=text,
                                module=module))
    return entries


# ---------------------------------------------------------------------------------------------------------
# generated chats
# ---------------------------------------------------------------------------------------------------------
SYSTEMS = ["You are a helpful assistant.", "You are rill-demo, a small helpful assistant.",
           "You are a concise assistant. Answer briefly.", "You are a helpful assistant who knows Python well."]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"), ("Canada", "Ottawa"), ("Brazil", "Brasília"),
            ("Argentina", "Buenos Aires"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Australia", "Canberra"),
            ("Russia", "Moscow"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
            ("Poland", "Warsaw"), ("Greece", "Athens"), ("Turkey", "Ankara"), ("Mexico", "Mexico City"),
            ("Peru", "Lima"), ("Chile", "Santiago"), ("Ireland", "Dublin"), ("Austria", "Vienna"),
            ("Netherlands", "Amsterdam"), ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Denmark", "Copenhagen"),
            ("South Korea", "Seoul"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"),
            ("Nigeria", "Abuja"), ("Morocco", "Rabat"), ("Iceland", "Reykjavík"), ("Hungary", "Budapest"),
            ("Czechia", "Prague"), ("New Zealand", "Wellington")]
PLANETS = ["Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WORDS = ["apple", "river", "python", "garden", "window", "planet", "silver", "orange", "rocket", "summer", "bridge",
         "forest", "market", "pencil", "castle", "tiger", "cloud", "music", "paper", "engine", "coffee", "dragon",
         "island", "letter", "mirror", "number", "ocean", "pocket", "rabbit", "school", "stone", "table", "yellow",
         "winter", "violet", "camera", "butter", "candle", "doctor", "flower"]
CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Madrid", "Seoul", "Rome", "Dublin", "Vienna", "Prague"]
WEATHER = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy"]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name."}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                                      "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                                     "required": ["expression"]}}},
]
CODE_TASKS = [
    ("returns the square of a number", "square", "def square(x):\n    return x * x"),
    ("checks whether a number is even", "is_even", "def is_even(n):\n    return n % 2 == 0"),
    ("reverses a string", "reverse", "def reverse(s):\n    return s[::-1]"),
    ("returns the sum of a list of numbers", "total", "def total(numbers):\n    return sum(numbers)"),
    ("returns the largest item of a list", "largest", "def largest(items):\n    return max(items)"),
    ("counts the vowels in a string", "count_vowels",
     "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in \"aeiou\")"),
    ("computes the factorial of n", "factorial",
     "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result"),
    ("returns the average of a list of numbers", "average",
     "def average(numbers):\n    return sum(numbers) / len(numbers)"),
    ("removes duplicates from a list while keeping the order", "unique",
     "def unique(items):\n    return list(dict.fromkeys(items))"),
    ("reads a text file and returns its lines", "read_lines",
     "def read_lines(path):\n    with open(path) as f:\n        return f.read().splitlines()"),
    ("checks whether a string is a palindrome", "is_palindrome",
     "def is_palindrome(s):\n    return s == s[::-1]"),
    ("returns the n-th Fibonacci number", "fib",
     "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a"),
    ("counts how often each word occurs in a text", "word_counts",
     "from collections import Counter\n\ndef word_counts(text):\n    return Counter(text.split())"),
    ("converts Celsius to Fahrenheit", "to_fahrenheit", "def to_fahrenheit(c):\n    return c * 9 / 5 + 32"),
]


class ChatGen:
    def __init__(self, seed, api):
        self.r = random.Random(seed)
        self.api = api

    def pick(self, xs):
        return self.r.choice(xs)

    # each returns (user, thinking, answer) or a full message list (for tools)
    def api_qa(self):
        e = self.pick(self.api)
        n = e["name"]
        call = f"{n}{e['sig']}" if e["sig"] else n
        q = self.pick([f"What does {n} do?", f"Explain {n} in Python.", f"How do I use {n}?",
                       f"What is `{n}`?", f"Tell me about {n}.", f"In Python, what is {n} for?"])
        kind = {"function": "a function", "method": "a method", "class": "a class", "exception": "an exception"}[e["kind"]]
        think = (f"The user asks about {n}. It is {kind} in the {e['module']} module"
                 + (f", with the signature {e['short']}{e['sig']}" if e["sig"] else "") + ". "
                 + self.pick(["I will summarise its documentation.", "I will explain what it does.",
                              "The documentation describes it briefly."]))
        a = f"`{call}` is {kind} in the `{e['module']}` module.\n\n{e['text']}"
        return q, think, a

    def arithmetic(self):
        op = self.pick(["+", "-", "*"])
        a, b = self.r.randint(0, 99 if op != "*" else 20), self.r.randint(0, 99 if op != "*" else 20)
        c = {"+": a + b, "-": a - b, "*": a * b}[op]
        q = self.pick([f"What is {a} {op} {b}?", f"Compute {a} {op} {b}.", f"{a} {op} {b} = ?", f"Calculate {a}{op}{b}"])
        word = {"+": "adding", "-": "subtracting", "*": "multiplying"}[op]
        think = f"This is {word} two numbers: {a} {op} {b} = {c}."
        return q, think, f"{a} {op} {b} = {c}."

    def capital(self):
        c, cap = self.pick(CAPITALS)
        q = self.pick([f"What is the capital of {c}?", f"Which city is the capital of {c}?", f"Capital of {c}?"])
        return q, f"The capital of {c} is {cap}.", f"The capital of {c} is {cap}."

    def sequence_fact(self):
        kind = self.r.randint(0, 2)
        if kind == 0:
            i = self.r.randint(0, 6)
            q = self.pick([f"What day comes after {DAYS[i]}?", f"Which day follows {DAYS[i]}?"])
            a = f"The day after {DAYS[i]} is {DAYS[(i + 1) % 7]}."
            return q, f"The days of the week are {', '.join(DAYS)}. After {DAYS[i]} comes {DAYS[(i + 1) % 7]}.", a
        if kind == 1:
            i = self.r.randint(0, 11)
            q = self.pick([f"What month comes after {MONTHS[i]}?", f"Which month follows {MONTHS[i]}?"])
            return q, f"After {MONTHS[i]} comes {MONTHS[(i + 1) % 12]}.", f"The month after {MONTHS[i]} is {MONTHS[(i + 1) % 12]}."
        i = self.r.randint(0, 7)
        q = self.pick([f"Which planet is number {i + 1} from the Sun?", f"Name planet number {i + 1} of the solar system."])
        return q, f"The planets in order are {', '.join(PLANETS)}. Number {i + 1} is {PLANETS[i]}.", \
            f"{PLANETS[i]} is planet number {i + 1} from the Sun."

    def word_task(self):
        w = self.pick(WORDS)
        k = self.r.randint(0, 4)
        if k == 0:
            return (f"Reverse the word \"{w}\".", f"The letters of {w} are {' '.join(w)}. Reversed: {' '.join(w[::-1])}.",
                    f"\"{w}\" reversed is \"{w[::-1]}\".")
        if k == 1:
            return (f"How many letters are in \"{w}\"?", f"{w}: {' '.join(w)}. That is {len(w)} letters.",
                    f"\"{w}\" has {len(w)} letters.")
        if k == 2:
            return (f"Write \"{w}\" in capital letters.", f"Uppercase of {w} is {w.upper()}.", w.upper())
        if k == 3:
            return (f"What is the first letter of \"{w}\"?", f"{w} starts with {w[0]}.",
                    f"The first letter of \"{w}\" is \"{w[0]}\".")
        ws = self.r.sample(WORDS, self.r.randint(3, 5))
        return (f"Sort these words alphabetically: {', '.join(ws)}.", f"Alphabetical order: {', '.join(sorted(ws))}.",
                ", ".join(sorted(ws)))

    def numbers_task(self):
        xs = [self.r.randint(0, 50) for _ in range(self.r.randint(3, 6))]
        k = self.r.randint(0, 2)
        s = ", ".join(map(str, xs))
        if k == 0:
            return (f"Sort the numbers {s}.", f"In increasing order: {', '.join(map(str, sorted(xs)))}.",
                    ", ".join(map(str, sorted(xs))))
        if k == 1:
            return (f"What is the largest of {s}?", f"Comparing {s}: the largest is {max(xs)}.",
                    f"The largest number is {max(xs)}.")
        return (f"What is the sum of {s}?", f"{' + '.join(map(str, xs))} = {sum(xs)}.", f"The sum is {sum(xs)}.")

    def code_task(self):
        desc, name, code = self.pick(CODE_TASKS)
        q = self.pick([f"Write a Python function that {desc}.", f"How can I write a function that {desc} in Python?",
                       f"Give me Python code that {desc}."])
        think = f"The user wants a function that {desc}. I will call it {name} and keep it short."
        a = f"Here is a function that {desc}:\n\n```python\n{code}\n```"
        return q, think, a

    def chitchat(self):
        k = self.r.randint(0, 3)
        if k == 0:
            return (self.pick(["Hello!", "Hi", "Hey there", "Good morning!", "Hello, how are you?"]),
                    "The user greets me. I will greet them back and offer help.",
                    self.pick(["Hello! How can I help you today?", "Hi! What can I do for you?",
                               "Hello! I am doing well. How can I help?"]))
        if k == 1:
            return (self.pick(["Who are you?", "What is your name?", "What are you?"]),
                    "The user asks who I am. I am rill-demo, a small model.",
                    "I am rill-demo, a small demo language model. I was trained on Python's documentation "
                    "and simple conversations, so my answers are short and often imperfect.")
        if k == 2:
            return (self.pick(["Thank you!", "Thanks", "Thanks a lot."]), "The user thanks me.",
                    self.pick(["You're welcome!", "Glad I could help.", "You're welcome. Anything else?"]))
        return (self.pick(["What can you do?", "How can you help me?"]), "The user asks what I can do.",
                "I can answer simple questions about Python and its standard library, do small arithmetic, "
                "and handle short word and number tasks.")

    def tool_chat(self):
        if self.r.random() < 0.6:
            city = self.pick(CITIES)
            t, w = self.r.randint(-5, 32), self.pick(WEATHER)
            user = self.pick([f"What's the weather in {city}?", f"Is it cold in {city} right now?",
                              f"Tell me the weather in {city}."])
            call = {"name": "get_weather", "arguments": {"city": city}}
            result = json.dumps({"city": city, "temperature_c": t, "condition": w})
            think1 = f"The user wants the current weather in {city}. I should call get_weather with city={city}."
            think2 = f"The tool says {t} degrees and {w} in {city}."
            final = f"It is currently {t} °C and {w} in {city}."
        else:
            a, b = self.r.randint(100, 999), self.r.randint(100, 999)
            expr = f"{a} * {b}"
            user = self.pick([f"Use the calculator to compute {expr}.", f"What is {expr}? Use a tool."])
            call = {"name": "calculator", "arguments": {"expression": expr}}
            result = str(a * b)
            think1 = f"The user wants {expr}. I will call the calculator."
            think2 = f"The calculator returned {a * b}."
            final = f"{expr} = {a * b}."
        msgs = [{"role": "user", "content": user},
                {"role": "assistant", "content": "", "reasoning_content": think1,
                 "tool_calls": [{"type": "function", "function": call}]},
                {"role": "tool", "content": result},
                {"role": "assistant", "content": final, "reasoning_content": think2}]
        return msgs

    def qa(self):
        f = self.r.choices([self.api_qa, self.arithmetic, self.capital, self.sequence_fact, self.word_task,
                            self.numbers_task, self.code_task, self.chitchat],
                           weights=[30, 14, 8, 6, 10, 8, 10, 6])[0]
        return f()

    def conversation(self, tok):
        think_on = self.r.random() < 0.75
        if self.r.random() < 0.08:
            msgs = self.tool_chat()
            if self.r.random() < 0.5:
                msgs.insert(0, {"role": "system", "content": self.pick(SYSTEMS)})
            return tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
        msgs = []
        if self.r.random() < 0.5:
            msgs.append({"role": "system", "content": self.pick(SYSTEMS)})
        for _ in range(2 if self.r.random() < 0.2 else 1):
            q, think, a = self.qa()
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": a, "reasoning_content": think if think_on else ""})
        return tok.apply_chat_template(msgs, tokenize=False)


# ---------------------------------------------------------------------------------------------------------
def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = common.write_tokenizer(out)
    tok = common.load_tokenizer(out)
    eot = ids["<|endoftext|>"]

    train_docs, held_docs = [], []
    for f in doc_files():
        text = rst_to_text(f.read_text(errors="replace"))
        if len(text) < 200:
            continue
        (held_docs if heldout_file(f) else train_docs).extend(doc_chunks(text))
    api = api_entries()
    print(f"docs: {len(train_docs)} train chunks, {len(held_docs)} held-out chunks; {len(api)} API entries")

    def encode(texts):
        return [tok(t, add_special_tokens=False)["input_ids"] + [eot] for t in texts]

    g = ChatGen(SEED, api)
    train_chats = [g.conversation(tok) for _ in range(14000)]
    gh = ChatGen(SEED + 1, api)
    held_chats = [gh.conversation(tok) for _ in range(300)]
    (out / "sample_chats.txt").write_text("\n==========\n".join(train_chats[:40]))

    td, hd, tc, hc = encode(train_docs), encode(held_docs), encode(train_chats), encode(held_chats)
    r = random.Random(SEED)
    stream = [("d", x) for x in td] + [("c", x) for x in tc]
    r.shuffle(stream)
    train = np.array([t for _, x in stream for t in x], dtype=np.int32)
    np.save(out / "train.npy", train)
    np.save(out / "heldout_docs.npy", np.array([t for x in hd for t in x], dtype=np.int32))
    np.save(out / "heldout_chat.npy", np.array([t for x in hc for t in x], dtype=np.int32))
    stats = dict(train_tokens=int(train.size), train_doc_tokens=sum(map(len, td)), train_chat_tokens=sum(map(len, tc)),
                 heldout_doc_tokens=sum(map(len, hd)), heldout_chat_tokens=sum(map(len, hc)),
                 train_doc_chunks=len(td), train_chats=len(tc), heldout_doc_chunks=len(hd), heldout_chats=len(hc),
                 api_entries=len(api), special_ids=ids)
    (out / "data_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps({k: v for k, v in stats.items() if k != "special_ids"}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/demo/data")
