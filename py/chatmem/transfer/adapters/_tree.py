"""Split a message tree (ChatGPT's ``mapping``, Claude's parent links) into lines.

A *line* is a root-to-leaf path. The main line ends at the conversation's
current leaf; every other branch becomes a line that shares its parent line's
nodes up to the branch point and then follows its own nodes, always taking
the newest (last) child. Adapters import the main line as a session and each
other line as a fork of its parent line's session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["Line", "split_lines"]


@dataclass(slots=True)
class Line:
    #: node ids from the root to the leaf
    nodes: list[str]
    #: index (in the returned list) of the line this one branches from; None for the main line
    parent: int | None
    #: position in ``nodes`` where this line's own nodes start (0 for the main line)
    own_from: int


def _path_to(leaf: str, parent_of: Mapping[str, str | None]) -> list[str]:
    path: list[str] = []
    seen: set[str] = set()
    node: str | None = leaf
    while node is not None and node in parent_of and node not in seen:
        seen.add(node)
        path.append(node)
        node = parent_of[node]
    path.reverse()
    return path


def _descend(start: str, children_of: Mapping[str, Sequence[str]], taken: set[str]) -> list[str]:
    """From ``start``, always to the newest child not taken yet: linear in the path's length."""
    path = [start]
    on_path = {start}
    node = start
    while True:
        node_next = None
        for c in reversed(children_of.get(node, ())):
            if c not in taken and c not in on_path:
                node_next = c
                break
        if node_next is None:
            return path
        node = node_next
        path.append(node)
        on_path.add(node)


def split_lines(
    parent_of: Mapping[str, str | None],
    children_of: Mapping[str, Sequence[str]],
    leaf: str | None,
) -> list[Line]:
    """Every node of the tree on exactly one line's own part; the main line first.

    ``parent_of`` maps every node to its parent (None, or an id not in the
    map, for a root). ``children_of`` lists children oldest first. When
    ``leaf`` is missing or unknown the main line ends at the newest leaf
    reached from the first root.
    """
    nodes = list(parent_of)
    if not nodes:
        return []
    roots = [n for n in nodes if parent_of[n] is None or parent_of[n] not in parent_of]
    taken: set[str] = set()
    if leaf is not None and leaf in parent_of:
        main = _path_to(leaf, parent_of)
    else:
        main = _descend(roots[0] if roots else nodes[0], children_of, taken)
    lines = [Line(main, None, 0)]
    taken.update(main)
    i = 0
    while True:
        while i < len(lines):
            line = lines[i]
            for pos in range(line.own_from, len(line.nodes)):
                node = line.nodes[pos]
                nxt = line.nodes[pos + 1] if pos + 1 < len(line.nodes) else None
                for child in children_of.get(node, ()):
                    if child == nxt or child in taken or child not in parent_of:
                        continue
                    branch = _descend(child, children_of, taken)
                    taken.update(branch)
                    lines.append(Line(line.nodes[: pos + 1] + branch, i, pos + 1))
            i += 1
        # trees not reachable from the main root (several roots, broken links): forks at 0
        rest = [n for n in roots if n not in taken] or [n for n in nodes if n not in taken]
        if not rest:
            return lines
        branch = _descend(rest[0], children_of, taken)
        taken.update(branch)
        lines.append(Line(branch, 0, 0))
