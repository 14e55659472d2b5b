"""The worker's internal wire format, spoken by the gateway: /internal/generate, stats, KV events."""
