"""What is recorded and how it reads: SQLite sessions, versions and apply runs, the typed rows, reports (speedups,
% of peak and of the vendor), the lineage chart, leases. Imports `core` and `evaluation`'s records."""
