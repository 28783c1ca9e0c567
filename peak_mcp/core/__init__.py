"""The core: settings, errors, devices, element types, the `// peak:` launch annotations, bounded text, units and
the timing policy. Imports nothing of peak_mcp outside itself."""
