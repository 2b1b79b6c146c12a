"""What a client of the server may reach: the inference endpoints, never the control APIs.

Triton's model-repository API loads any model a caller describes, and a
``file:`` override in that call runs the caller's own ``model.py`` inside
the server; it also unloads ours. The shared-memory API makes the server map
a region by name, and the trace and logging APIs change what the server
writes to its disk. All four answer only a request that carries the
operator header, on HTTP and gRPC alike. The model control mode stays
``explicit``: the generator unloads itself when its engine dies, through
the in-process API, which no header guards.

The key comes from ``TRITONGEN_OPERATOR_KEY`` or is generated at each start
and written to a file only its owner can read. Servers bind to loopback
unless the operator names another address.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

OPERATOR_KEY_ENV = "TRITONGEN_OPERATOR_KEY"
# The HTTP header; Triton expects it over gRPC as metadata with its own prefix.
OPERATOR_HEADER = "tritongen-operator-key"
GRPC_OPERATOR_HEADER = f"triton-grpc-protocol-{OPERATOR_HEADER}"
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
LOOPBACK = "127.0.0.1"


def server_args(host: str, key: str) -> list[str]:
    """tritonserver flags: bind every endpoint to `host`, guard the control APIs with the key."""
    guarded = f"{','.join(RESTRICTED_APIS)}:{OPERATOR_HEADER}={key}"
    return [f"--http-address={host}", f"--grpc-address={host}", f"--metrics-address={host}",
            f"--http-restricted-api={guarded}", f"--grpc-restricted-protocol={guarded}"]


def operator_key(key_file: Path | None = None) -> tuple[str, Path | None]:
    """(key, file it was written to): the environment's key (no file), or a fresh one in an owner-only file.

    Without `key_file` the file is a new one in the temporary directory, so
    servers started side by side never share or overwrite a key.
    """
    given = os.environ.get(OPERATOR_KEY_ENV, "")
    if given:
        if not given.isprintable() or any(c in given for c in " ,:="):
            raise ValueError(f"{OPERATOR_KEY_ENV} must be printable, without spaces, commas, colons or '='")
        return given, None
    key = secrets.token_urlsafe(32)
    if key_file is None:
        fd, name = tempfile.mkstemp(prefix="tritongen-operator-key-")  # created 0600
        key_file = Path(name)
    else:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # an existing file keeps its mode on open: narrow it
        f.write(key + "\n")
    return key, key_file
