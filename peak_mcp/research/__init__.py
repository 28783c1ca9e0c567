"""Experiments beside the server, as an MCP client (issue 36): a planned run of catalog transformations x repeats
through apply_transformation, the model that answers the server's sampling requests (a folder exchange, so a person
or another program can be the LLM, or the replay of a recorded run), and the reports PEAK gives (success rate and
error classes per transformation). The server stays the one place that compiles, checks and times: this package
only calls its tools. It imports no other peak_mcp layer; api's command line hands it the server to connect to."""
