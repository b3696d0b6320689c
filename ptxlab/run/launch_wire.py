"""The launch service's wire format, shared by its client and its server.

A message is a frame: two lengths, a JSON header, and a payload of raw bytes. A launch request's
arguments travel as numpy data only (dtype, shape, bytes): the server never unpickles what a
client sends, so learner code that reaches the socket can only ask for launches. Every field of
a request is checked here (:func:`launch_request`), including the source's size and the compiler
options (:mod:`ptxlab.run.launch_request`).
"""
from __future__ import annotations

import json
import socket
import struct
from typing import Any, Sequence

import numpy as np

from .launch_request import MAX_SOURCE_BYTES, check_options, check_source

__all__ = ["FRAME", "MAX_HEADER_BYTES", "MAX_PAYLOAD_BYTES", "recv_exact", "send_frame",
           "recv_frame", "encode_args", "decode_args", "launch_request", "BACKENDS"]

#: Largest request header the server reads: the source (at most MAX_SOURCE_BYTES, escaped in
#: JSON up to six bytes a byte) and the other fields.
MAX_HEADER_BYTES = 6 * MAX_SOURCE_BYTES + 2**20
MAX_PAYLOAD_BYTES = 1024 * 2**20
BACKENDS = ("auto", "gpu", "cpu")
FRAME = struct.Struct(">QQ")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 4 * 2**20))
        if not chunk:
            raise EOFError("the connection closed mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_frame(sock: socket.socket, header: dict, payload: bytes = b"") -> None:
    head = json.dumps(header).encode()
    sock.sendall(FRAME.pack(len(head), len(payload)) + head)
    if payload:
        sock.sendall(payload)


def recv_frame(sock: socket.socket, *, max_header: int = MAX_HEADER_BYTES,
               max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[dict, bytes]:
    n_head, n_payload = FRAME.unpack(recv_exact(sock, FRAME.size))
    if n_head > max_header or n_payload > max_payload:
        raise ValueError(f"message too large ({n_head} + {n_payload} bytes)")
    header = json.loads(recv_exact(sock, n_head))
    if not isinstance(header, dict):
        raise ValueError("the message header is not a JSON object")
    return header, recv_exact(sock, n_payload) if n_payload else b""


def encode_args(args: Sequence) -> tuple[list[dict], bytes]:
    """Each numpy array or scalar as (dtype, shape, bytes): data only, no pickle."""
    specs, blobs = [], []
    for a in args:
        # (ascontiguousarray would make a scalar a 1-element array)
        arr = np.asarray(a) if isinstance(a, np.generic) else np.ascontiguousarray(a)
        if arr.dtype.hasobject or arr.dtype.kind not in "biufc":
            raise TypeError(f"a launch argument of dtype {arr.dtype} cannot be sent to a kernel")
        specs.append({"dtype": arr.dtype.str, "shape": list(arr.shape),
                      "scalar": isinstance(a, np.generic), "nbytes": arr.nbytes})
        blobs.append(arr.tobytes())
    return specs, b"".join(blobs)


def decode_args(specs: Any, payload: bytes) -> list:
    """The client's arguments, refusing anything but plain numeric arrays and scalars."""
    if not isinstance(specs, list):
        raise ValueError("args must be a list")
    out, offset = [], 0
    for spec in specs:
        if not isinstance(spec, dict):
            raise ValueError("each argument must be described by an object")
        dtype = np.dtype(str(spec.get("dtype", "")))
        if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None:
            raise ValueError(f"argument dtype {dtype} is not a plain number type")
        shape = spec.get("shape")
        if (not isinstance(shape, list) or len(shape) > 8
                or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError("argument shape must be a list of non-negative integers")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes != spec.get("nbytes") or offset + nbytes > len(payload):
            raise ValueError("argument sizes do not match the data sent")
        arr = np.frombuffer(payload, dtype=dtype, count=nbytes // dtype.itemsize,
                            offset=offset).reshape(shape).copy()
        offset += nbytes
        out.append(arr[()] if spec.get("scalar") is True and arr.ndim == 0 else arr)
    if offset != len(payload):
        raise ValueError("more data was sent than the arguments describe")
    return out


def _dims(value: Any, what: str) -> tuple[int, ...]:
    if (not isinstance(value, list) or not 1 <= len(value) <= 3
            or not all(isinstance(d, int) and d >= 1 for d in value)):
        raise ValueError(f"{what} must be 1 to 3 positive integers")
    return tuple(value)


def launch_request(header: dict, payload: bytes) -> dict:
    """``run_here`` keyword arguments from a request, every field checked (``ValueError``, or
    :class:`~ptxlab.run.errors.RequestRefused` for a source or option over the limits)."""
    source, kernel = header.get("source"), header.get("kernel")
    options, backend = header.get("options", []), header.get("backend", "auto")
    shared_mem = header.get("shared_mem", 0)
    if not isinstance(source, str) or not isinstance(kernel, str):
        raise ValueError("source and kernel must be strings")
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ValueError("options must be a list of strings")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}")
    if not isinstance(shared_mem, int) or shared_mem < 0:
        raise ValueError("shared_mem must be a non-negative integer")
    check_source(source)
    return dict(source=source, kernel=kernel, grid=_dims(header.get("grid"), "grid"),
                block=_dims(header.get("block"), "block"),
                args=decode_args(header.get("args", []), payload), shared_mem=shared_mem,
                backend=backend, options=check_options(options))
