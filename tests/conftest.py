"""Shared fixtures. Tests run against a real PostgreSQL: the embedded server, or DATABASE_URL."""
