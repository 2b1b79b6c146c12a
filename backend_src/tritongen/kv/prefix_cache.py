"""A trie over full KV pages keyed by their tokens: shared prompt prefixes are found, not recomputed.

Each node is one full page; its key is the tuple of that page's tokens and
its position is fixed by its parent chain, so equal paths mean identical
prefixes. When the pool reuses a page, the node and everything below it
leave the trie (their prefixes are no longer complete).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .page_pool import PagePool


@dataclass(eq=False)
class Node:
    page: int
    key: tuple[int, ...]
    parent: "Node | None"
    children: dict[tuple[int, ...], "Node"] = field(default_factory=dict)


class PrefixCache:
    def __init__(self, pool: PagePool):
        self.pool = pool
        self.root = Node(-1, (), None)
        self._by_page: dict[int, Node] = {}
        pool.on_reuse = self._drop_page

    def __contains__(self, page: int) -> bool:
        return page in self._by_page

    def match(self, tokens: list[int]) -> tuple[list[int], Node]:
        """Pages of the longest cached run of full pages that prefixes `tokens`, and its last node."""
        ps = self.pool.page_size
        node, pages = self.root, []
        for start in range(0, len(tokens) - ps + 1, ps):
            child = node.children.get(tuple(tokens[start:start + ps]))
            if child is None:
                break
            node = child
            pages.append(node.page)
        return pages, node

    def insert(self, parent: Node, key: tuple[int, ...], page: int) -> Node | None:
        """Register a full page under `parent`; an existing equal page wins and is returned.

        None when `parent` has left the trie (its prefix is no longer cached).
        """
        if parent is not self.root and self._by_page.get(parent.page) is not parent:
            return None
        existing = parent.children.get(key)
        if existing is not None:
            return existing
        node = Node(page, key, parent)
        parent.children[key] = node
        self._by_page[page] = node
        return node

    def _drop_page(self, page: int) -> None:
        node = self._by_page.get(page)
        if node is None:
            return
        assert node.parent is not None  # only the root has no parent, and it holds no page
        del node.parent.children[node.key]
        stack = [node]
        while stack:
            n = stack.pop()
            self._by_page.pop(n.page, None)
            if n is not node:
                self.pool.forget(n.page)
            stack.extend(n.children.values())
            n.children = {}
