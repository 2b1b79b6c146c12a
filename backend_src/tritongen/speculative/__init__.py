"""Speculative decoding: one verifier, several proposers (draft model, prompt lookup, MTP, EAGLE-3, shared-KV)."""
