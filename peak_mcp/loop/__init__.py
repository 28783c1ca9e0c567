"""The optimization loop, free of MCP: sessions, the submission pipeline, tuning, profiling, the read side, and
apply_transformation's state machine. Imports every layer below it; nothing of `api`."""
