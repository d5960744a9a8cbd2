"""The quantised model in a ``.tsr`` file (``model.onnx``) without a second copy of its weights.

The compiled network already stores every weight, bias and requantisation array as an
``arrays/I.npy`` member, and the quantised model's initialisers hold the same bytes (98% of
ResNet-50's). :func:`share_initializers` replaces the data of every initialiser whose bytes
some member holds by an ONNX external-data reference to that member: ``location`` the member's
name, ``offset`` the ``.npy`` header's length, ``length`` the data's. :func:`restore_initializers`
puts the bytes back on load, so the model handed to onnxruntime is the one compiled, byte for
byte. The references are ONNX's own, relative to the archive's root, so ``onnx.load`` of an
unzipped ``.tsr``'s ``model.onnx`` finds the weights too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping

import onnx
from google.protobuf.message import DecodeError

__all__ = ["share_initializers", "restore_initializers", "SHARE_MIN_BYTES", "TsrModelError"]

#: Initialisers smaller than this keep their bytes (a reference costs about 40 bytes).
SHARE_MIN_BYTES = 256
#: The members a reference may name.
_MEMBER = re.compile(r"arrays/[0-9]+\.npy")


class TsrModelError(ValueError):
    """A ``model.onnx`` reference that does not resolve (a damaged or hand-edited file)."""


def share_initializers(qmodel: bytes, members: Mapping[str, tuple[bytes, int]]) -> bytes:
    """``qmodel`` (a serialised ``ModelProto``) with the data of each top-graph initialiser of
    at least :data:`SHARE_MIN_BYTES` stored as ``raw_data`` and held byte for byte by one of
    ``members`` (``name -> (member bytes, offset of the data in them)``) replaced by a
    reference to that member. Returns ``qmodel`` itself if nothing is shared."""
    by_digest: dict[tuple[int, bytes], tuple[str, int]] = {}
    for name, (data, offset) in members.items():
        if not _MEMBER.fullmatch(name):
            raise ValueError(f"members: {name!r} is not an arrays/I.npy member")
        view = memoryview(data)[offset:]
        if len(view) >= SHARE_MIN_BYTES:
            by_digest.setdefault((len(view), hashlib.sha256(view).digest()), (name, offset))
    model = onnx.load_from_string(qmodel)
    shared = 0
    for init in model.graph.initializer:
        if not init.HasField("raw_data") or len(init.raw_data) < SHARE_MIN_BYTES:
            continue
        raw = init.raw_data
        hit = by_digest.get((len(raw), hashlib.sha256(raw).digest()))
        if hit is None:
            continue
        name, offset = hit
        if memoryview(members[name][0])[offset:] != raw:       # a digest collision: keep
            continue
        init.ClearField("raw_data")
        for key, value in (("location", name), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            entry = init.external_data.add()
            entry.key, entry.value = key, value
        init.data_location = onnx.TensorProto.EXTERNAL
        shared += 1
    return model.SerializeToString() if shared else qmodel


def restore_initializers(qmodel: bytes, read: Callable[[str], bytes]) -> bytes:
    """``qmodel`` with every initialiser :func:`share_initializers` made a reference holding its
    bytes again, read with ``read(member name)``: the model as compiled. Raises
    :class:`TsrModelError` naming the initialiser for a reference that is not one of
    ``arrays/I.npy`` or does not fit in its member."""
    try:
        model = onnx.load_from_string(qmodel)
    except DecodeError as e:
        raise TsrModelError(f"model.onnx is not an ONNX model ({e})") from None
    restored = 0
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ref = {e.key: e.value for e in init.external_data}
        where = f"model.onnx initialiser {init.name!r}"
        location = ref.get("location", "")
        if not _MEMBER.fullmatch(location) or set(ref) != {"location", "offset", "length"}:
            raise TsrModelError(f"{where}: external data {ref}, not a reference to an "
                                f"arrays/I.npy member (location, offset, length)")
        try:
            offset, length = int(ref["offset"]), int(ref["length"])
        except ValueError:
            raise TsrModelError(f"{where}: offset {ref['offset']!r} and length "
                                f"{ref['length']!r} must be integers") from None
        data = read(location)
        if offset < 0 or length < 0 or offset + length > len(data):
            raise TsrModelError(f"{where}: bytes {offset}..{offset + length} of {location}, "
                                f"which has {len(data)}")
        init.raw_data = data[offset:offset + length]
        del init.external_data[:]
        init.ClearField("data_location")
        restored += 1
    return model.SerializeToString() if restored else qmodel
