from peak_mcp.cli import main

main()
