"""Import graphs of the repository's Python, for the tests that keep them acyclic."""

from __future__ import annotations

from collections.abc import Mapping, Set


def assert_acyclic(graph: Mapping[str, Set[str]]) -> None:
    """Fail naming the first import cycle of ``graph`` (module -> modules it imports), if there is one."""
    done: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        assert name not in chain, "import cycle: " + " -> ".join((*chain, name))
        if name in done:
            return
        for dep in sorted(graph.get(name, ())):
            visit(dep, (*chain, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())
