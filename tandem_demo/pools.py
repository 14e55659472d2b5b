"""Fixed word pools the transcript generator draws from (immutable tuples and mappings built on demand)."""

from __future__ import annotations

# (city, IANA time zone)
CITIES = (
    ("Paris", "Europe/Paris"), ("London", "Europe/London"), ("Berlin", "Europe/Berlin"),
    ("Madrid", "Europe/Madrid"), ("Rome", "Europe/Rome"), ("Lisbon", "Europe/Lisbon"),
    ("Amsterdam", "Europe/Amsterdam"), ("Vienna", "Europe/Vienna"), ("Prague", "Europe/Prague"),
    ("Warsaw", "Europe/Warsaw"), ("Stockholm", "Europe/Stockholm"), ("Oslo", "Europe/Oslo"),
    ("Helsinki", "Europe/Helsinki"), ("Dublin", "Europe/Dublin"), ("Zurich", "Europe/Zurich"),
    ("Athens", "Europe/Athens"), ("Istanbul", "Europe/Istanbul"), ("Moscow", "Europe/Moscow"),
    ("Cairo", "Africa/Cairo"), ("Lagos", "Africa/Lagos"), ("Nairobi", "Africa/Nairobi"),
    ("Johannesburg", "Africa/Johannesburg"), ("Dubai", "Asia/Dubai"), ("Mumbai", "Asia/Kolkata"),
    ("Delhi", "Asia/Kolkata"), ("Bangkok", "Asia/Bangkok"), ("Singapore", "Asia/Singapore"),
    ("Hong Kong", "Asia/Hong_Kong"), ("Shanghai", "Asia/Shanghai"), ("Beijing", "Asia/Shanghai"),
    ("Seoul", "Asia/Seoul"), ("Tokyo", "Asia/Tokyo"), ("Osaka", "Asia/Tokyo"), ("Sydney", "Australia/Sydney"),
    ("Melbourne", "Australia/Melbourne"), ("Auckland", "Pacific/Auckland"), ("Honolulu", "Pacific/Honolulu"),
    ("Los Angeles", "America/Los_Angeles"), ("San Francisco", "America/Los_Angeles"),
    ("Seattle", "America/Los_Angeles"), ("Denver", "America/Denver"), ("Chicago", "America/Chicago"),
    ("Houston", "America/Chicago"), ("New York", "America/New_York"), ("Boston", "America/New_York"),
    ("Miami", "America/New_York"), ("Toronto", "America/Toronto"), ("Vancouver", "America/Vancouver"),
    ("Montreal", "America/Toronto"), ("Mexico City", "America/Mexico_City"), ("Lima", "America/Lima"),
    ("Bogota", "America/Bogota"), ("Santiago", "America/Santiago"), ("Buenos Aires", "America/Argentina/Buenos_Aires"),
    ("Sao Paulo", "America/Sao_Paulo"), ("Reykjavik", "Atlantic/Reykjavik"),
)

FIRST_NAMES = (
    "Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Karen", "Liam",
    "Maria", "Noah", "Olivia", "Paul", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Will", "Xena",
    "Yusuf", "Zoe", "Ahmed", "Beatriz", "Chen", "Dmitri", "Elena", "Farah", "Hiro", "Ingrid", "Jonas",
    "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Ravi", "Sofia", "Tomas", "Yara",
)
LAST_NAMES = (
    "Smith", "Jones", "Garcia", "Miller", "Davis", "Lopez", "Wilson", "Taylor", "Moore", "Martin", "Lee",
    "Walker", "Hall", "Young", "King", "Wright", "Scott", "Green", "Baker", "Adams", "Nelson", "Hill",
    "Campbell", "Mitchell", "Roberts", "Carter", "Phillips", "Evans", "Turner", "Parker", "Kim", "Singh",
)
EMAIL_DOMAINS = ("example.com", "mail.com", "acme.io", "corp.net", "school.edu", "startup.dev")

TOPICS = (
    "electric cars", "the history of Rome", "sourdough bread", "quantum computing", "solar panels",
    "marathon training", "the James Webb telescope", "learning Spanish", "home composting", "chess openings",
    "vegan recipes", "the French Revolution", "black holes", "machine learning", "climate change",
    "the Great Barrier Reef", "jazz music", "bird migration", "volcanoes", "ancient Egypt", "coffee brewing",
    "the stock market", "python decorators", "rust programming", "kubernetes", "interest rates",
    "the Olympic games", "honey bees", "renaissance art", "deep sea creatures", "wind turbines",
    "sleep hygiene", "the moon landing", "tea ceremonies", "the Amazon rainforest", "cheap flights to Tokyo",
    "houseplants", "electric bikes", "the Silk Road", "speculative decoding", "KV cache compression",
    "prefix caching", "mechanical keyboards", "knitting patterns", "the printing press", "desert plants",
    "noise cancelling headphones", "the Roman aqueducts", "Mount Everest", "tide pools",
)
SITE_NAMES = ("wikipedia.org", "nature.com", "bbc.co.uk", "nytimes.com", "arxiv.org", "github.com",
              "medium.com", "nationalgeographic.com", "reddit.com", "stackoverflow.com")

DIRS = ("docs", "notes", "src", "data", "reports", "config", "drafts", "logs", "scripts", "home/user")
FILE_STEMS = ("readme", "todo", "plan", "summary", "meeting_notes", "budget", "ideas", "changelog",
              "report", "schedule", "recipes", "shopping_list", "draft", "notes", "settings", "main")
