"""Anthropic's Messages API (/v1/messages), over the same chat path as the OpenAI routes."""
