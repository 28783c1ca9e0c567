"""The natural transformations: their texts, the brief an LLM gets to carry one out, and the ranking of what to try
next. Imports `core`, `problems`, `store`."""
