"""What the project's SQL stores (the preference history index, the teacher call cache in a database)
share: one SQLAlchemy Core path for sqlite and Postgres, whose only difference here is the dialect's
`INSERT ... ON CONFLICT`."""

from __future__ import annotations

from typing import Any


def insert_for(dialect: str) -> Any:
    """The dialect's `insert` (sqlite or postgresql), whose statements take `on_conflict_do_nothing` and
    `on_conflict_do_update`: a row written twice (two processes indexing the same lines) is written once."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise ValueError(
            f"database {dialect!r} is not supported: use sqlite:///PATH or postgresql+psycopg2://USER@HOST:PORT/DB"
        )
    return insert
