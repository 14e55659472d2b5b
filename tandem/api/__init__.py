"""The HTTP API that workers and the gateway both serve, one folder per wire format (openai/,
anthropic/, workers_ai/, internal/), and what every route shares (errors, fields, auth, runs)."""
