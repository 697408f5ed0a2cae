"""The PostgreSQL backend (`queue: {backend: postgres}`): shared state for processes on many hosts.

Imported only when that backend is configured or a `db` command runs, so the embedded file backend
never loads psycopg or Procrastinate. `db` connects, `schema` creates and checks the tables.
"""
