"""The Triton side: the Python-backend model, request parsing and limits, responses, metrics, server
lockdown. The only package that imports Triton."""
