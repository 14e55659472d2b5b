"""tandem's own demo models: corpus, tokenizer, training and evaluation of a small target/draft pair."""
