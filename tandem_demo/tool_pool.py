"""Generated tools: names, arguments, descriptions and values drawn combinatorially from word pools, so a
model trained on them has to read the tool list instead of memorising a catalog.

A tool is verb_noun (lookup_invoice, fetch_order_status); its arguments are a base (id, date, email,
count, ...) optionally prefixed by a qualifier (billing_email, due_date, max_count). Every pool is split
in two: `vocab("train")` and `vocab("heldout")` share no noun and no qualifier, and share only the
common verbs, so every held-out tool name and every qualified held-out argument name is absent from the
training pools (tests check it). Values (cities, people, dates, ...) come from shared pools: the model
is meant to copy them from the request, not to know them.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from tandem_demo import pools as P

# verb in the tool name -> ways a user says it. The last five are held out.
VERBS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("get", ("get", "show me", "give me")), ("lookup", ("look up", "find", "pull up")),
    ("fetch", ("fetch", "retrieve", "get")), ("find", ("find", "search for", "locate")),
    ("create", ("create", "make", "add")), ("schedule", ("schedule", "set up", "arrange")),
    ("cancel", ("cancel", "call off", "drop")), ("update", ("update", "change", "edit")),
    ("delete", ("delete", "remove", "erase")), ("send", ("send", "dispatch", "deliver")),
    ("list", ("list", "show all", "enumerate")), ("search", ("search", "search for", "query")),
    ("check", ("check", "verify", "inspect")), ("book", ("book", "reserve", "secure")),
    ("track", ("track", "follow", "trace")), ("archive", ("archive", "file away", "store")),
    ("approve", ("approve", "accept", "sign off")), ("submit", ("submit", "file", "hand in")),
    ("start", ("start", "begin", "launch")), ("stop", ("stop", "halt", "end")),
    ("rename", ("rename", "retitle", "relabel")), ("assign", ("assign", "give", "allocate")),
    ("export", ("export", "download", "save out")), ("count", ("count", "tally", "total")),
    ("renew", ("renew", "extend", "prolong")), ("register", ("register", "sign up", "enroll")),
    ("close", ("close", "shut", "finish")), ("open", ("open", "start", "create")),
    ("share", ("share", "send", "forward")), ("pause", ("pause", "suspend", "hold")),
    ("estimate", ("estimate", "calculate", "work out")), ("reserve", ("reserve", "book", "hold")),
    ("restore", ("restore", "recover", "bring back")), ("summarize", ("summarize", "sum up", "recap")),
    ("print", ("print", "print out", "output")),
    # held out
    ("reconcile", ("reconcile", "match up", "balance")), ("validate", ("validate", "confirm", "check")),
    ("refund", ("refund", "pay back", "reimburse")), ("notify", ("notify", "alert", "tell")),
    ("resolve", ("resolve", "settle", "fix")),
)
HELDOUT_VERBS = frozenset({"reconcile", "validate", "refund", "notify", "resolve"})

# nouns (one or two words; the tool name joins them with _). Held out: the HELDOUT_NOUNS below.
NOUNS: tuple[str, ...] = (
    "order", "order status", "shipment", "package", "delivery", "ticket", "support ticket", "flight",
    "hotel room", "car rental", "train ticket", "recipe", "song", "playlist", "podcast", "album", "contact",
    "account", "balance", "payment", "subscription", "customer", "employee", "patient", "appointment",
    "reservation", "course", "student", "grade", "library book", "movie", "restaurant", "parking spot",
    "bike", "vehicle", "device", "sensor", "alarm", "thermostat", "light", "door lock", "camera", "printer",
    "server", "database", "backup", "deployment", "repository", "pull request", "issue", "build", "container",
    "domain", "certificate", "user", "group", "team", "project", "task", "milestone", "sprint", "report",
    "document", "spreadsheet", "folder", "photo", "video", "note", "reminder", "event", "invitation",
    "survey", "poll", "coupon", "gift card", "wishlist", "cart", "product", "inventory", "warehouse",
    "supplier", "purchase", "loan", "budget", "expense", "tax return", "insurance claim", "policy", "lease",
    "apartment", "room", "desk", "locker", "pet", "vaccination", "prescription", "workout", "meal plan",
    "grocery list", "garden", "plant", "weather alert", "news feed", "article", "newsletter", "blog post",
    "comment", "review", "rating", "translation", "dictionary entry", "quote", "trip", "itinerary",
    "visa application", "passport", "boarding pass",
    # held out
    "invoice", "meeting", "ledger", "receipt", "shift", "timesheet", "payroll", "vendor", "contract",
    "webinar", "lab result", "donation", "scholarship", "membership", "voucher", "ferry", "cabin",
    "warranty", "recall", "audit", "license",
)
HELDOUT_NOUNS = frozenset({
    "invoice", "meeting", "ledger", "receipt", "shift", "timesheet", "payroll", "vendor", "contract",
    "webinar", "lab result", "donation", "scholarship", "membership", "voucher", "ferry", "cabin",
    "warranty", "recall", "audit", "license",
})

# argument bases: name -> kind of value (see `draw_value`)
BASES: tuple[tuple[str, str], ...] = (
    ("id", "id"), ("name", "person"), ("email", "email"), ("date", "date"), ("time", "time"),
    ("city", "city"), ("count", "integer"), ("limit", "integer"), ("quantity", "integer"),
    ("amount", "number"), ("price", "number"), ("note", "text"), ("message", "text"), ("title", "title"),
    ("label", "word"), ("code", "code"), ("status", "enum"), ("priority", "enum"), ("format", "enum"),
    ("level", "enum"), ("mode", "enum"), ("query", "topic"), ("flag", "boolean"), ("path", "path"),
)
# qualifiers prefixed to a base (billing_email). The last twelve are held out.
QUALIFIERS: tuple[str, ...] = (
    "customer", "owner", "start", "end", "due", "billing", "shipping", "contact", "max", "min", "target",
    "source", "primary", "backup", "home", "work", "reference", "account", "display", "sender", "recipient",
    "manager", "guest", "new", "old", "default", "first", "last", "parent", "team", "device", "return",
    # held out
    "payer", "auditor", "sponsor", "holder", "venue", "tenant", "carrier", "claimant", "host", "reviewer",
    "deadline", "renewal",
)
HELDOUT_QUALIFIERS = frozenset({"payer", "auditor", "sponsor", "holder", "venue", "tenant", "carrier",
                                "claimant", "host", "reviewer", "deadline", "renewal"})

ENUMS: tuple[tuple[str, ...], ...] = (
    ("low", "medium", "high"), ("open", "closed", "pending"), ("pdf", "csv", "json"), ("draft", "final"),
    ("daily", "weekly", "monthly"), ("small", "medium", "large"), ("basic", "standard", "premium"),
    ("email", "sms", "push"), ("asc", "desc"), ("morning", "afternoon", "evening"), ("red", "green", "blue"),
    ("economy", "business", "first"), ("active", "paused", "archived"), ("public", "private"),
)
WORDS = ("urgent", "personal", "family", "client", "q3", "travel", "home", "alpha", "beta", "archive",
         "review", "summer", "winter", "vip", "internal", "legal", "sales", "ops", "research", "kids")
TOOL_DESCRIPTIONS = ("{V} a {n}.", "{V} the {n} with the given details.", "{V} {n}s for the user.",
                     "Use this to {v} a {n}.", "{V} a {n} by its details.", "{V} one {n}.")
ARG_DESCRIPTIONS = {
    "id": ("Identifier of the {q}", "The {q} ID", "Unique {q} identifier"),
    "person": ("Full name of the {q}", "Name of the {q} person", "{Q} name"),
    "email": ("Email address of the {q}", "{Q} email address", "Email to use"),
    "date": ("{Q} date as YYYY-MM-DD", "Date in YYYY-MM-DD format", "The {q} date"),
    "time": ("{Q} time as HH:MM (24h)", "Time of day, HH:MM", "The {q} time"),
    "city": ("City name", "{Q} city, e.g. Paris", "City of the {q}"),
    "integer": ("How many", "{Q} number of items", "A whole number"),
    "number": ("Amount in the account currency", "{Q} amount", "A decimal value"),
    "text": ("Free text", "{Q} message text", "What to write"),
    "title": ("Short title", "{Q} title", "Name shown to people"),
    "word": ("A single tag", "{Q} label", "Short keyword"),
    "code": ("Code of the {q}", "{Q} code, letters and digits", "Alphanumeric code"),
    "enum": ("One of the allowed values", "{Q} setting", "Choose a value"),
    "topic": ("Search terms", "What to look for", "{Q} query text"),
    "boolean": ("Whether to apply this option", "true to enable", "{Q} switch"),
    "path": ("Path of the file", "{Q} file path", "Where the file lives"),
}


# syllables of made-up words ("zorbet", "quimdal"): a name the model cannot have memorised, so the only
# way to get it right is to copy it from the tool list
ONSETS = ("b", "br", "d", "dr", "f", "fl", "g", "gr", "k", "kl", "l", "m", "n", "p", "pl", "qu", "r", "s",
          "st", "t", "tr", "v", "w", "z", "sh", "ch")
NUCLEI = ("a", "e", "i", "o", "u", "ai", "ou", "ee", "y")
CODAS = ("", "", "n", "m", "r", "l", "t", "x", "sk", "nd", "st")


@dataclass(frozen=True)
class Vocab:
    """One split's pools."""
    verbs: tuple[tuple[str, tuple[str, ...]], ...]
    nouns: tuple[str, ...]
    qualifiers: tuple[str, ...]
    nonce_share: float = 0.0   # share of nouns and qualifiers that are made-up words instead of pool words


