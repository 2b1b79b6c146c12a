"""tritongen as a worker of NVIDIA Dynamo: one worker per Triton server, Dynamo's frontend and KV router in front.

Why Dynamo and not a router of our own: its frontend owns HTTP, the chat template and tokenization, and its KV
router picks the replica that already holds a prompt's prefix, from the KV events our generator publishes. The
worker only translates token ids in and out over Triton gRPC streaming; Triton stays the serving runtime.

This package imports nothing of Dynamo at its top: the worker (`python -m tritongen.dynamo`) runs in
`.venv-dynamo`, the cluster launcher (`python -m tritongen.dynamo.cluster`, `make serve-dynamo`) in `.venv`.
"""
