from peak_mcp.api.cli import main

main()
