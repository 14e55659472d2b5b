"""One conversational turn: the chat request read from its body, its tools and structured output
made into a grammar, and the engine's deltas parsed back into content, reasoning and tool calls."""
