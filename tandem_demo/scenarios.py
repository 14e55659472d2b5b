"""One generator per kind of user request: the request text, the tool calls it implies, their results,
and the final answer. Arguments are drawn so that they validate against the tool's schema and match
what the user asked for (the same city, path, amount, ...)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from tandem_demo import pools as P
from tandem_demo.kjv import Verse
from tandem_demo.tools import LANGUAGES


@dataclass(frozen=True)
class Step:
    calls: tuple[tuple[str, dict], ...]   # (tool name, arguments) emitted in one assistant turn
    results: tuple[dict, ...]             # one result per call, same order


@dataclass(frozen=True)
class Exchange:
    user: str
    steps: tuple[Step, ...]               # empty for a direct answer
    answer: str

    @property
    def tool_names(self) -> set[str]:
        return {name for s in self.steps for name, _ in s.calls}


Scenario = Callable[[random.Random, tuple[Verse, ...]], Exchange]


def _one(name: str, args: dict, result: dict) -> tuple[Step, ...]:
    return (Step(((name, args),), (result,)),)


def _date(rng: random.Random) -> tuple[str, str]:
    """(ISO date, how a user might say it)."""
    y, m, d = rng.randint(2025, 2027), rng.randint(1, 12), rng.randint(1, 28)
    iso = f"{y:04d}-{m:02d}-{d:02d}"
    spoken = rng.choice([iso, iso, f"{P.MONTHS[m - 1]} {d}, {y}", f"{d} {P.MONTHS[m - 1]} {y}"])
    return iso, spoken


def _person(rng: random.Random) -> tuple[str, str]:
    first, last = rng.choice(P.FIRST_NAMES), rng.choice(P.LAST_NAMES)
    return first, f"{first.lower()}.{last.lower()}@{rng.choice(P.EMAIL_DOMAINS)}"


def _weather_result(rng: random.Random, city: str, unit: str) -> dict:
    c = rng.randint(-8, 36)
    t = c if unit == "celsius" else round(c * 9 / 5 + 32)
    return {"city": city, "temperature": t, "unit": unit, "condition": rng.choice(P.CONDITIONS),
            "humidity": rng.randint(20, 95)}


def _deg(r: dict) -> str:
    return f"{r['temperature']}°{'C' if r['unit'] == 'celsius' else 'F'}"


def weather(rng, verses) -> Exchange:
    city = rng.choice(P.CITIES)[0]
    unit = rng.choice([None, None, None, "celsius", "fahrenheit"])
    ask = rng.choice([
        "What's the weather in {c}?", "How is the weather in {c} today?", "Is it raining in {c}?",
        "Tell me the current weather for {c}.", "weather {c}", "I'm heading to {c}. What's the weather like there?",
        "How warm is it in {c} right now?", "Can you check the weather in {c} for me?"]).format(c=city)
    if unit:
        ask += rng.choice([" Please use {u}.", " In {u}, please.", " Give me the temperature in {u}."]).format(u=unit)
    args = {"city": city} | ({"unit": unit} if unit else {})
    r = _weather_result(rng, city, unit or "celsius")
    answer = rng.choice([
        "It is {t} and {k} in {c} right now, with {h}% humidity.",
        "{c}: {k}, {t}, humidity {h}%.",
        "The weather in {c} is {k} with a temperature of {t}."]).format(t=_deg(r), k=r["condition"], c=city,
                                                                      h=r["humidity"])
    return Exchange(ask, _one("get_weather", args, r), answer)


def weather_pair(rng, verses) -> Exchange:
    a, b = (c for c, _ in rng.sample(P.CITIES, 2))
    ask = rng.choice(["Compare the weather in {a} and {b}.", "What's the weather in {a} and in {b}?",
                      "Is it warmer in {a} or in {b} today?"]).format(a=a, b=b)
    ra, rb = _weather_result(rng, a, "celsius"), _weather_result(rng, b, "celsius")
    step = Step((("get_weather", {"city": a}), ("get_weather", {"city": b})), (ra, rb))
    answer = (f"In {a} it is {_deg(ra)} and {ra['condition']}; in {b} it is {_deg(rb)} and {rb['condition']}.")
    return Exchange(ask, (step,), answer)


def weather_then_email(rng, verses) -> Exchange:
    city = rng.choice(P.CITIES)[0]
    first, email = _person(rng)
    ask = rng.choice(["Check the weather in {c} and email it to {e}.",
                      "Send {e} an email with the current weather in {c}."]).format(c=city, e=email)
    r = _weather_result(rng, city, "celsius")
    body = f"It is {_deg(r)} and {r['condition']} in {city}."
    s1 = Step((("get_weather", {"city": city}),), (r,))
    s2 = Step((("send_email", {"to": email, "subject": f"Weather in {city}", "body": body}),),
              ({"status": "sent", "message_id": f"msg-{rng.randint(10000, 99999)}"},))
    return Exchange(ask, (s1, s2), f"I emailed the weather in {city} to {email}: {body}")


def _title(topic: str) -> str:
    return topic[0].upper() + topic[1:]


def search(rng, verses) -> Exchange:
    topic = rng.choice(P.TOPICS)
    n = rng.choice([None, None, rng.randint(1, 10)])
    if n:
        ask = rng.choice(["Find {n} articles about {t}.", "Search the web for {t} and show me {n} results.",
                          "Give me the top {n} web results for {t}."]).format(n=n, t=topic)
    else:
        ask = rng.choice(["Search the web for {t}.", "Look up {t} online.", "What does the web say about {t}?",
                          "Can you search for {t}?", "Find information about {t}."]).format(t=topic)
    args = {"query": topic} | ({"max_results": n} if n else {})
    k = min(n or 3, 3)
    sites = rng.sample(P.SITE_NAMES, k)
    suffixes = rng.sample(["a beginner's guide", "what you need to know", "latest news", "explained",
                           "ten facts", "a short history", "common questions"], k)
    slug = topic.replace(" ", "-").lower()
    results = [{"title": f"{_title(topic)}: {s}", "url": f"https://{site}/{slug}"} for s, site in zip(suffixes, sites)]
    answer = rng.choice([
        f"The top result for \"{topic}\" is \"{results[0]['title']}\" ({results[0]['url']}).",
        f"I found {k} results about {topic}. The first one is \"{results[0]['title']}\" at {results[0]['url']}."])
    return Exchange(ask, _one("search_web", args, {"results": results}), answer)


def _path(rng: random.Random) -> str:
    return f"{rng.choice(P.DIRS)}/{rng.choice(P.FILE_STEMS)}{rng.choice(P.FILE_EXTS)}"


def read_file(rng, verses) -> Exchange:
    path, line = _path(rng), rng.choice(P.FILE_LINES)
    ask = rng.choice(["Show me {p}.", "What's in {p}?", "Read the file {p} for me.",
                      "Open {p} and tell me what it says.", "cat {p}"]).format(p=path)
    answer = rng.choice([f"{path} says: \"{line}\"", f"The file {path} contains: {line}"])
    return Exchange(ask, _one("read_file", {"path": path}, {"path": path, "content": line}), answer)


def write_file(rng, verses) -> Exchange:
    path, line = _path(rng), rng.choice(P.FILE_LINES)
    ask = rng.choice(["Write \"{l}\" to {p}.", "Save the text \"{l}\" in {p}.",
                      "Create {p} with the content \"{l}\""]).format(p=path, l=line)
    n = len(line.encode())
    return Exchange(ask, _one("write_file", {"path": path, "content": line}, {"path": path, "bytes_written": n}),
                    f"Saved {n} bytes to {path}.")


def _entries(rng: random.Random, k: int) -> list[str]:
    stems = rng.sample(P.FILE_STEMS, k)
    return [s + rng.choice(P.FILE_EXTS) for s in stems]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def list_directory(rng, verses) -> Exchange:
    d = rng.choice(P.DIRS)
    ask = rng.choice(["List the files in {d}.", "What's inside the {d} folder?", "ls {d}",
                      "Which files are in {d}?"]).format(d=d)
    entries = _entries(rng, rng.randint(1, 5))
    return Exchange(ask, _one("list_directory", {"path": d}, {"path": d, "entries": entries}),
                    f"The {d} directory contains {len(entries)} entries: {_join(entries)}.")


def list_then_read(rng, verses) -> Exchange:
    d = rng.choice(P.DIRS)
    entries = _entries(rng, rng.randint(2, 5))
    target = rng.choice(entries)
    stem = target.rsplit(".", 1)[0]
    line = rng.choice(P.FILE_LINES)
    ask = rng.choice(["Look in {d} and read the {s} file.", "Find the {s} file in {d} and show me its content."]
                     ).format(d=d, s=stem)
    s1 = Step((("list_directory", {"path": d}),), ({"path": d, "entries": entries},))
    s2 = Step((("read_file", {"path": f"{d}/{target}"}),), ({"path": f"{d}/{target}", "content": line},))
    return Exchange(ask, (s1, s2), f"{d}/{target} says: \"{line}\"")


def email(rng, verses) -> Exchange:
    first, addr = _person(rng)
    subject = rng.choice(["Meeting tomorrow", "Invoice", "Quick question", "Weekend plans", "Project update",
                          "Lunch", "Thank you", "Travel plans", "Report", "Reminder"])
    body = rng.choice(["the report is ready", "can we move our call to 3 pm", "thanks for your help yesterday",
                       "see you at the conference", "the invoice is attached", "I will be late today",
                       "let's meet on Friday", "happy birthday", "the build is green again", "please call me back"])
    ask = rng.choice(["Send an email to {a} with the subject \"{s}\" saying {b}.",
                      "Email {f} at {a} about \"{s}\": {b}.",
                      "Write to {a}. Subject: {s}. Message: {b}."]).format(a=addr, s=subject, b=body, f=first)
    result = {"status": "sent", "message_id": f"msg-{rng.randint(10000, 99999)}"}
    return Exchange(ask, _one("send_email", {"to": addr, "subject": subject, "body": body}, result),
                    f"Done. Your email \"{subject}\" to {addr} has been sent.")


def calculator(rng, verses) -> Exchange:
    a, b, c = rng.randint(2, 999), rng.randint(2, 99), rng.randint(2, 50)
    expr = rng.choice([f"{a} + {b}", f"{a} - {b}", f"{a} * {b}", f"{a} / {b}", f"({a} + {b}) * {c}",
                       f"{a} * {b} + {c}", f"({a} - {b}) / {c}"])
    value = eval(expr)  # noqa: S307 - generated arithmetic only
    value = int(value) if float(value).is_integer() else round(value, 4)
    ask = rng.choice(["What is {e}?", "Calculate {e}.", "Compute {e} for me.", "How much is {e}?",
                      "{e} = ?"]).format(e=expr)
    return Exchange(ask, _one("calculator", {"expression": expr}, {"result": value}),
                    rng.choice([f"{expr} = {value}.", f"The result is {value}."]))


def calendar(rng, verses) -> Exchange:
    title = rng.choice(P.EVENT_TITLES)
    iso, spoken = _date(rng)
    args: dict = {"title": title, "date": iso}
    ask = rng.choice(["Schedule \"{t}\" on {d}", "Add \"{t}\" to my calendar on {d}",
                      "Create a calendar event \"{t}\" for {d}"]).format(t=title, d=spoken)
    if rng.random() < 0.6:
        h, m = rng.randint(7, 20), rng.choice([0, 15, 30, 45])
        if m == 0 and rng.random() < 0.4:
            ask += f" at {h % 12 or 12} {'am' if h < 12 else 'pm'}"
        else:
            ask += f" at {h:02d}:{m:02d}"
        args["time"] = f"{h:02d}:{m:02d}"
    if rng.random() < 0.4:
        mins, words = rng.choice([(15, "15 minutes"), (30, "30 minutes"), (45, "45 minutes"), (60, "an hour"),
                                  (90, "90 minutes"), (120, "2 hours"), (60, "60 minutes")])
        ask += f" for {words}"
        args["duration_minutes"] = mins
    if rng.random() < 0.35:
        names = rng.sample(P.FIRST_NAMES, rng.randint(1, 3))
        ask += f" with {_join(names)}"
        args["attendees"] = names
    ask += "."
    when = iso + (f" at {args['time']}" if "time" in args else "")
    return Exchange(ask, _one("create_calendar_event", args,
                              {"event_id": f"evt-{rng.randint(1000, 9999)}", "status": "created"}),
                    f"I added \"{title}\" to your calendar on {when}.")


def stock(rng, verses) -> Exchange:
    company, sym = rng.choice(P.COMPANIES)
    ask = rng.choice([f"What's the stock price of {company}?", f"How is {sym} trading today?",
                      f"Check the share price for {company}.", f"Price of {sym}?"])
    price, change = round(rng.uniform(5, 900), 2), round(rng.uniform(-5, 5), 2)
    r = {"symbol": sym, "price": price, "currency": "USD", "change_percent": change}
    return Exchange(ask, _one("get_stock_price", {"symbol": sym}, r),
                    f"{sym} is trading at {price} USD ({change:+.2f}% today).")


def currency(rng, verses) -> Exchange:
    (fc, fname, fusd), (tc, tname, tusd) = rng.sample(P.CURRENCY_INFO, 2)
    amount = rng.choice([rng.randint(1, 5000), round(rng.uniform(1, 500), 2), rng.randint(1, 100) * 10])
    if rng.random() < 0.5:
        ask = rng.choice(["Convert {a} {f} to {t}.", "How much is {a} {f} in {t}?"]).format(a=amount, f=fc, t=tc)
    else:
        ask = rng.choice(["How much is {a} {f} in {t}?", "Convert {a} {f} into {t}, please."]
                         ).format(a=amount, f=fname, t=tname)
    rate = round(fusd / tusd, 4)
    converted = round(amount * rate, 2)
    r = {"amount": amount, "from": fc, "to": tc, "rate": rate, "converted": converted}
    return Exchange(ask, _one("convert_currency", {"amount": amount, "from_currency": fc, "to_currency": tc}, r),
                    f"{amount} {fc} is about {converted} {tc}.")


def translate(rng, verses) -> Exchange:
    phrase, translations = rng.choice(P.PHRASES)
    li = rng.randrange(len(LANGUAGES))
    lang, out = LANGUAGES[li], translations[li]
    ask = rng.choice(["Translate \"{p}\" into {l}.", "How do you say \"{p}\" in {l}?",
                      "What is \"{p}\" in {l}?"]).format(p=phrase, l=lang)
    return Exchange(ask, _one("translate_text", {"text": phrase, "target_language": lang}, {"translation": out}),
                    f"In {lang}, \"{phrase}\" is \"{out}\".")


def timer(rng, verses) -> Exchange:
    label = rng.choice([None, rng.choice(P.TIMER_LABELS)])
    if rng.random() < 0.2:
        hours = rng.randint(1, 3)
        minutes, said = hours * 60, f"{hours} hour{'s' if hours > 1 else ''}"
    else:
        minutes = rng.randint(1, 90)
        said = f"{minutes} minute{'s' if minutes > 1 else ''}"
    ask = f"Set a timer for {said}" + (f" for the {label}." if label else ".")
    if label and rng.random() < 0.5:
        ask = f"Start a {said} timer called {label}."
    args = {"minutes": minutes} | ({"label": label} if label else {})
    r = {"timer_id": f"t-{rng.randint(100, 999)}", "ends_in_minutes": minutes}
    return Exchange(ask, _one("set_timer", args, r),
                    f"Your {label + ' ' if label else ''}timer for {minutes} minutes is running.")


def _time_result(rng: random.Random, tz: str) -> dict:
    iso, _ = _date(rng)
    return {"timezone": tz, "time": f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}", "date": iso}


def clock(rng, verses) -> Exchange:
    city, tz = rng.choice(P.CITIES)
    place = tz if rng.random() < 0.2 else city
    ask = rng.choice([f"What time is it in {place}?", f"Tell me the local time in {place}.",
                      f"What's the time in {place}?", f"Current time in {place}, please."])
    r = _time_result(rng, tz)
    return Exchange(ask, _one("get_time", {"timezone": tz}, r), f"It is {r['time']} in {place} ({r['date']}).")


def clock_pair(rng, verses) -> Exchange:
    (a, ta), (b, tb) = rng.sample(P.CITIES, 2)
    ra, rb = _time_result(rng, ta), _time_result(rng, tb)
    step = Step((("get_time", {"timezone": ta}), ("get_time", {"timezone": tb})), (ra, rb))
    return Exchange(f"What time is it in {a} and in {b}?", (step,),
                    f"It is {ra['time']} in {a} and {rb['time']} in {b}.")


def todo(rng, verses) -> Exchange:
    task = rng.choice(P.TODO_TASKS)
    args: dict = {"task": task}
    ask = rng.choice(["Add \"{t}\" to my to-do list", "Remind me to {t}", "Put \"{t}\" on my todo list"]
                     ).format(t=task)
    if rng.random() < 0.4:
        iso, spoken = _date(rng)
        ask += f" by {spoken}"
        args["due_date"] = iso
    ask += "."
    if rng.random() < 0.4:
        pr = rng.choice(["low", "medium", "high"])
        ask += f" It's {pr} priority."
        args = {"task": task, "priority": pr} | ({"due_date": args["due_date"]} if "due_date" in args else {})
    extra = (f" with {args['priority']} priority" if "priority" in args else "") + \
            (f", due {args['due_date']}" if "due_date" in args else "")
    return Exchange(ask, _one("create_todo", args, {"todo_id": f"todo-{rng.randint(100, 999)}", "status": "added"}),
                    f"Added \"{task}\" to your to-do list{extra}.")


_MODE_WORDS = {"driving": ("by car", "driving"), "walking": ("on foot", "walking"),
               "bicycling": ("by bike", "cycling"), "transit": ("by public transport", "by train")}


def directions(rng, verses) -> Exchange:
    if rng.random() < 0.5:
        o, d = rng.sample(P.PLACES, 2)
    else:
        o, d = (c for c, _ in rng.sample(P.CITIES, 2))
    mode = rng.choice([None, None, "driving", "walking", "bicycling", "transit"])
    said = f" {rng.choice(_MODE_WORDS[mode])}" if mode else ""
    ask = rng.choice(["How do I get from {o} to {d}{m}?", "Directions from {o} to {d}{m}, please.",
                      "How long does it take to go from {o} to {d}{m}?"]).format(o=o, d=d, m=said)
    args = {"origin": o, "destination": d} | ({"mode": mode} if mode else {})
    km = round(rng.uniform(0.5, 40) if o.startswith("the ") else rng.uniform(50, 3000), 1)
    r = {"distance_km": km, "duration_minutes": rng.randint(5, 600), "mode": mode or "driving"}
    return Exchange(ask, _one("get_directions", args, r),
                    f"From {o} to {d} it is {km} km, about {r['duration_minutes']} minutes {r['mode']}.")


def verse(rng, verses) -> Exchange:
    v = rng.choice(verses)
    ask = rng.choice([f"What does {v.reference} say?", f"Look up {v.book} chapter {v.chapter} verse {v.verse}.",
                      f"Quote {v.reference} for me.", f"Find the verse {v.reference}."])
    args = {"book": v.book, "chapter": v.chapter, "verse": v.verse}
    return Exchange(ask, _one("lookup_verse", args, {"reference": v.reference, "text": v.text}),
                    f"{v.reference}: \"{v.text}\"")


# (scenario, relative weight, tools it calls); multi-step and parallel ones are rarer
TOOL_SCENARIOS: tuple[tuple[Scenario, float, tuple[str, ...]], ...] = (
    (weather, 3.0, ("get_weather",)), (weather_pair, 0.7, ("get_weather",)),
    (weather_then_email, 0.6, ("get_weather", "send_email")), (search, 2.0, ("search_web",)),
    (read_file, 1.5, ("read_file",)), (write_file, 1.0, ("write_file",)), (list_directory, 1.0, ("list_directory",)),
    (list_then_read, 0.7, ("list_directory", "read_file")), (email, 1.5, ("send_email",)),
    (calculator, 1.5, ("calculator",)), (calendar, 1.5, ("create_calendar_event",)),
    (stock, 1.2, ("get_stock_price",)), (currency, 1.2, ("convert_currency",)), (translate, 1.0, ("translate_text",)),
    (timer, 1.0, ("set_timer",)), (clock, 1.0, ("get_time",)), (clock_pair, 0.5, ("get_time",)),
    (todo, 1.2, ("create_todo",)), (directions, 1.2, ("get_directions",)), (verse, 1.2, ("lookup_verse",)),
)
