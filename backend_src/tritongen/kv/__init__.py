"""Host-side paged KV store: page pool with refcounts, prefix trie over full pages."""
