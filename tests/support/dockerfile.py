"""The Dockerfile read as Docker reads it, for the tests of what the image builds."""

from __future__ import annotations

from tests.conftest import ROOT


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each instruction, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped.removesuffix("\\").strip() + " "
        if not stripped.endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def build_stage_copies() -> list[str]:
    """What the image's build stage copies from the build context, each to the same path."""
    sources = []
    for instruction, args in dockerfile_instructions():
        if instruction != "COPY" or args.startswith("--"):
            continue
        *copied, destination = args.split()
        for source in copied:
            assert destination.rstrip("/") in (".", f"./{source}", f"./{source.rpartition('/')[0]}"), (
                f"COPY {args}: the tests stage {source} at its own path")
        sources += copied
    return sources
