"""Statements written once as SQLAlchemy Core, compiled once per dialect, run on a cursor.

The statements run on every step or request (read an agent, its steps, the claim) are
SQLAlchemy Core constructs like every other, so SQLite and PostgreSQL share one text
of each. What SQLAlchemy's execution path does per call besides (cache lookup,
execution context, result processing) costs CPU per statement beyond a DBAPI cursor's,
enough to lower a worker's agents/s visibly (BENCHMARKS.md); so a `Prebuilt`
statement is compiled once per dialect, through public APIs only (the compiled
string, its bind parameters and their types' processors), and runs on the DBAPI
cursor of a pooled connection (store/connections.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Dialect
from sqlalchemy.sql.expression import Executable, ReturnsRows

Processor = Callable[[Any], Any]


@dataclass(frozen=True)
class Compiled:
    """One statement as one dialect runs it."""

    sql: str
    positional: tuple[str, ...] | None  # the parameters' order, for a positional paramstyle
    constants: dict[str, Any]  # the values of its literal parameters
    bind_processors: tuple[tuple[str, Processor], ...]
    columns: tuple[str, ...]  # the names of the rows' columns
    result_processors: tuple[tuple[int, Processor], ...]

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """The DBAPI parameters of one execution with these `values`."""
        params = {**self.constants, **values}
        for name, process in self.bind_processors:
            params[name] = process(params[name])
        if self.positional is None:
            return params
        return tuple(params[name] for name in self.positional)

    def row(self, raw: Any) -> dict[str, Any]:
        """A row as the cursor returned it, with its columns' types applied, by name."""
        values = list(raw)
        for index, process in self.result_processors:
            values[index] = process(values[index])
        return dict(zip(self.columns, values, strict=True))


class Prebuilt:
    """A statement compiled at its first use on each dialect, and kept."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._compiled: dict[str, Compiled] = {}

    def on(self, dialect: Dialect) -> Compiled:
        key = f"{dialect.name}+{dialect.driver}"
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = _compile(self.statement, dialect)
        return compiled


def _compile(statement: Executable, dialect: Dialect) -> Compiled:
    compiled = statement.compile(dialect=dialect)
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    constants = {name: bind.value for name, bind in binds.items() if not bind.required}
    bind_processors = tuple(
        (name, process) for name, bind in binds.items()
        if (process := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
    )
    columns: tuple[Any, ...] = (
        tuple(statement.exported_columns) if isinstance(statement, ReturnsRows) else ()
    )
    result_processors = tuple(
        (index, process) for index, column in enumerate(columns)
        if (process := column.type.dialect_impl(dialect).result_processor(dialect, None)) is not None
    )
    positional = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
    return Compiled(
        sql=compiled.string, positional=positional, constants=constants,
        bind_processors=bind_processors, columns=tuple(column.name for column in columns),
        result_processors=result_processors,
    )