FILE_EXTS = (".txt", ".md", ".json", ".py", ".csv", ".yaml")
FILE_LINES = (
    "Buy milk, eggs and bread.", "Meeting moved to Thursday at 10:00.", "Total budget: 4200 dollars.",
    "Remember to call the plumber.", "Version 2.1 fixes the login bug.", "Ship the release on Friday.",
    "The quarterly revenue grew by 12 percent.", "Draft the proposal for the new client.",
    "Water the plants every Monday.", "Ideas: a garden, a bike trip, a new desk.",
    "Server restarted after the update.", "Read chapter 3 before the seminar.", "Passwords are not stored here.",
    "Lunch with the team next Tuesday.", "The tests pass on all platforms.", "Order more coffee beans.",
    "Hello world.", "Pick up the package from the post office.", "Backup finished without errors.",
    "Finish the slides for the review.",
)

COMPANIES = (
    ("Apple", "AAPL"), ("Microsoft", "MSFT"), ("Google", "GOOGL"), ("Amazon", "AMZN"), ("Tesla", "TSLA"),
    ("Nvidia", "NVDA"), ("Meta", "META"), ("Netflix", "NFLX"), ("Intel", "INTC"), ("IBM", "IBM"),
    ("Oracle", "ORCL"), ("Adobe", "ADBE"), ("Salesforce", "CRM"), ("Disney", "DIS"), ("Nike", "NKE"),
    ("Coca-Cola", "KO"), ("Pepsi", "PEP"), ("Visa", "V"), ("Walmart", "WMT"), ("Boeing", "BA"),
    ("Ford", "F"), ("Pfizer", "PFE"), ("Starbucks", "SBUX"), ("Uber", "UBER"), ("Spotify", "SPOT"),
)

# currency code -> (spoken name, value of one unit in USD)
CURRENCY_INFO = (
    ("USD", "US dollars", 1.0), ("EUR", "euros", 1.08), ("GBP", "British pounds", 1.27),
    ("JPY", "Japanese yen", 0.0067), ("CHF", "Swiss francs", 1.12), ("CAD", "Canadian dollars", 0.74),
    ("AUD", "Australian dollars", 0.66), ("INR", "Indian rupees", 0.012),
)

# phrase -> translations in LANGUAGES order (French, Spanish, German, Italian)
PHRASES = (
    ("Good morning", ("Bonjour", "Buenos dias", "Guten Morgen", "Buongiorno")),
    ("Thank you very much", ("Merci beaucoup", "Muchas gracias", "Vielen Dank", "Grazie mille")),
    ("Where is the train station?", ("Ou est la gare ?", "Donde esta la estacion de tren?",
                                     "Wo ist der Bahnhof?", "Dov'e la stazione?")),
    ("I would like a coffee", ("Je voudrais un cafe", "Quisiera un cafe", "Ich moechte einen Kaffee",
                               "Vorrei un caffe")),
    ("See you tomorrow", ("A demain", "Hasta manana", "Bis morgen", "A domani")),
    ("How much does it cost?", ("Combien ca coute ?", "Cuanto cuesta?", "Wie viel kostet das?", "Quanto costa?")),
    ("Good night", ("Bonne nuit", "Buenas noches", "Gute Nacht", "Buona notte")),
    ("I love this city", ("J'adore cette ville", "Me encanta esta ciudad", "Ich liebe diese Stadt",
                          "Amo questa citta")),
    ("Happy birthday", ("Joyeux anniversaire", "Feliz cumpleanos", "Alles Gute zum Geburtstag",
                        "Buon compleanno")),
    ("The weather is nice today", ("Il fait beau aujourd'hui", "Hace buen tiempo hoy", "Das Wetter ist heute schoen",
                                   "Oggi fa bel tempo")),
    ("Where is the library?", ("Ou est la bibliotheque ?", "Donde esta la biblioteca?", "Wo ist die Bibliothek?",
                               "Dov'e la biblioteca?")),
    ("I am learning to cook", ("J'apprends a cuisiner", "Estoy aprendiendo a cocinar", "Ich lerne kochen",
                               "Sto imparando a cucinare")),
)

EVENT_TITLES = (
    "Team standup", "Dentist appointment", "Lunch with Sam", "Project review", "Yoga class", "Budget meeting",
    "Call with the bank", "Birthday party", "Design workshop", "One-on-one", "Piano lesson", "Book club",
    "Quarterly planning", "Doctor visit", "Coffee with Maria", "Release party", "Interview", "Gym session",
    "Parent teacher meeting", "Flight to Berlin",
)
TODO_TASKS = (
    "renew my passport", "pay the electricity bill", "buy a birthday gift", "clean the garage",
    "book a table for dinner", "fix the leaking tap", "finish the quarterly report", "call grandma",
    "update the resume", "water the plants", "return the library books", "schedule a car service",
    "back up the laptop", "order new glasses", "plan the weekend trip", "reply to the landlord",
    "sort the tax documents", "buy groceries", "walk the dog", "prepare the presentation",
)
TIMER_LABELS = ("tea", "pasta", "laundry", "pomodoro", "oven", "parking", "nap", "workout", "eggs", "meeting")
PLACES = (
    "the airport", "the train station", "the city center", "the office", "the museum", "the stadium",
    "the university", "the beach", "the old town", "the harbor", "the zoo", "the central park",
    "the hospital", "the shopping mall", "the hotel",
)
CONDITIONS = ("sunny", "cloudy", "partly cloudy", "rainy", "windy", "foggy", "snowing", "clear", "stormy", "drizzly")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are Tandem, a concise assistant that uses tools when they help.",
    "You are a helpful assistant with access to tools. Call a tool when the user asks for live data or an action.",
    "You are an efficient personal assistant. Keep answers short.",
    "You are a friendly assistant. Use the tools below to answer the user.",
    "You are an agent that completes tasks by calling functions.",
    "You are a careful assistant. Only call the tools that are listed.",
    "You are the Tandem demo assistant.",
)
