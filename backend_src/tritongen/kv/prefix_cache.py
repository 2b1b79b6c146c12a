"""A trie over full KV pages keyed by their tokens: shared prompt prefixes are found, not recomputed.

Each node is one full page; its key is the tuple of that page's tokens and
its position is fixed by its parent chain, so equal paths mean identical
prefixes. When the pool reuses a page, the node and everything below it
leave the trie (their prefixes are no longer complete).

With `events` on, every page that enters the trie is announced (BlockStored,
after its parent) and every page that leaves it too (BlockRemoved): what a
KV-aware router needs to know which prefixes this engine holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .kv_events import BlockRemoved, BlockStored, KvEvent, block_hash
from .page_pool import PagePool


@dataclass(eq=False)
class Node:
    page: int
    key: tuple[int, ...]
    parent: "Node | None"
    children: dict[tuple[int, ...], "Node"] = field(default_factory=dict)
    hash: int | None = None  # the page's block hash, when events are on (the root has none)


class PrefixCache:
    def __init__(self, pool: PagePool):
        self.pool = pool
        self.root = Node(-1, (), None)
        self._by_page: dict[int, Node] = {}
        self.events: list[KvEvent] | None = None  # a list (since the last take_events()) once events are on
        pool.on_reuse = self._drop_page

    def take_events(self) -> list[KvEvent]:
        """The events since the last call, oldest first."""
        if not self.events:
            return []
        taken, self.events = self.events, []
        return taken

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
        if self.events is not None:
            node.hash = block_hash(parent.hash, key)
            self.events.append(BlockStored([node.hash], parent.hash, list(key), self.pool.page_size))
        return node

    def _drop_page(self, page: int) -> None:
        node = self._by_page.get(page)
        if node is None:
            return
        assert node.parent is not None  # only the root has no parent, and it holds no page
        del node.parent.children[node.key]
        stack, removed = [node], []
        while stack:
            n = stack.pop()
            self._by_page.pop(n.page, None)
            if n is not node:
                self.pool.forget(n.page)
            if n.hash is not None:
                removed.append(n.hash)
            stack.extend(n.children.values())
            n.children = {}
        if self.events is not None and removed:
            self.events.append(BlockRemoved(removed))
