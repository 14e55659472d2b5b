"""The demo tool catalog: OpenAI-style function definitions with JSON-schema parameters.

`tool_catalog()` builds fresh dicts on every call, so callers may mutate what they get.
Every schema uses only the subset that `tandem_demo.schema_check` validates.
"""

from __future__ import annotations

DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
TIME_PATTERN = r"^\d{2}:\d{2}$"
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR")
LANGUAGES = ("French", "Spanish", "German", "Italian")
TRAVEL_MODES = ("driving", "walking", "bicycling", "transit")
PRIORITIES = ("low", "medium", "high")


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _s(description: str, **extra) -> dict:
    return {"type": "string", "description": description, **extra}


def _i(description: str, **extra) -> dict:
    return {"type": "integer", "description": description, **extra}


def tool_catalog() -> list[dict]:
    """All demo tools, in a fixed order (names are unique)."""
    return [
        _fn("get_weather", "Get the current weather for a city.",
            {"city": _s("City name, e.g. Paris"),
             "unit": _s("Temperature unit", enum=["celsius", "fahrenheit"])},
            ["city"]),
        _fn("search_web", "Search the web and return the top results.",
            {"query": _s("Search query"),
             "max_results": _i("Number of results to return", minimum=1, maximum=10)},
            ["query"]),
        _fn("read_file", "Read a text file from the workspace.",
            {"path": _s("Path of the file")},
            ["path"]),
        _fn("write_file", "Write text to a file in the workspace, replacing its content.",
            {"path": _s("Path of the file"), "content": _s("Text to write")},
            ["path", "content"]),
        _fn("list_directory", "List the entries of a directory in the workspace.",
            {"path": _s("Path of the directory")},
            ["path"]),
        _fn("send_email", "Send an email.",
            {"to": _s("Recipient email address"), "subject": _s("Subject line"),
             "body": _s("Message body")},
            ["to", "subject", "body"]),
        _fn("calculator", "Evaluate an arithmetic expression.",
            {"expression": _s("Expression using numbers and + - * / ( )")},
            ["expression"]),
        _fn("create_calendar_event", "Create an event in the user's calendar.",
            {"title": _s("Event title"),
             "date": _s("Date as YYYY-MM-DD", pattern=DATE_PATTERN),
             "time": _s("Start time as HH:MM (24h)", pattern=TIME_PATTERN),
             "duration_minutes": _i("Length of the event in minutes", minimum=5, maximum=480),
             "attendees": {"type": "array", "description": "Names of the attendees",
                           "items": {"type": "string"}}},
            ["title", "date"]),
        _fn("get_stock_price", "Get the latest price of a stock by ticker symbol.",
            {"symbol": _s("Ticker symbol, e.g. AAPL", pattern=r"^[A-Z]{1,5}$")},
            ["symbol"]),
        _fn("convert_currency", "Convert an amount of money between currencies.",
            {"amount": {"type": "number", "description": "Amount to convert", "minimum": 0},
             "from_currency": _s("Currency code to convert from", enum=list(CURRENCIES)),
             "to_currency": _s("Currency code to convert to", enum=list(CURRENCIES))},
            ["amount", "from_currency", "to_currency"]),
        _fn("translate_text", "Translate a short text into another language.",
            {"text": _s("Text to translate"),
             "target_language": _s("Language to translate into", enum=list(LANGUAGES))},
            ["text", "target_language"]),
        _fn("set_timer", "Start a countdown timer.",
            {"minutes": _i("Duration in minutes", minimum=1, maximum=720),
             "label": _s("Optional label for the timer")},
            ["minutes"]),
        _fn("get_time", "Get the current local time in a time zone.",
            {"timezone": _s("IANA time zone, e.g. Europe/Paris")},
            ["timezone"]),
        _fn("create_todo", "Add an item to the user's to-do list.",
            {"task": _s("What needs to be done"),
             "priority": _s("Priority of the task", enum=list(PRIORITIES)),
             "due_date": _s("Due date as YYYY-MM-DD", pattern=DATE_PATTERN)},
            ["task"]),
        _fn("get_directions", "Get travel distance and time between two places.",
            {"origin": _s("Starting place"), "destination": _s("Destination"),
             "mode": _s("Travel mode", enum=list(TRAVEL_MODES))},
            ["origin", "destination"]),
        _fn("lookup_verse", "Look up a verse of the King James Bible.",
            {"book": _s("Book name, e.g. Genesis"),
             "chapter": _i("Chapter number", minimum=1),
             "verse": _i("Verse number", minimum=1)},
            ["book", "chapter", "verse"]),
    ]


def tools_by_name(tools: list[dict]) -> dict[str, dict]:
    """name -> the function's parameters schema."""
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}
