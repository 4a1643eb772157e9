"""A real database in one process: each contract written once and run on SQLite and on PostgreSQL (the PostgreSQL classes start a throwaway server)."""
