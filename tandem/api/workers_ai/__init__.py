"""The Cloudflare Workers AI wire format: /client/v4/accounts/{account_id}/ai/run/{model}."""