def vocab(split: str) -> Vocab:
    """split "train" or "heldout": disjoint nouns and qualifiers; held-out tools may use any verb and never
    use made-up words (they are the real-word tools a user would write)."""
    held = split == "heldout"
    nouns = tuple(n for n in NOUNS if (n in HELDOUT_NOUNS) == held)
    quals = tuple(q for q in QUALIFIERS if (q in HELDOUT_QUALIFIERS) == held)
    verbs = VERBS if held else tuple(v for v in VERBS if v[0] not in HELDOUT_VERBS)
    return Vocab(verbs, nouns, quals, 0.0 if held else 0.5)


def nonce_word(rng: random.Random) -> str:
    """A pronounceable made-up word of two or three syllables."""
    return "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
                   for _ in range(rng.choice([2, 2, 3])))


def _noun(rng: random.Random, v: Vocab) -> str:
    return nonce_word(rng) if rng.random() < v.nonce_share else rng.choice(v.nouns)


def _qualifier(rng: random.Random, v: Vocab) -> str:
    return nonce_word(rng) if rng.random() < v.nonce_share * 0.6 else rng.choice(v.qualifiers)


@dataclass(frozen=True)
class Arg:
    name: str          # JSON key, e.g. "billing_email"
    kind: str          # a key of ARG_DESCRIPTIONS
    schema: dict       # its JSON schema
    spoken: str        # how a user names it: "billing email"


