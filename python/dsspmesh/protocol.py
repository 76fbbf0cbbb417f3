"""Framing of the trainer protocol, version 2.

Every message is a 4-byte little-endian length followed by that many bytes of
UTF-8 JSON: one object with an "op". Tensors never travel on the socket; they
sit in the shared-memory file the node names in its welcome, in three
regions of 4*P bytes each (P float32 parameters): [0] theta, [1] update,
[2] eval; region i starts at byte i*4*P.
"""
import errno
import json
import socket
import struct

from .errors import NodeGone, ProtocolError, Timeout

VERSION = 2

# MAX_FRAME bounds a frame's length: a layout of a large model is a few
# hundred KiB of JSON; anything beyond this is a broken peer.
MAX_FRAME = 64 << 20

REGION_THETA, REGION_UPDATE, REGION_EVAL = 0, 1, 2
REGIONS = 3

_LEN = struct.Struct("<I")

_GONE_ERRNOS = (errno.ECONNREFUSED, errno.ENOENT, errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN)


def encode(msg):
    """The frame of msg (a dict with an "op")."""
    body = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise ProtocolError("message %r of %d bytes exceeds the %d-byte frame limit" % (msg.get("op"), len(body), MAX_FRAME))
    return _LEN.pack(len(body)) + body


def send(sock, msg):
    """Writes msg's frame to sock; NodeGone when the node closed it."""
    data = encode(msg)
    try:
        sock.sendall(data)
    except socket.timeout:
        raise Timeout("sending %r: the node did not read within the timeout" % msg.get("op")) from None
    except OSError as e:
        if e.errno in _GONE_ERRNOS or isinstance(e, (BrokenPipeError, ConnectionError)):
            raise NodeGone("sending %r: %s" % (msg.get("op"), e)) from e
        raise


def _read_exact(sock, n, what):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:], n - got)
        except socket.timeout:
            raise Timeout("waiting for %s: no message from the node within the timeout" % what) from None
        except OSError as e:
            if e.errno in _GONE_ERRNOS or isinstance(e, ConnectionError):
                raise NodeGone("reading %s: %s" % (what, e)) from e
            raise
        if k == 0:
            if got == 0 and what == "a frame":
                raise NodeGone("the node closed the connection (EOF)")
            raise NodeGone("the node closed the connection in the middle of %s (%d of %d bytes)" % (what, got, n))
        got += k
    return buf


def recv(sock):
    """Reads one frame from sock and returns its message (a dict with a
    string "op"). NodeGone on EOF, Timeout when the socket's timeout passes,
    ProtocolError on a malformed frame."""
    (n,) = _LEN.unpack(_read_exact(sock, 4, "a frame"))
    if n > MAX_FRAME:
        raise ProtocolError("frame of %d bytes exceeds the %d-byte limit" % (n, MAX_FRAME))
    body = _read_exact(sock, n, "a %d-byte message" % n)
    try:
        msg = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("frame of %d bytes is not UTF-8 JSON: %s" % (n, e)) from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ProtocolError("message without a string \"op\": %.200r" % (msg,))
    return msg