@dataclass(frozen=True)
class GenTool:
    name: str                   # "lookup_invoice"
    verb_phrases: tuple[str, ...]
    noun: str                   # "invoice"
    args: tuple[Arg, ...]
    required: tuple[str, ...]

    def spec(self, description: str) -> dict:
        """The OpenAI-style function definition."""
        return {"type": "function", "function": {
            "name": self.name, "description": description,
            "parameters": {"type": "object", "properties": {a.name: a.schema for a in self.args},
                           "required": list(self.required)}}}


def snake(words: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_")


def _arg(rng: random.Random, name: str, kind: str, qual: str) -> Arg:
    desc = rng.choice(ARG_DESCRIPTIONS[kind]).format(q=qual, Q=qual[:1].upper() + qual[1:])
    types = {"integer": "integer", "number": "number", "boolean": "boolean"}
    schema: dict = {"type": types.get(kind, "string"), "description": desc}
    if kind == "enum":
        schema["enum"] = list(rng.choice(ENUMS))
    elif kind == "integer":
        schema |= {"minimum": 1, "maximum": rng.choice([10, 50, 100, 500])}
    elif kind == "number":
        schema["minimum"] = 0
    elif kind == "date" and rng.random() < 0.5:
        schema["pattern"] = r"^\d{4}-\d{2}-\d{2}$"
    elif kind == "time" and rng.random() < 0.5:
        schema["pattern"] = r"^\d{2}:\d{2}$"
    return Arg(name, kind, schema, name.replace("_", " "))


def make_tool(rng: random.Random, v: Vocab, noun: str | None = None, verb: str | None = None) -> GenTool:
    """A fresh tool: verb_noun, one to four arguments (the first required, the rest often optional)."""
    vname, phrases = next(x for x in v.verbs if x[0] == verb) if verb else rng.choice(v.verbs)
    noun = noun or _noun(rng, v)
    noun_key = snake(noun)
    args: list[Arg] = []
    if rng.random() < 0.5:
        args.append(_arg(rng, f"{noun_key}_id", "id", noun))
    total = rng.choices([1, 2, 3, 4], weights=[0.3, 0.35, 0.25, 0.1])[0]
    for _ in range(12):   # bounded: a draw that repeats a name or a second id is skipped
        if len(args) >= total:
            break
        base, kind = rng.choice(BASES)
        if kind == "id" and args:
            continue
        qual = _qualifier(rng, v) if rng.random() < 0.6 else ""
        name = f"{qual}_{base}" if qual else base
        if kind == "boolean":
            name = f"{rng.choice(['include', 'notify', 'use', 'keep'])}_{qual or noun_key}"
        if any(a.name == name for a in args):
            continue
        args.append(_arg(rng, name, kind, qual or noun))
    n_req = rng.randint(1, len(args))
    required = tuple(a.name for a in args[:n_req] if a.kind != "boolean") or (args[0].name,)
    return GenTool(f"{vname}_{noun_key}", phrases, noun, tuple(args), required)


def describe(rng: random.Random, tool: GenTool) -> str:
    v = tool.verb_phrases[0]
    return rng.choice(TOOL_DESCRIPTIONS).format(V=v[:1].upper() + v[1:], v=v, n=tool.noun)


def draw_value(rng: random.Random, arg: Arg, noun: str):
    """A value valid for `arg`'s schema that a user would type."""
    k = arg.kind
    if k == "id":
        prefix = "".join(w[:3] for w in noun.split()).upper()[:4]
        return rng.choice([f"{prefix}-{rng.randint(100, 99999)}", f"{prefix}{rng.randint(1000, 9999)}",
                           f"{rng.randint(10000, 999999)}"])
    if k == "person":
        return f"{rng.choice(P.FIRST_NAMES)} {rng.choice(P.LAST_NAMES)}"
    if k == "email":
        return f"{rng.choice(P.FIRST_NAMES).lower()}.{rng.choice(P.LAST_NAMES).lower()}@{rng.choice(P.EMAIL_DOMAINS)}"
    if k == "date":
        return f"{rng.randint(2025, 2027)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if k == "time":
        return f"{rng.randint(7, 20):02d}:{rng.choice(['00', '15', '30', '45'])}"
    if k == "city":
        return rng.choice(P.CITIES)[0]
    if k == "integer":
        return rng.randint(1, min(arg.schema["maximum"], rng.choice([5, 12, 40])))
    if k == "number":
        return rng.choice([rng.randint(1, 900), round(rng.uniform(1, 900), 2)])
    if k == "text":
        return rng.choice(P.FILE_LINES + P.TODO_TASKS)
    if k == "title":
        return rng.choice(P.EVENT_TITLES)
    if k == "word":
        return rng.choice(WORDS)
    if k == "code":
        return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(rng.randint(4, 6)))
    if k == "enum":
        return rng.choice(arg.schema["enum"])
    if k == "topic":
        return rng.choice(P.TOPICS)
    if k == "boolean":
        return rng.random() < 0.6
    if k == "path":
        return f"{rng.choice(P.DIRS)}/{rng.choice(P.FILE_STEMS)}{rng.choice(P.FILE_EXTS)}"
    raise ValueError(f"unknown argument kind {k!r}")
